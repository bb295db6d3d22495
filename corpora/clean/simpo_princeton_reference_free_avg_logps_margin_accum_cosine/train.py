# Source: princeton-nlp/SimPO, scripts/simpo_trainer.py, scripts/simpo_config.py, training_configs/llama-3-8b-base-simpo.yaml, commit 1b3e8f3528a23bce3da514a2dce8ea7490d4bc75
# https://github.com/princeton-nlp/SimPO
#
# SimPO (reference-free preference optimisation): chosen and rejected sequences are padded to a common length and
# concatenated into ONE forward pass; labels are -100 on the prompt (and on padding) and get_batch_logps shifts
# labels/logits by one, replaces -100 by a dummy 0 in a cloned label tensor and returns the LENGTH-AVERAGED log-prob;
# the loss is -logsigmoid(beta * (avg_logp_chosen - avg_logp_rejected - gamma/beta)) with no reference model;
# "rewards" are beta * avg_logp (detached, negative); sft_weight 0 so the SFT branch is off; HF Trainer semantics:
# loss / gradient_accumulation_steps, clip_grad_norm 1.0, AdamW, cosine schedule with warmup_ratio 0.1 stepped per
# optimiser step.
# Adaptation: no accelerate/trl/datasets/GPU and no Llama-3 download: a randomly initialised 2-layer GPT-2
# (transformers, vocab 64, n_embd 64) replaces the SFT model; prompts/responses are pre-tokenised synthetic
# sequences (chosen = the prompt's tokens sorted, rejected = random tokens of a different length) with the BOS/EOS
# and -100 prompt-label construction of tokenize_row; DPODataCollatorWithPadding -> right padding (0 / -100 / 0);
# the Trainer loop is written out; config beta 2.0, gamma_beta_ratio 0.5, sigmoid loss, cosine, warmup 0.1 kept;
# lr 6e-7 -> 1e-3, per-device batch 2 -> 8, gradient_accumulation 16 -> 4, bf16 off, 1 epoch of 640 pairs.
import math
import random
from types import SimpleNamespace
from typing import Dict, List, Literal, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, get_cosine_schedule_with_warmup


def pad_to_length(tensor: torch.Tensor, length: int, pad_value: Union[int, float], dim: int = -1) -> torch.Tensor:
    """trl.trainer.utils.pad_to_length"""
    if tensor.size(dim) >= length:
        return tensor
    else:
        pad_size = list(tensor.shape)
        pad_size[dim] = length - tensor.size(dim)
        return torch.cat(
            [
                tensor,
                pad_value * torch.ones(*pad_size, dtype=tensor.dtype, device=tensor.device),
            ],
            dim=dim,
        )


