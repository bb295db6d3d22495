# Source: Peterande/D-FINE, src/optim/ema.py (ModelEMA), src/solver/det_solver.py (DetSolver.fit), src/solver/det_engine.py (train_one_epoch), src/solver/_solver.py (state_dict, load_state_dict, load_resume_state), commit 4a1f73a8bcfac736a88abde9596d87f116d780a7
# Report: https://github.com/Peterande/D-FINE/issues/331
# D-FINE two-stage training: strong augmentation until collate_fn.stop_epoch, then the solver reloads
# best_stg1.pth, "refreshes" the EMA with ema_restart_decay and trains stage 2 without augmentation,
# evaluating the EMA model every epoch and keeping best_stg1 / best_stg2 checkpoints. The DETR
# detector becomes an MLP classifier on synthetic 32-d features, AP50:95 becomes top-1 accuracy,
# the mosaic / multi-scale augmentation becomes Gaussian feature noise; schedule and EMA constants
# are scaled to a few hundred steps.
import math
import tempfile
from copy import deepcopy
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class ModelEMA(object):
    def __init__(self, model: nn.Module, decay: float = 0.9999, warmups: int = 1000, start: int = 0):
        super().__init__()

        self.module = deepcopy(model).eval()

        self.decay = decay
        self.warmups = warmups
        self.before_start = 0
        self.start = start
        self.updates = 0  # number of EMA updates
        if warmups == 0:
            self.decay_fn = lambda x: decay
        else:
            self.decay_fn = lambda x: decay * (
                1 - math.exp(-x / warmups)
            )  # decay exponential ramp (to help early epochs)

        for p in self.module.parameters():
            p.requires_grad_(False)

    def update(self, model: nn.Module):
        if self.before_start < self.start:
            self.before_start += 1
            return
        # Update EMA parameters
        with torch.no_grad():
            self.updates += 1
            d = self.decay_fn(self.updates)
            msd = model.state_dict()
            for k, v in self.module.state_dict().items():
                if v.dtype.is_floating_point:
                    v *= d
                    v += (1 - d) * msd[k].detach()

    def state_dict(self):
        return dict(module=self.module.state_dict(), updates=self.updates)

    def load_state_dict(self, state, strict=True):
        self.module.load_state_dict(state["module"], strict=strict)
        if "updates" in state:
            self.updates = state["updates"]


class Cfg:
    epochs = 12
    stop_epoch = 8
    ema_decay = 0.999
    ema_warmups = 20
    ema_restart_decay = 0.98
    clip_max_norm = 0.1
    lr = 2e-3
    batch_size = 32


class BatchImageCollateFunction:
    def __init__(self, stop_epoch, ema_restart_decay, noise=3.0):
        self.stop_epoch = stop_epoch
        self.ema_restart_decay = ema_restart_decay
        self.noise = noise
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __call__(self, x, y, g):
        if self.epoch < self.stop_epoch:
            x = x + self.noise * torch.randn(x.shape, generator=g)
        return x, y


