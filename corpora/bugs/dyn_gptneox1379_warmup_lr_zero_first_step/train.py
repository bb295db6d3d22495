# Source: EleutherAI/gpt-neox, megatron/learning_rates.py (AnnealingLR), megatron/training.py (get_learning_rate_scheduler, train_step), commit 6203ac678e615a4959d42ed0a80841c6e0efec67
# Report: https://github.com/EleutherAI/gpt-neox/pull/1379
# GPT-NeoX pretraining step: AnnealingLR built with last_iter=0 and warmup = 0.01 of the
# decay iterations, the optimizer stepped then the scheduler stepped (what the DeepSpeed
# engine's model.step() does), cosine decay after warmup. The 125M GPT-NeoX model and the
# tokenized Pile are replaced by a 2-layer causal transformer on synthetic token streams;
# DeepSpeed, pipeline/model parallelism and checkpointing are removed.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def print_rank_0(message):
    print(message, flush=True)


class AnnealingLR(object):
    """Anneals the learning rate."""

    def __init__(
        self,
        optimizer,
        start_lr,
        warmup_iter,
        total_iters,
        decay_style,
        last_iter,
        min_lr=0.0,
        use_checkpoint_lr_scheduler=True,
        override_lr_scheduler=False,
        use_mup=False,
    ):

        # Class values.
        self.optimizer = optimizer
        self.start_lr = start_lr
        self.min_lr = min_lr
        self.warmup_iter = warmup_iter
        self.num_iters = last_iter
        self.end_iter = total_iters
        assert self.end_iter > 0
        self.decay_style = decay_style
        self.override_lr_scheduler = override_lr_scheduler
        self.use_checkpoint_lr_scheduler = use_checkpoint_lr_scheduler
        self.use_mup = use_mup
        if self.override_lr_scheduler:
            assert not self.use_checkpoint_lr_scheduler, (
                "both override and " "use-checkpoint are set."
            )
        # Set the learning rate
        self.step(self.num_iters)

        print_rank_0("> learning rate decay style: {}".format(self.decay_style))

    def get_lr(self):
        """Learning rate decay functions from:
        https://openreview.net/pdf?id=BJYwwY9ll pg. 4"""

        num_iters_ = self.num_iters
        # Warmup.
        if self.warmup_iter > 0 and self.num_iters <= self.warmup_iter:
            return float(self.start_lr) * num_iters_ / self.warmup_iter

        num_iters_ = num_iters_ - self.warmup_iter
        if self.decay_style == "linear":
            end_iter_ = self.end_iter - self.warmup_iter
            lr = self.start_lr * (end_iter_ - num_iters_) / end_iter_
        elif self.decay_style == "cosine":
            end_iter_ = self.end_iter - self.warmup_iter
            lr = self.min_lr + (
                (self.start_lr - self.min_lr)
                / 2.0
                * (math.cos(math.pi * num_iters_ / end_iter_) + 1)
            )
        elif self.decay_style == "exponential":
            # exp(-0.693) = 1/2
            end_iter = self.end_iter - self.warmup_iter
            lr = self.start_lr * math.exp(-0.693 * num_iters_ / end_iter)
        else:
            lr = self.start_lr
        return max(lr, self.min_lr)

    def step(self, step_num=None):
        """Set lr for all parameters groups."""
        if step_num is None:
            step_num = self.num_iters + 1
        self.num_iters = step_num
        new_lr = self.get_lr()
        for group in self.optimizer.param_groups:
            if self.use_mup and "width_mult" in group:
                group["lr"] = new_lr / group["width_mult"]
            else:
                group["lr"] = new_lr


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, d=64, layers=2, heads=4, seq=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.final_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        h = self.blocks(self.embed(tokens) + self.pos[:t], mask=mask)
        return self.head(self.final_norm(h))


def get_batch(step, batch_size=16, seq=33, vocab=64):
    g = torch.Generator().manual_seed(1000 + step)
    start = torch.randint(0, vocab, (batch_size, 1), generator=g)
    stride = torch.randint(1, 5, (batch_size, 1), generator=g)
    return (start + stride * torch.arange(seq)) % vocab


def get_learning_rate_scheduler(optimizer, neox_args):
    """Build the learning rate scheduler."""
    num_iters = neox_args["train_iters"]
    num_iters = max(1, num_iters)
    init_step = 0
    warmup_iter = neox_args["warmup"] * num_iters
    lr_scheduler = AnnealingLR(
        optimizer,
        start_lr=neox_args["lr"],
        warmup_iter=warmup_iter,
        total_iters=num_iters,
        decay_style=neox_args["lr_decay_style"],
        last_iter=init_step,
        min_lr=neox_args["min_lr"],
        use_checkpoint_lr_scheduler=False,
        override_lr_scheduler=False,
        use_mup=False,
    )
    return lr_scheduler


def main():
    torch.manual_seed(1234)
    neox_args = {"train_iters": 300, "warmup": 0.01, "lr": 6e-4, "min_lr": 6e-5, "lr_decay_style": "cosine"}
    model = TinyGPT()
    optimizer = torch.optim.Adam(model.parameters(), lr=neox_args["lr"], betas=(0.9, 0.95), eps=1e-8)
    lr_scheduler = get_learning_rate_scheduler(optimizer, neox_args)

    initial = [p.detach().clone() for p in model.parameters()]
    for iteration in range(neox_args["train_iters"]):
        tokens = get_batch(iteration)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        lr = optimizer.param_groups[0]["lr"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        lr_scheduler.step()
        if iteration < 4:
            moved = max((p.detach() - q).abs().max().item() for p, q in zip(model.parameters(), initial))
            print(f"iteration {iteration + 1} lr used {lr:.2e} lm_loss {loss.item():.4f} "
                  f"max |param - initial| {moved:.3e}")
        elif iteration % 60 == 59:
            print(f"iteration {iteration + 1} lr used {lr:.2e} lm_loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