class SimPOTrainer:
    """the loss-side methods of scripts/simpo_trainer.py; the HF Trainer loop is in main()."""

    def __init__(self, model, args):
        self.model = model
        self.is_encoder_decoder = False
        self.label_pad_token_id = args.label_pad_token_id
        self.padding_value = args.padding_value
        self.beta = args.beta
        self.gamma_beta_ratio = args.gamma_beta_ratio
        self.sft_weight = args.sft_weight
        self.label_smoothing = args.label_smoothing
        self.loss_type = args.loss_type
        self.accelerator = SimpleNamespace(device=torch.device("cpu"))

    @staticmethod
    def concatenated_inputs(
        batch: Dict[str, Union[List, torch.LongTensor]],
        is_encoder_decoder: bool = False,
        label_pad_token_id: int = -100,
        padding_value: int = 0,
        device: Optional[torch.device] = None,
    ) -> Dict[str, torch.LongTensor]:
        """Concatenate the chosen and rejected inputs into a single tensor.

        Args:
            batch: A batch of data. Must contain the keys 'chosen_input_ids' and 'rejected_input_ids', which are tensors of shape (batch_size, sequence_length).
            is_encoder_decoder: Whether the model is an encoder-decoder model.
            label_pad_token_id: The label pad token id.
            padding_value: The padding value to use for the concatenated inputs_ids.
            device: The device for the concatenated inputs.

        Returns:
            A dictionary containing the concatenated inputs under the key 'concatenated_input_ids'.
        """
        concatenated_batch = {}

        if is_encoder_decoder:
            max_length = max(batch["chosen_labels"].shape[1], batch["rejected_labels"].shape[1])
        else:
            max_length = max(batch["chosen_input_ids"].shape[1], batch["rejected_input_ids"].shape[1])

        for k in batch:
            if k.startswith("chosen") and isinstance(batch[k], torch.Tensor):
                if "labels" in k or is_encoder_decoder:
                    pad_value = label_pad_token_id
                elif k.endswith("_input_ids"):
                    pad_value = padding_value
                elif k.endswith("_attention_mask"):
                    pad_value = 0
                concatenated_key = k.replace("chosen", "concatenated")
                concatenated_batch[concatenated_key] = pad_to_length(batch[k], max_length, pad_value=pad_value)
        for k in batch:
            if k.startswith("rejected") and isinstance(batch[k], torch.Tensor):
                if "labels" in k or is_encoder_decoder:
                    pad_value = label_pad_token_id
                elif k.endswith("_input_ids"):
                    pad_value = padding_value
                elif k.endswith("_attention_mask"):
                    pad_value = 0
                concatenated_key = k.replace("rejected", "concatenated")
                concatenated_batch[concatenated_key] = torch.cat(
                    (
                        concatenated_batch[concatenated_key],
                        pad_to_length(batch[k], max_length, pad_value=pad_value),
                    ),
                    dim=0,
                ).to(device=device)

        if is_encoder_decoder:
            concatenated_batch["concatenated_input_ids"] = batch["prompt_input_ids"].repeat(2, 1).to(device=device)
            concatenated_batch["concatenated_attention_mask"] = (
                batch["prompt_attention_mask"].repeat(2, 1).to(device=device)
            )

        return concatenated_batch

    def simpo_loss(
        self,
        policy_chosen_logps: torch.FloatTensor,
        policy_rejected_logps: torch.FloatTensor,
    ) -> Tuple[torch.FloatTensor, torch.FloatTensor, torch.FloatTensor]:
        """Compute the SimPO loss for a batch of policy model log probabilities.

        Args:
            policy_chosen_logps: Log probabilities of the policy model for the chosen responses. Shape: (batch_size,)
            policy_rejected_logps: Log probabilities of the policy model for the rejected responses. Shape: (batch_size,)

        Returns:
            A tuple of three tensors: (losses, chosen_rewards, rejected_rewards).
            The losses tensor contains the SimPO loss for each example in the batch.
            The chosen_rewards and rejected_rewards tensors contain the rewards for the chosen and rejected responses, respectively.
        """
        pi_logratios = policy_chosen_logps - policy_rejected_logps
        pi_logratios = pi_logratios.to(self.accelerator.device)
        logits = pi_logratios - self.gamma_beta_ratio

        if self.loss_type == "sigmoid":
            losses = (
                -F.logsigmoid(self.beta * logits) * (1 - self.label_smoothing)
                - F.logsigmoid(-self.beta * logits) * self.label_smoothing
            )
        elif self.loss_type == "hinge":
            losses = torch.relu(1 - self.beta * logits)
        else:
            raise ValueError(
                f"Unknown loss type: {self.loss_type}. Should be one of ['sigmoid', 'hinge']"
            )

        chosen_rewards = self.beta * policy_chosen_logps.to(self.accelerator.device).detach()
        rejected_rewards = self.beta * policy_rejected_logps.to(self.accelerator.device).detach()

        return losses, chosen_rewards, rejected_rewards

    def concatenated_forward(
        self, model: nn.Module, batch: Dict[str, Union[List, torch.LongTensor]]
    ) -> Tuple[torch.FloatTensor, torch.FloatTensor, torch.FloatTensor, torch.FloatTensor]:
        """Run the given model on the given batch of inputs, concatenating the chosen and rejected inputs together.

        We do this to avoid doing two forward passes, because it's faster for FSDP.
        """
        concatenated_batch = self.concatenated_inputs(
            batch,
            is_encoder_decoder=self.is_encoder_decoder,
            label_pad_token_id=self.label_pad_token_id,
            padding_value=self.padding_value,
            device=self.accelerator.device,
        )
        len_chosen = batch["chosen_labels"].shape[0]

        model_kwargs = (
            {
                "labels": concatenated_batch["concatenated_labels"],
                "decoder_input_ids": concatenated_batch.pop("concatenated_decoder_input_ids", None),
            }
            if self.is_encoder_decoder
            else {}
        )

        all_logits = model(
            concatenated_batch["concatenated_input_ids"],
            attention_mask=concatenated_batch["concatenated_attention_mask"],
            use_cache=False,
            **model_kwargs,
        ).logits

        all_logps = self.get_batch_logps(
            all_logits,
            concatenated_batch["concatenated_labels"],
            average_log_prob=True,
            is_encoder_decoder=self.is_encoder_decoder,
            label_pad_token_id=self.label_pad_token_id,
        )

        chosen_logps = all_logps[:len_chosen]
        rejected_logps = all_logps[len_chosen:]

        chosen_logits = all_logits[:len_chosen]
        rejected_logits = all_logits[len_chosen:]

        chosen_labels = concatenated_batch["concatenated_labels"][:len_chosen]

        return (chosen_logps, rejected_logps, chosen_logits, rejected_logits, chosen_labels)

    @staticmethod
    def get_batch_logps(
        logits: torch.FloatTensor,
        labels: torch.LongTensor,
        average_log_prob: bool = True,
        label_pad_token_id: int = -100,
        is_encoder_decoder: bool = False,
    ) -> torch.FloatTensor:
        """Compute the log probabilities of the given labels under the given logits.

        Args:
            logits: Logits of the model (unnormalized). Shape: (batch_size, sequence_length, vocab_size)
            labels: Labels for which to compute the log probabilities. Label tokens with a value of label_pad_token_id are ignored. Shape: (batch_size, sequence_length)
            average_log_prob: If True, return the average log probability per (non-masked) token. Otherwise, return the sum of the log probabilities of the (non-masked) tokens.
            label_pad_token_id: The label pad token id.
            is_encoder_decoder: Whether the model is an encoder-decoder model.

        Returns:
            A tensor of shape (batch_size,) containing the average/sum log probabilities of the given labels under the given logits.
        """
        if logits.shape[:-1] != labels.shape:
            raise ValueError("Logits (batch and sequence length dim) and labels must have the same shape.")

        if not is_encoder_decoder:
            labels = labels[:, 1:].clone()
            logits = logits[:, :-1, :]
        loss_mask = labels != label_pad_token_id

        # dummy token; we'll ignore the losses on these tokens later
        labels[labels == label_pad_token_id] = 0

        per_token_logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)

        if average_log_prob:
            return (per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)
        else:
            return (per_token_logps * loss_mask).sum(-1)

    def get_batch_loss_metrics(
        self,
        model,
        batch: Dict[str, Union[List, torch.LongTensor]],
        train_eval: Literal["train", "eval"] = "train",
    ):
        """Compute the SimPO loss and other metrics for the given batch of inputs for train or test."""
        metrics = {}
        prefix = "eval_" if train_eval == "eval" else ""

        (
            policy_chosen_logps,
            policy_rejected_logps,
            policy_chosen_logits,
            policy_rejected_logits,
            chosen_labels,
        ) = self.concatenated_forward(model, batch)

        losses, chosen_rewards, rejected_rewards = self.simpo_loss(
            policy_chosen_logps,
            policy_rejected_logps,
        )

        loss = losses.mean()

        if self.sft_weight > 0.0:
            if not self.is_encoder_decoder:
                policy_chosen_logits = policy_chosen_logits[..., :-1, :].contiguous()
                chosen_labels = chosen_labels[..., 1:].clone()
            loss_func = nn.CrossEntropyLoss()
            sft_loss = loss_func(policy_chosen_logits.view(-1, policy_chosen_logits.shape[-1]), chosen_labels.view(-1))
            loss = self.sft_weight * sft_loss + loss
            metrics[f"{prefix}sft_loss"] = sft_loss.detach().cpu()
        
        reward_accuracies = (chosen_rewards > rejected_rewards).float()

        metrics[f"{prefix}rewards/chosen"] = chosen_rewards.mean().cpu()
        metrics[f"{prefix}rewards/rejected"] = rejected_rewards.mean().cpu()
        metrics[f"{prefix}rewards/accuracies"] = reward_accuracies.mean().cpu()
        metrics[f"{prefix}rewards/margins"] = (chosen_rewards - rejected_rewards).mean().cpu()
        metrics[f"{prefix}logps/rejected"] = policy_rejected_logps.detach().mean().cpu()
        metrics[f"{prefix}logps/chosen"] = policy_chosen_logps.detach().mean().cpu()
        metrics[f"{prefix}logits/rejected"] = policy_rejected_logits.detach().mean().cpu()
        metrics[f"{prefix}logits/chosen"] = policy_chosen_logits.detach().mean().cpu()

        return loss, metrics


