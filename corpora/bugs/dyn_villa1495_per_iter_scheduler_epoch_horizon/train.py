# Source: ScrollPrize/villa, vesuvius/src/vesuvius/models/training/train.py (BaseTrainer._get_scheduler, train loop)
# Report: https://github.com/ScrollPrize/villa/pull/1495
# Vesuvius BaseTrainer: optimizer, scheduler factory (get_scheduler with the trainer's
# config), per-iteration / per-epoch scheduler stepping, gradient clipping and the epoch
# loop with max_steps_per_epoch. The 3D segmentation network and the zarr patch
# datasets are reduced to a small 2D conv net on synthetic patches; get_scheduler keeps
# the diffusers cosine-with-warmup lambda.
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR


def get_scheduler(scheduler_type, optimizer, initial_lr, max_steps, warmup_steps=None, num_cycles=0.5, **kwargs):
    if scheduler_type.lower() == "diffusers_cosine_warmup":
        if warmup_steps is None:
            warmup_steps = max(1, int(0.1 * max_steps))

        def lr_lambda(current_step):
            if current_step < warmup_steps:
                return float(current_step) / float(max(1, warmup_steps))
            progress = float(current_step - warmup_steps) / float(max(1, max_steps - warmup_steps))
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))

        return LambdaLR(optimizer, lr_lambda)
    raise ValueError(scheduler_type)


class TinySegNet(nn.Module):
    def __init__(self, in_ch=1, ch=16, num_classes=2):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(in_ch, ch, 3, padding=1), nn.InstanceNorm2d(ch), nn.LeakyReLU(0.01),
                                 nn.Conv2d(ch, ch, 3, padding=1), nn.InstanceNorm2d(ch), nn.LeakyReLU(0.01))
        self.head = nn.Conv2d(ch, num_classes, 1)

    def forward(self, x):
        return self.head(self.enc(x))


class BaseTrainer:
    def __init__(self, mgr):
        self.mgr = mgr

    def _get_optimizer(self, model):
        return torch.optim.AdamW(model.parameters(), lr=self.mgr.initial_lr, weight_decay=self.mgr.weight_decay)

    # --- scheduler --- #
    def _get_scheduler(self, optimizer):

        scheduler_type = getattr(self.mgr, 'scheduler', 'poly')
        scheduler_kwargs = getattr(self.mgr, 'scheduler_kwargs', {})

        scheduler = get_scheduler(
            scheduler_type=scheduler_type,
            optimizer=optimizer,
            initial_lr=self.mgr.initial_lr,
            max_steps=self.mgr.max_epoch,
            **scheduler_kwargs
        )

        print(f"Using {scheduler_type} learning rate scheduler")

        # set some per iteration schedulers so we can easily step them once per iter vs once per epoch
        per_iter_schedulers = ['onecycle', 'cyclic', 'cosine_warmup', 'diffusers_cosine_warmup']
        is_per_iteration = scheduler_type.lower() in per_iter_schedulers

        return scheduler, is_per_iteration

    def _batch(self, g):
        x = torch.randn(self.mgr.train_batch_size, 1, 24, 24, generator=g)
        smooth = F.avg_pool2d(x, 5, 1, 2)
        return x, (smooth[:, 0] > 0.1).long()

    def train(self):
        torch.manual_seed(self.mgr.seed)
        model = TinySegNet()
        optimizer = self._get_optimizer(model)
        scheduler, is_per_iteration_scheduler = self._get_scheduler(optimizer)
        loss_fn = nn.CrossEntropyLoss()
        g = torch.Generator().manual_seed(0)
        for epoch in range(self.mgr.max_epoch):
            model.train()
            lrs, losses = [], []
            for i in range(self.mgr.max_steps_per_epoch):
                x, y = self._batch(g)
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), self.mgr.gradient_clip)
                optimizer.step()
                if is_per_iteration_scheduler:
                    scheduler.step()
                lrs.append(optimizer.param_groups[0]["lr"])
                losses.append(loss.item())
            if not is_per_iteration_scheduler:
                scheduler.step()
            print(f"epoch {epoch + 1}/{self.mgr.max_epoch} loss {sum(losses) / len(losses):.4f} "
                  f"lr min {min(lrs):.2e} max {max(lrs):.2e} end {lrs[-1]:.2e}")


def main():
    mgr = SimpleNamespace(initial_lr=0.01, weight_decay=3e-5, max_epoch=10, max_steps_per_epoch=25,
                          train_batch_size=8, scheduler="diffusers_cosine_warmup", scheduler_kwargs={},
                          gradient_clip=12.0, seed=42)
    BaseTrainer(mgr).train()


if __name__ == "__main__":
    main()
