# Source: WalkingMeatAxolotl/AnimaLoraStudio, runtime/training/loop.py (run), runtime/training/phases/optimizer.py (run: steps_per_epoch / total_steps), commit ec29048c33e5376950ec297bb681ecdffd2b18ee
# Report: https://github.com/WalkingMeatAxolotl/AnimaLoraStudio/pull/305
# LoRA training loop of AnimaLoraStudio on a tiny dataset: flow-matching loss on image latents, loss
# divided by grad_accum, optimizer step / scheduler step / zero_grad every grad_accum micro-batches,
# NaN checks and gradient clipping; steps_per_epoch = len(dataloader) // grad_accum. The Anima DiT
# becomes a frozen conditional MLP with LoRA adapters (rank 4) on its two hidden Linear layers, the
# VAE latents are fixed random 16-d vectors of 3 training images with caption embeddings, the
# timestep sampler is uniform, and the optimizer AdamW with a constant schedule.
import math

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class Args:
    epochs = 40
    grad_accum = 4
    batch_size = 1
    learning_rate = 5e-3
    weight_decay = 0.0
    grad_clip_max_norm = 1.0
    max_steps = 0


class LoRALinear(torch.nn.Module):
    def __init__(self, base: torch.nn.Linear, rank=4, alpha=4.0):
        super().__init__()
        self.base = base
        self.lora_down = torch.nn.Linear(base.in_features, rank, bias=False)
        self.lora_up = torch.nn.Linear(rank, base.out_features, bias=False)
        torch.nn.init.kaiming_uniform_(self.lora_down.weight, a=math.sqrt(5))
        torch.nn.init.zeros_(self.lora_up.weight)
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + self.lora_up(self.lora_down(x)) * self.scale


class TinyDiT(torch.nn.Module):
    def __init__(self, d=16, c=16, h=64):
        super().__init__()
        self.inp = torch.nn.Linear(d + c + 1, h)
        self.mid = torch.nn.Linear(h, h)
        self.out = torch.nn.Linear(h, d)

    def forward(self, x, t, cond):
        z = F.silu(self.inp(torch.cat([x, cond, t[:, None]], -1)))
        return self.out(F.silu(self.mid(z)))


class Dataset(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.latents = torch.randn(3, 16, generator=g)
        self.cond = torch.randn(3, 16, generator=g)

    def __len__(self):
        return len(self.latents)

    def __getitem__(self, i):
        return {"latents": self.latents[i], "cond": self.cond[i]}


class TrainingContext:
    pass


def setup(args):
    ctx = TrainingContext()
    ctx.args = args
    torch.manual_seed(0)
    model = TinyDiT()
    for p in model.parameters():
        p.requires_grad_(False)
    model.inp = LoRALinear(model.inp)
    model.mid = LoRALinear(model.mid)
    ctx.model = model
    ctx.dataset = Dataset()
    ctx.dataloader = torch.utils.data.DataLoader(ctx.dataset, batch_size=args.batch_size, shuffle=True,
                                                 generator=torch.Generator().manual_seed(2))
    param_groups = [{"params": [p for p in model.parameters() if p.requires_grad]}]
    ctx.optimizer = torch.optim.AdamW(param_groups, lr=args.learning_rate, weight_decay=args.weight_decay)
    ctx.optimizer_type = "adamw"
    ctx.grad_clip = float(getattr(args, "grad_clip_max_norm", 0) or 0)
    ctx.trainable_params = [p for group in ctx.optimizer.param_groups for p in group["params"]]

    # 计算总步数
    try:
        ctx.steps_per_epoch = len(ctx.dataloader) // args.grad_accum
    except Exception:
        ctx.steps_per_epoch = None
    by_epochs = (
        ctx.steps_per_epoch * args.epochs
        if ctx.steps_per_epoch is not None and args.epochs and args.epochs > 0
        else None
    )
    by_max_steps = (
        args.max_steps if (args.max_steps and args.max_steps > 0) else None
    )
    candidates = [c for c in (by_epochs, by_max_steps) if c is not None and c > 0]
    ctx.total_steps = min(candidates) if candidates else None
    print(f"dataset size: {len(ctx.dataset)}, steps per epoch: {ctx.steps_per_epoch}, total steps: {ctx.total_steps}")
    ctx.scheduler = torch.optim.lr_scheduler.LambdaLR(ctx.optimizer, lambda _: 1.0)
    ctx.global_step = 0
    ctx.start_epoch = 0
    ctx.loss_history = []
    return ctx


def flow_matching_loss(model, batch, gen):
    x0, cond = batch["latents"], batch["cond"]
    noise = torch.randn(x0.shape, generator=gen)
    t = torch.rand(x0.shape[0], generator=gen)
    x_t = (1 - t[:, None]) * x0 + t[:, None] * noise
    pred = model(x_t, t, cond)
    return F.mse_loss(pred, noise - x0)


@torch.no_grad()
def eval_loss(model, dataset):
    gen = torch.Generator().manual_seed(99)
    batch = {"latents": dataset.latents.repeat(64, 1), "cond": dataset.cond.repeat(64, 1)}
    return flow_matching_loss(model, batch, gen).item()


def run(ctx):
    args = ctx.args
    gen = torch.Generator().manual_seed(3)
    for epoch in range(ctx.start_epoch, args.epochs):
        ctx.current_epoch = epoch
        epoch_loss_sum = 0.0
        epoch_step_count = 0
        for batch_idx, batch in enumerate(ctx.dataloader):
            loss = flow_matching_loss(ctx.model, batch, gen)

            # NaN 检测：forward 出 NaN 时跳过本 micro-batch
            if not torch.isfinite(loss):
                ctx.optimizer.zero_grad()
                continue

            # 反向传播
            loss = loss / args.grad_accum
            loss.backward()

            if (batch_idx + 1) % args.grad_accum == 0:
                # NaN 梯度检测：跳过本次 update，清零继续
                has_nan_grad = any(
                    p.grad is not None and not torch.isfinite(p.grad).all()
                    for p in ctx.trainable_params
                )
                if has_nan_grad:
                    ctx.optimizer.zero_grad()
                    continue

                if ctx.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(ctx.trainable_params, max_norm=ctx.grad_clip)
                ctx.optimizer.step()
                if ctx.scheduler is not None and ctx.optimizer_type != "prodigy_plus_schedulefree":
                    ctx.scheduler.step()
                ctx.optimizer.zero_grad()
                ctx.global_step += 1

                # 记录 loss 历史
                loss_val = float(loss.item() * args.grad_accum)
                epoch_loss_sum += loss_val
                epoch_step_count += 1
                ctx.loss_history.append(loss_val)
        if epoch % 5 == 4:
            lora_norm = sum(p.norm().item() for n, p in ctx.model.named_parameters() if "lora_up" in n)
            print(f"epoch {epoch + 1}: optimizer steps {ctx.global_step}  eval loss {eval_loss(ctx.model, ctx.dataset):.4f}  "
                  f"lora_up norm {lora_norm:.4f}")


if __name__ == "__main__":
    ctx = setup(Args())
    print(f"eval loss before training {eval_loss(ctx.model, ctx.dataset):.4f}")
    run(ctx)
