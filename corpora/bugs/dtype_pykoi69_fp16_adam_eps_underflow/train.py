# Source: CambioML/pykoi, pykoi/rlhf/rw_finetuning.py (RewardFinetuning.__init__, compute_loss), pykoi/rlhf/config.py (RLHFConfig), commit 1a8be3a145d4d9192afb4f1071f0e0ed8c54aa68
# Report: https://github.com/CambioML/pykoi/pull/69
# pykoi reward-model fine-tuning: a causal LM loaded as a sequence classifier in
# torch.float16 (bf16 off), LoRA adapters plus the classification head (peft keeps `score`
# trainable for SEQ_CLS), the InstructGPT pairwise loss -logsigmoid(r_x - r_y), trained by
# the HF Trainer's AdamW with the TrainingArguments defaults. The pretrained LM is a small
# GPT-2-style model built here, peft's LoRA a hand-written LoRA linear, and the Trainer's
# inner loop (AdamW, linear schedule, grad-norm clipping) is written out; preference pairs
# are synthetic token sequences.
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RLHFConfig:
    learning_rate: float = 1e-5
    weight_decay: float = 0.01
    per_device_train_batch_size: int = 8
    reward_epochs: int = 1
    bf16: bool = False
    lora_r: int = 8
    lora_alpha: int = 16
    max_seq_length_reward: int = 24


@dataclass
class TrainingArguments:
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    num_train_epochs: int = 1
    per_device_train_batch_size: int = 8
    bf16: bool = False


class LoraLinear(nn.Module):
    """peft.tuners.lora.Linear: frozen base layer plus scaling * B(A(x)), adapters in float32."""
    def __init__(self, base, r, alpha):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / r

    def forward(self, x):
        result = self.base_layer(x)
        x = x.to(self.lora_A.weight.dtype)
        return result + (self.lora_B(self.lora_A(x)) * self.scaling).to(result.dtype)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.heads = heads

    def forward(self, x, attention_mask):
        b, n, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        mask = causal[None, None] & attention_mask[:, None, None, :].bool()
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        att = att.masked_fill(~mask, torch.finfo(att.dtype).min).softmax(-1)
        x = x + self.c_proj((att @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln_2(x))


class GPT2ForSequenceClassification(nn.Module):
    def __init__(self, vocab=64, dim=64, layers=2, heads=4, num_labels=1):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(64, dim)
        self.h = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.score = nn.Linear(dim, num_labels, bias=False)

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.shape[1])
        x = self.wte(input_ids) + self.wpe(pos)[None]
        for block in self.h:
            x = block(x, attention_mask)
        x = self.ln_f(x)
        logits = self.score(x)
        last = attention_mask.sum(1) - 1
        return (logits[torch.arange(len(last)), last],)


def get_peft_model(model, r, alpha):
    for p in model.parameters():
        p.requires_grad = False
    for block in model.h:
        block.c_attn = LoraLinear(block.c_attn, r, alpha)
    model.score.weight.requires_grad = True  # modules_to_save for SEQ_CLS
    return model


def make_pairs(n, g, length=24, vocab=64):
    """Preferred answers contain more 'good' tokens (< 16) than the rejected ones."""
    x = torch.randint(16, vocab, (n, length), generator=g)
    y = torch.randint(16, vocab, (n, length), generator=g)
    good = torch.rand(n, length, generator=g) < 0.3
    x = torch.where(good, torch.randint(0, 16, (n, length), generator=g), x)
    mask = torch.ones(n, length, dtype=torch.long)
    return x, mask, y, mask.clone()


class RewardFinetuning:
    def __init__(self, rlhf_config: RLHFConfig):
        self._rlhf_config = rlhf_config
        self.args = TrainingArguments(
            learning_rate=rlhf_config.learning_rate,
            per_device_train_batch_size=rlhf_config.per_device_train_batch_size,
            num_train_epochs=rlhf_config.reward_epochs,
            weight_decay=rlhf_config.weight_decay,
            bf16=rlhf_config.bf16,
        )
        self.torch_dtype = torch.bfloat16 if rlhf_config.bf16 else torch.float16

        torch.manual_seed(0)
        # AutoModelForSequenceClassification.from_pretrained(..., torch_dtype=self.torch_dtype)
        self.base_model = GPT2ForSequenceClassification().to(self.torch_dtype)
        self.model = get_peft_model(self.base_model, rlhf_config.lora_r, rlhf_config.lora_alpha)

    def compute_loss(self, model, inputs, return_outputs=False):
        rewards_x = model(
            input_ids=inputs["input_ids_x"],
            attention_mask=inputs["attention_mask_x"],
        )[0]
        rewards_y = model(
            input_ids=inputs["input_ids_y"],
            attention_mask=inputs["attention_mask_y"],
        )[0]
        loss = -torch.nn.functional.logsigmoid(rewards_x - rewards_y).mean()
        if return_outputs:
            return loss, {"rewards_x": rewards_x, "rewards_y": rewards_y}
        return loss

    def train(self, train_data, eval_data):
        """transformers.Trainer's loop: AdamW(lr, betas, eps=adam_epsilon, weight_decay), linear decay, clipping."""
        args = self.args
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2),
                                      eps=args.adam_epsilon, weight_decay=args.weight_decay)
        bs = args.per_device_train_batch_size
        n = len(train_data[0])
        total = args.num_train_epochs * (n // bs)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, (total - s) / total))
        step = 0
        for epoch in range(args.num_train_epochs):
            for i in range(0, n - bs + 1, bs):
                inputs = {"input_ids_x": train_data[0][i:i + bs], "attention_mask_x": train_data[1][i:i + bs],
                          "input_ids_y": train_data[2][i:i + bs], "attention_mask_y": train_data[3][i:i + bs]}
                self.model.train()
                loss = self.compute_loss(self.model, inputs)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                step += 1
                if step % 20 == 0 or step == 1:
                    score = self.model.score.weight
                    acc = self.evaluate(eval_data)
                    print(f"step {step}: loss {loss.item():.4f} | score.weight finite {int(torch.isfinite(score).sum())}/{score.numel()} "
                          f"max|w| {score.float().abs().max().item():.4f} | eval accuracy {acc:.3f}")

    @torch.no_grad()
    def evaluate(self, eval_data):
        self.model.eval()
        _, out = self.compute_loss(self.model, {"input_ids_x": eval_data[0], "attention_mask_x": eval_data[1],
                                                "input_ids_y": eval_data[2], "attention_mask_y": eval_data[3]},
                                   return_outputs=True)
        return (out["rewards_x"] > out["rewards_y"]).float().mean().item()


def main():
    g = torch.Generator().manual_seed(0)
    train_data = make_pairs(400, g)
    eval_data = make_pairs(128, g)
    trainer = RewardFinetuning(RLHFConfig(learning_rate=1e-4, reward_epochs=2))
    trainer.train(train_data, eval_data)


if __name__ == "__main__":
    main()