# ---------------------------------------------------------------- data: tokenize_row's label construction on pre-tokenised ids
PAD, BOS, EOS = 0, 1, 2


def make_pairs(n, rng):
    rows = []
    for _ in range(n):
        prompt = [rng.randrange(3, 64) for _ in range(rng.randint(4, 8))]
        chosen = sorted(prompt)
        rejected = [rng.randrange(3, 64) for _ in range(len(prompt) + rng.choice([-2, -1, 1, 2, 3]))]
        rows.append((prompt, chosen, rejected))
    return rows


def tokenize_row(prompt, chosen, rejected, label_pad_token_id=-100):
    batch = {}
    prompt_ids = [BOS] + prompt
    for k, answer in (("chosen_", chosen), ("rejected_", rejected)):
        input_ids = prompt_ids + answer + [EOS]
        labels = input_ids[:]
        labels[: len(prompt_ids)] = [label_pad_token_id] * len(prompt_ids)
        batch[f"{k}input_ids"] = input_ids
        batch[f"{k}attention_mask"] = [1] * len(input_ids)
        batch[f"{k}labels"] = labels
    batch["prompt_input_ids"] = prompt_ids
    batch["prompt_attention_mask"] = [1] * len(prompt_ids)
    return batch


def collate(features, label_pad_token_id=-100, padding_value=0):
    """DPODataCollatorWithPadding for a decoder-only model: right padding per key."""
    padded = {}
    for k in features[0]:
        if k.endswith("_input_ids") or k.endswith("_attention_mask") or k.endswith("_labels"):
            pad = label_pad_token_id if k.endswith("_labels") else (padding_value if k.endswith("_input_ids") else 0)
            m = max(len(f[k]) for f in features)
            padded[k] = torch.tensor([f[k] + [pad] * (m - len(f[k])) for f in features], dtype=torch.long)
    return padded


