# Source: allenai/open-instruct, open_instruct/dpo_utils.py (simpo_loss, compute_loss, _get_batch_logps, concatenated_inputs, concatenated_forward) + open_instruct/padding_free_collator.py (calculate_per_token_logps) + open_instruct/dataset_transformation.py (preference_tulu_tokenize_and_truncate_v1) + open_instruct/dpo_tune_cache.py (training loop), commit 62cf929f7bf9b58ff8e086db7aa41a0adc872ea7
# Report: https://github.com/allenai/open-instruct/pull/1685
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from transformers import GPT2Config, GPT2LMHeadModel, get_scheduler

MASKED_TOKEN_VALUE = -100


def pad_to_length(tensor, length, pad_value, dim=-1):
    if tensor.size(dim) >= length:
        return tensor
    pad_size = list(tensor.shape)
    pad_size[dim] = length - tensor.size(dim)
    return torch.cat([tensor, pad_value * torch.ones(*pad_size, dtype=tensor.dtype, device=tensor.device)], dim=dim)


def calculate_per_token_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    shifted_labels = torch.full_like(labels, -100)
    shifted_labels[:, :-1] = labels[:, 1:]

    logits = logits.to(torch.float32)
    safe = shifted_labels.clamp(min=0)
    return torch.gather(logits.log_softmax(-1), 2, safe.unsqueeze(2)).squeeze(2)