class DataLoader:
    def __init__(self, x, y, batch_size, collate_fn, shuffle):
        self.x, self.y, self.batch_size, self.collate_fn, self.shuffle = x, y, batch_size, collate_fn, shuffle
        self.g = torch.Generator().manual_seed(1)

    def set_epoch(self, epoch):
        self.collate_fn.set_epoch(epoch)

    def __len__(self):
        return (len(self.x) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        idx = torch.randperm(len(self.x), generator=self.g) if self.shuffle else torch.arange(len(self.x))
        for s in range(0, len(idx), self.batch_size):
            b = idx[s:s + self.batch_size]
            yield self.collate_fn(self.x[b], self.y[b], self.g)


def make_data(n, centers, g):
    y = torch.randint(0, centers.shape[0], (n,), generator=g)
    x = centers[y] + 1.2 * torch.randn(n, centers.shape[1], generator=g)
    return x, y


def train_one_epoch(model, criterion, data_loader, optimizer, epoch, max_norm=0, ema=None):
    model.train()
    losses = []
    for i, (samples, targets) in enumerate(data_loader):
        outputs = model(samples)
        loss = criterion(outputs, targets)
        optimizer.zero_grad()
        loss.backward()

        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

        optimizer.step()

        # ema
        if ema is not None:
            ema.update(model)
        losses.append(loss.item())
    return {"loss": float(np.mean(losses))}


@torch.no_grad()
def evaluate(module, data_loader):
    module.eval()
    correct, n = 0, 0
    for samples, targets in data_loader:
        correct += (module(samples).argmax(1) == targets).sum().item()
        n += len(targets)
    return {"coco_eval_bbox": [100.0 * correct / n]}


class DetSolver:
    def __init__(self, cfg, output_dir):
        self.cfg = cfg
        self.output_dir = Path(output_dir)
        g = torch.Generator().manual_seed(0)
        centers = 0.45 * torch.randn(10, 32, generator=g)
        xtr, ytr = make_data(2048, centers, g)
        xva, yva = make_data(1024, centers, g)
        collate = BatchImageCollateFunction(cfg.stop_epoch, cfg.ema_restart_decay)
        self.train_dataloader = DataLoader(xtr, ytr, cfg.batch_size, collate, shuffle=True)
        self.val_dataloader = DataLoader(xva, yva, 256, BatchImageCollateFunction(0, 0.0), shuffle=False)
        self.model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
        self.criterion = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=1e-4)
        self.lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=[1000], gamma=0.1)
        self.ema = ModelEMA(self.model, cfg.ema_decay, cfg.ema_warmups)
        self.last_epoch = -1

    def state_dict(self):
        state = {"last_epoch": self.last_epoch}
        for k, v in self.__dict__.items():
            if hasattr(v, "state_dict"):
                state[k] = v.state_dict()
        return state

    def load_state_dict(self, state):
        if "last_epoch" in state:
            self.last_epoch = state["last_epoch"]
        for k, v in self.__dict__.items():
            if hasattr(v, "load_state_dict") and k in state:
                v.load_state_dict(state[k])

    def load_resume_state(self, path: str):
        state = torch.load(path, map_location="cpu", weights_only=False)
        self.load_state_dict(state)

    def fit(self):
        args = self.cfg
        top1 = 0
        best_stat = {"epoch": -1}
        best_stat_print = best_stat.copy()
        start_epoch = self.last_epoch + 1
        for epoch in range(start_epoch, args.epochs):
            self.train_dataloader.set_epoch(epoch)

            if epoch == self.train_dataloader.collate_fn.stop_epoch:
                self.load_resume_state(str(self.output_dir / "best_stg1.pth"))
                if self.ema:
                    self.ema.decay = self.train_dataloader.collate_fn.ema_restart_decay
                    print(f"Refresh EMA at epoch {epoch} with decay {self.ema.decay}")

            train_stats = train_one_epoch(
                self.model, self.criterion, self.train_dataloader, self.optimizer, epoch,
                max_norm=args.clip_max_norm, ema=self.ema,
            )
            self.lr_scheduler.step()
            self.last_epoch += 1

            module = self.ema.module if self.ema else self.model
            test_stats = evaluate(module, self.val_dataloader)
            model_acc = evaluate(self.model, self.val_dataloader)["coco_eval_bbox"][0]

            for k in test_stats:
                if k in best_stat:
                    best_stat["epoch"] = epoch if test_stats[k][0] > best_stat[k] else best_stat["epoch"]
                    best_stat[k] = max(best_stat[k], test_stats[k][0])
                else:
                    best_stat["epoch"] = epoch
                    best_stat[k] = test_stats[k][0]

                if best_stat[k] > top1:
                    best_stat_print["epoch"] = epoch
                    top1 = best_stat[k]
                    if epoch >= self.train_dataloader.collate_fn.stop_epoch:
                        torch.save(self.state_dict(), self.output_dir / "best_stg2.pth")
                    else:
                        torch.save(self.state_dict(), self.output_dir / "best_stg1.pth")

                best_stat_print[k] = max(best_stat[k], top1)

                if best_stat["epoch"] == epoch:
                    if epoch >= self.train_dataloader.collate_fn.stop_epoch:
                        if test_stats[k][0] > top1:
                            top1 = test_stats[k][0]
                            torch.save(self.state_dict(), self.output_dir / "best_stg2.pth")
                    else:
                        top1 = max(test_stats[k][0], top1)
                        torch.save(self.state_dict(), self.output_dir / "best_stg1.pth")

                elif epoch >= self.train_dataloader.collate_fn.stop_epoch:
                    best_stat = {"epoch": -1}
                    if self.ema:
                        self.ema.decay -= 0.0001
                        self.load_resume_state(str(self.output_dir / "best_stg1.pth"))
                        print(f"Refresh EMA at epoch {epoch} with decay {self.ema.decay}")

            d = self.ema.decay_fn(self.ema.updates)
            print(f"epoch {epoch}: train loss {train_stats['loss']:.4f}  model acc {model_acc:.2f}  "
                  f"EMA acc {test_stats['coco_eval_bbox'][0]:.2f}  EMA updates {self.ema.updates} decay in use {d:.5f}")
        print(f"best_stat: {best_stat_print}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as out:
        DetSolver(Cfg(), out).fit()
