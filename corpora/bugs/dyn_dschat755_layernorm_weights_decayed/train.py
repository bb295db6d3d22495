# Source: deepspeedai/DeepSpeedExamples, applications/DeepSpeed-Chat/training/utils/utils.py (get_optimizer_grouped_parameters), applications/DeepSpeed-Chat/training/step1_supervised_finetuning/main.py, commit 5161c0ff266267186ce3e836430189f03454fc10
# Report: https://github.com/deepspeedai/DeepSpeedExamples/pull/755
# DeepSpeed-Chat step 1 (supervised fine-tuning of an OPT causal LM): the parameters are split
# into a weight-decay group and a no-decay group by name, Adam(W) with betas (0.9, 0.95) and a
# cosine schedule, perplexity evaluated after every epoch. facebook/opt-1.3b is replaced by a
# randomly initialised 2-layer OPT (hidden 64), the Dahoas prompt datasets by synthetic token
# sequences; deepspeed.initialize/FusedAdam by torch.optim.AdamW (FusedAdam's adam_w_mode).
import math

import torch
from transformers import OPTConfig, OPTForCausalLM, get_scheduler


def get_optimizer_grouped_parameters(
    model,
    weight_decay,
    lora_lr=5e-4,
    no_decay_name_list=["bias", "LayerNorm.weight"],
    lora_name_list=["lora_right_weight", "lora_left_weight"],
):
    optimizer_grouped_parameters = [
        {
            "params": [
                p for n, p in model.named_parameters()
                if (not any(nd in n for nd in no_decay_name_list)
                    and p.requires_grad and not any(nd in n
                                                    for nd in lora_name_list))
            ],
            "weight_decay":
            weight_decay,
        },
        {
            "params": [
                p for n, p in model.named_parameters()
                if (not any(nd in n for nd in no_decay_name_list)
                    and p.requires_grad and any(nd in n
                                                for nd in lora_name_list))
            ],
            "weight_decay":
            weight_decay,
            "lr":
            lora_lr
        },
        {
            "params": [
                p for n, p in model.named_parameters()
                if (any(nd in n
                        for nd in no_decay_name_list) and p.requires_grad)
            ],
            "weight_decay":
            0.0,
        },
    ]

    non_empty_groups = []
    for group in optimizer_grouped_parameters:
        if group["params"]:
            non_empty_groups.append(group)
    return non_empty_groups


def make_batches(n_seq, seq_len, vocab, batch_size, seed):
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(4, vocab, (n_seq, 1), generator=g)
    step = torch.randint(1, 4, (n_seq, 1), generator=g)
    ids = (start + step * torch.arange(seq_len)) % (vocab - 4) + 4
    noise = torch.rand(ids.shape, generator=g) < 0.1
    ids = torch.where(noise, torch.randint(4, vocab, ids.shape, generator=g), ids)
    return [{"input_ids": ids[i:i + batch_size], "labels": ids[i:i + batch_size]}
            for i in range(0, n_seq, batch_size)]


def evaluation(model, eval_dataloader):
    model.eval()
    losses = 0
    for step, batch in enumerate(eval_dataloader):
        with torch.no_grad():
            outputs = model(**batch)
        losses += outputs.loss.float()
    losses = losses / (step + 1)
    model.train()
    return torch.exp(losses).item()


def layer_norm_weights(model):
    return torch.cat([p.detach().flatten() for n, p in model.named_parameters()
                      if "layer_norm.weight" in n])


def main():
    torch.manual_seed(1234)
    config = OPTConfig(vocab_size=64, hidden_size=64, num_hidden_layers=2, ffn_dim=128,
                       num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=64,
                       dropout=0.0, attention_dropout=0.0, pad_token_id=1, bos_token_id=2, eos_token_id=2)
    model = OPTForCausalLM(config)
    train_dataloader = make_batches(256, 32, 64, 8, seed=0)
    eval_dataloader = make_batches(64, 32, 64, 8, seed=1)
    learning_rate, weight_decay, num_train_epochs = 1e-3, 0.1, 6

    # Split weights in two groups, one with weight decay and the other not.
    optimizer_grouped_parameters = get_optimizer_grouped_parameters(model, weight_decay)
    decayed = [n for n, p in model.named_parameters()
               if any(p is q for q in optimizer_grouped_parameters[0]["params"])]
    print(f"weight-decay group: {len(decayed)} tensors, of which layer norms: "
          f"{[n for n in decayed if 'norm' in n]}")

    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=learning_rate, betas=(0.9, 0.95))
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / 1)
    lr_scheduler = get_scheduler(
        name="cosine",
        optimizer=optimizer,
        num_warmup_steps=0,
        num_training_steps=num_train_epochs * num_update_steps_per_epoch,
    )

    print(f"ppl: {evaluation(model, eval_dataloader):.3f}")
    for epoch in range(num_train_epochs):
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch, use_cache=False)
            loss = outputs.loss
            loss.backward()
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        perplexity = evaluation(model, eval_dataloader)
        ln = layer_norm_weights(model)
        print(f"Epoch {epoch + 1}/{num_train_epochs} ppl: {perplexity:.3f} "
              f"layer-norm weights mean {ln.mean().item():.4f} min {ln.min().item():.4f}")


if __name__ == "__main__":
    main()
