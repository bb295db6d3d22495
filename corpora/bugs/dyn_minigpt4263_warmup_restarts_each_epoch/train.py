# Source: Vision-CAIR/MiniGPT-4, minigpt4/common/optims.py + minigpt4/tasks/base_task.py, commit d94738a7626ec43eba6c2cddf3cd2043f1a9689a
# Report: https://github.com/Vision-CAIR/MiniGPT-4/pull/263
# MiniGPT-4's LinearWarmupCosineLRScheduler and the inner training loop of BaseTask
# (lr_scheduler.step(cur_epoch, cur_step) before every iteration, gradient accumulation).
# The Vicuna/Q-Former model is reduced to a small projection + MLP head on synthetic
# image-feature / target pairs; run config: 6 epochs x 100 iterations, 300 warmup steps.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LinearWarmupCosineLRScheduler:
    def __init__(
        self,
        optimizer,
        max_epoch,
        iters_per_epoch,
        min_lr,
        init_lr,
        warmup_steps=0,
        warmup_start_lr=-1,
        **kwargs
    ):
        self.optimizer = optimizer

        self.max_epoch = max_epoch
        self.iters_per_epoch = iters_per_epoch
        self.min_lr = min_lr

        self.init_lr = init_lr
        self.warmup_steps = warmup_steps
        self.warmup_start_lr = warmup_start_lr if warmup_start_lr >= 0 else init_lr

    def step(self, cur_epoch, cur_step):
        total_cur_step = cur_epoch * self.iters_per_epoch + cur_step
        if total_cur_step < self.warmup_steps:
            warmup_lr_schedule(
                step=cur_step,
                optimizer=self.optimizer,
                max_step=self.warmup_steps,
                init_lr=self.warmup_start_lr,
                max_lr=self.init_lr,
            )
        else:
            cosine_lr_schedule(
                epoch=total_cur_step,
                optimizer=self.optimizer,
                max_epoch=self.max_epoch * self.iters_per_epoch,
                init_lr=self.init_lr,
                min_lr=self.min_lr,
            )


def cosine_lr_schedule(optimizer, epoch, max_epoch, init_lr, min_lr):
    """Decay the learning rate"""
    lr = (init_lr - min_lr) * 0.5 * (
        1.0 + math.cos(math.pi * epoch / max_epoch)
    ) + min_lr
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr


def warmup_lr_schedule(optimizer, step, max_step, init_lr, max_lr):
    """Warmup the learning rate"""
    lr = min(max_lr, init_lr + (max_lr - init_lr) * step / max(max_step, 1))
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr


class MiniGPT4Lite(nn.Module):
    def __init__(self, vis_dim=64, hidden=128, vocab=50):
        super().__init__()
        self.llama_proj = nn.Linear(vis_dim, hidden)
        self.head = nn.Sequential(nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, vocab))

    def forward(self, samples):
        logits = self.head(self.llama_proj(samples["image"]))
        return {"loss": F.cross_entropy(logits, samples["text_input"])}


def train_step(model, samples):
    return model(samples)["loss"]


def _train_inner_loop(epoch, iters_per_epoch, model, data_loader, optimizer, lr_scheduler, accum_grad_iters=1):
    inner_epoch = epoch
    lrs, losses = [], []
    for i in range(iters_per_epoch):
        samples = next(data_loader)
        samples.update({"epoch": inner_epoch, "num_iters_per_epoch": iters_per_epoch, "iters": i})

        lr_scheduler.step(cur_epoch=inner_epoch, cur_step=i)

        loss = train_step(model=model, samples=samples)
        loss.backward()

        # update gradients every accum_grad_iters iterations
        if (i + 1) % accum_grad_iters == 0:
            optimizer.step()
            optimizer.zero_grad()
        lrs.append(optimizer.param_groups[0]["lr"])
        losses.append(loss.item())
    return lrs, losses


def main():
    torch.manual_seed(42)
    g = torch.Generator().manual_seed(0)
    proto = torch.randn(50, 64, generator=g)

    def loader():
        while True:
            y = torch.randint(0, 50, (16,), generator=g)
            yield {"image": proto[y] + 0.8 * torch.randn(16, 64, generator=g), "text_input": y}

    model = MiniGPT4Lite()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05, betas=(0.9, 0.999))
    run_cfg = dict(max_epoch=6, iters_per_epoch=100, init_lr=3e-4, min_lr=1e-5, warmup_lr=1e-6, warmup_steps=300)
    lr_scheduler = LinearWarmupCosineLRScheduler(optimizer, max_epoch=run_cfg["max_epoch"],
                                                 iters_per_epoch=run_cfg["iters_per_epoch"],
                                                 min_lr=run_cfg["min_lr"], init_lr=run_cfg["init_lr"],
                                                 warmup_steps=run_cfg["warmup_steps"],
                                                 warmup_start_lr=run_cfg["warmup_lr"])
    data = loader()
    for epoch in range(run_cfg["max_epoch"]):
        lrs, losses = _train_inner_loop(epoch, run_cfg["iters_per_epoch"], model, data, optimizer, lr_scheduler)
        print(f"epoch {epoch} lr first {lrs[0]:.2e} last {lrs[-1]:.2e} max {max(lrs):.2e} "
              f"loss {sum(losses) / len(losses):.4f}")


if __name__ == "__main__":
    main()