def simpo_loss(policy_chosen_logps, policy_rejected_logps, beta, gamma_beta_ratio, label_smoothing=0.0):
    pi_logratios = policy_chosen_logps - policy_rejected_logps
    logits = pi_logratios - gamma_beta_ratio

    # sigmoid loss type from SimPO.
    losses = -F.logsigmoid(beta * logits) * (1 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing

    chosen_rewards = (beta * policy_chosen_logps).detach()
    rejected_rewards = (beta * policy_rejected_logps).detach()

    return losses, chosen_rewards, rejected_rewards


def compute_loss(args, batch, policy_chosen_logps, policy_rejected_logps, reference_cache=None):
    if args["loss_type"] == "simpo":
        return simpo_loss(policy_chosen_logps, policy_rejected_logps, beta=args["beta"],
                          gamma_beta_ratio=args["gamma_beta_ratio"], label_smoothing=args["label_smoothing"])
    raise ValueError(f"Unknown loss type: {args['loss_type']}")


def _get_batch_logps(per_token_logps: torch.Tensor, labels: torch.Tensor, average_log_prob: bool = False) -> torch.Tensor:
    per_token_logps = per_token_logps[:, :-1]
    loss_mask = labels[:, 1:] != -100

    if average_log_prob:
        return (per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)
    else:
        return (per_token_logps * loss_mask).sum(-1)


def concatenated_inputs(batch):
    chosen_input_ids = batch["chosen_input_ids"]
    rejected_input_ids = batch["rejected_input_ids"]
    max_length = max(chosen_input_ids.shape[1], rejected_input_ids.shape[1])
    concatenated_batch = {}
    for k in batch:
        v = batch[k]
        if k.startswith("chosen") and isinstance(v, torch.Tensor):
            pad_value = -100 if "labels" in k else 0
            concatenated_key = k.replace("chosen", "concatenated")
            concatenated_batch[concatenated_key] = pad_to_length(v, max_length, pad_value=pad_value)
    for k in batch:
        v = batch[k]
        if k.startswith("rejected") and isinstance(v, torch.Tensor):
            pad_value = -100 if "labels" in k else 0
            concatenated_key = k.replace("rejected", "concatenated")
            concatenated_batch[concatenated_key] = torch.cat(
                (concatenated_batch[concatenated_key], pad_to_length(v, max_length, pad_value=pad_value)), dim=0)
    return concatenated_batch


def concatenated_forward(model, batch, average_log_prob=False):
    concatenated_batch = concatenated_inputs(batch)
    inputs = {
        k.replace("concatenated_", ""): v
        for k, v in concatenated_batch.items()
        if k.startswith("concatenated_") and not k.endswith("labels")
    }
    logits = model(**inputs).logits
    concatenated_labels = concatenated_batch["concatenated_labels"]
    per_token_logps = calculate_per_token_logps(logits, concatenated_labels)
    all_logps = _get_batch_logps(per_token_logps, concatenated_labels, average_log_prob=average_log_prob)
    bs = batch["chosen_input_ids"].shape[0]
    return all_logps[:bs], all_logps[bs:], None


def tokenize_and_truncate(prompt_ids, response_ids, max_seq_length):
    input_ids = (prompt_ids + response_ids)[:max_seq_length]
    labels = ([MASKED_TOKEN_VALUE] * len(prompt_ids) + response_ids)[:max_seq_length]
    return {"input_ids": input_ids, "labels": labels, "attention_mask": [1] * len(input_ids)}


def preference_tulu_tokenize_and_truncate_v1(row, max_seq_length):
    chosen_encoded = tokenize_and_truncate(row["prompt"], row["chosen"], max_seq_length)
    rejected_encoded = tokenize_and_truncate(row["prompt"], row["rejected"], max_seq_length)
    return {
        "chosen_input_ids": chosen_encoded["input_ids"],
        "chosen_labels": chosen_encoded["labels"],
        "chosen_attention_mask": chosen_encoded["attention_mask"],
        "rejected_input_ids": rejected_encoded["input_ids"],
        "rejected_labels": rejected_encoded["labels"],
        "rejected_attention_mask": rejected_encoded["attention_mask"],
    }


def make_preference_rows(n, seed):
    """Synthetic preference pairs: chosen responses continue the prompt's last token (+1, +2, ...), rejected are random.
    Prompt lengths vary like real chat prompts; a few are longer than max_seq_length."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        plen = int(torch.randint(4, 28, (1,), generator=g)) if torch.rand(1, generator=g) > 0.05 else 40
        prompt = torch.randint(3, 60, (plen,), generator=g).tolist()
        chosen = [(prompt[-1] + k) % 60 + 3 for k in range(1, 7)]
        rejected = torch.randint(3, 63, (6,), generator=g).tolist()
        rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    return rows


def collate(features):
    result = {}
    for prefix in ["chosen_", "rejected_"]:
        max_len = max(len(f[prefix + "input_ids"]) for f in features)
        for key, pad in [("input_ids", 0), ("attention_mask", 0), ("labels", -100)]:
            result[prefix + key] = torch.tensor([f[prefix + key] + [pad] * (max_len - len(f[prefix + key])) for f in features])
    return result


def main():
    torch.manual_seed(123)
    args = {"loss_type": "simpo", "beta": 2.0, "gamma_beta_ratio": 0.3, "label_smoothing": 0.0, "max_seq_length": 32,
            "learning_rate": 5e-4, "max_grad_norm": 1.0, "num_epochs": 2, "per_device_train_batch_size": 8,
            "logging_steps": 10}
    train_dataset = [preference_tulu_tokenize_and_truncate_v1(r, args["max_seq_length"]) for r in make_preference_rows(320, 0)]
    train_dataloader = DataLoader(train_dataset, shuffle=True, collate_fn=collate, batch_size=args["per_device_train_batch_size"])
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                       bos_token_id=1, eos_token_id=2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args["learning_rate"])
    num_training_steps = args["num_epochs"] * len(train_dataloader)
    lr_scheduler = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=int(0.1 * num_training_steps),
                                 num_training_steps=num_training_steps)
    completed_steps = 0
    local_metrics = {"train_loss": 0.0, "rewards/accuracy": 0.0, "rewards/margin": 0.0}
    for epoch in range(args["num_epochs"]):
        model.train()
        # we need to average the log probs for simpo loss
        for batch in train_dataloader:
            policy_chosen_logps, policy_rejected_logps, aux_loss = concatenated_forward(
                model, batch, average_log_prob=True)
            losses, chosen_rewards, rejected_rewards = compute_loss(args, batch, policy_chosen_logps, policy_rejected_logps)
            loss = losses.mean()
            loss.backward()
            # clip gradient norm. don't do this with deepspeed
            if args["max_grad_norm"]:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args["max_grad_norm"])
            optimizer.step()
            optimizer.zero_grad()
            lr_scheduler.step()

            with torch.no_grad():
                local_metrics["train_loss"] += loss.item()
                local_metrics["rewards/accuracy"] += (chosen_rewards > rejected_rewards).float().mean().item()
                local_metrics["rewards/margin"] += (chosen_rewards - rejected_rewards).mean().item()
            completed_steps += 1
            if completed_steps % args["logging_steps"] == 0:
                print("epoch {} step {} train_loss {:.4f} rewards/accuracy {:.3f} rewards/margin {:.3f}".format(
                    epoch, completed_steps, *(v / args["logging_steps"] for v in local_metrics.values())))
                local_metrics = {k: 0.0 for k in local_metrics}


if __name__ == "__main__":
    main()