@torch.no_grad()
def evaluate(trainer, batches):
    trainer.model.eval()
    acc, margin = [], []
    for batch in batches:
        _, metrics = trainer.get_batch_loss_metrics(trainer.model, batch, train_eval="eval")
        acc.append(metrics["eval_rewards/accuracies"].item())
        margin.append(metrics["eval_rewards/margins"].item())
    trainer.model.train()
    return sum(acc) / len(acc), sum(margin) / len(margin)


def main():
    random.seed(42)
    torch.manual_seed(42)
    rng = random.Random(42)
    args = SimpleNamespace(beta=2.0, gamma_beta_ratio=0.5, sft_weight=0.0, label_smoothing=0.0, loss_type="sigmoid",
                           label_pad_token_id=-100, padding_value=0, learning_rate=1e-3, per_device_train_batch_size=8,
                           gradient_accumulation_steps=4, num_train_epochs=1, warmup_ratio=0.1, max_grad_norm=1.0,
                           weight_decay=0.0, logging_steps=4)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                       bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD))
    model.train()
    trainer = SimPOTrainer(model, args)

    train_rows = [tokenize_row(*r) for r in make_pairs(640, rng)]
    eval_batches = [collate([tokenize_row(*r) for r in make_pairs(8, rng)]) for _ in range(8)]

    # transformers.Trainer: AdamW, cosine schedule with warmup, loss / accumulation, grad clipping
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    steps_per_epoch = len(train_rows) // (args.per_device_train_batch_size * args.gradient_accumulation_steps)
    max_steps = steps_per_epoch * args.num_train_epochs
    scheduler = get_cosine_schedule_with_warmup(optimizer, math.ceil(args.warmup_ratio * max_steps), max_steps)

    acc0, margin0 = evaluate(trainer, eval_batches)
    print(f"eval before: rewards/accuracies {acc0:.3f} rewards/margins {margin0:.3f}")
    global_step = 0
    for epoch in range(args.num_train_epochs):
        rng.shuffle(train_rows)
        bs = args.per_device_train_batch_size
        micro = [collate(train_rows[i:i + bs]) for i in range(0, len(train_rows), bs)]
        logged = []
        for i, batch in enumerate(micro):
            loss, metrics = trainer.get_batch_loss_metrics(model, batch, train_eval="train")
            (loss / args.gradient_accumulation_steps).backward()
            logged.append((loss.item(), metrics["rewards/accuracies"].item(), metrics["rewards/margins"].item()))
            if (i + 1) % args.gradient_accumulation_steps == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                global_step += 1
                if global_step % args.logging_steps == 0:
                    l, a, m = (sum(x) / len(x) for x in zip(*logged))
                    print(f"step {global_step}/{max_steps} loss {l:.4f} rewards/accuracies {a:.3f} "
                          f"rewards/margins {m:.3f} lr {scheduler.get_last_lr()[0]:.2e}")
                    logged = []
    acc1, margin1 = evaluate(trainer, eval_batches)
    print(f"eval after: rewards/accuracies {acc1:.3f} rewards/margins {margin1:.3f}")
    print(f"[summary] eval reward accuracy first={acc0:.3f} last={acc1:.3f} margin first={margin0:.3f} last={margin1:.3f} increased={acc1 > acc0}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
