# Source: NVIDIA-NeMo/Automodel, nemo_automodel/components/checkpoint/checkpointing.py (Checkpointer.save_optimizer, load_optimizer, _do_load, _do_save), nemo_automodel/components/checkpoint/stateful_wrappers.py (OptimizerState), commit 55aff8304d3382de1e5eed3d0bf0b613d07abfe2
# Report: https://github.com/NVIDIA-NeMo/Automodel/issues/763
# Fine-tuning with checkpoint / resume through torch.distributed.checkpoint (DCP): the
# optimizer and LR scheduler are saved as one OptimizerState dict under <ckpt>/optim, the
# model under <ckpt>/model. The job trains 20 steps, checkpoints, and a second "job" builds
# a fresh model / optimizer / scheduler, loads the checkpoint and trains 20 more steps.
# The LLM is a small MLP on a synthetic regression task; single process (DCP runs without
# a process group).
import os
import tempfile
from functools import partial
from typing import Any, Optional

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

TOTAL_STEPS, SAVE_AT = 40, 20


class OptimizerState:
    def __init__(self, model, optimizer, scheduler: Optional[Any] = None):
        self.model = [model] if isinstance(model, torch.nn.Module) else model
        self.optimizer = [optimizer] if isinstance(optimizer, torch.optim.Optimizer) else optimizer
        self.scheduler = [scheduler] if isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler) else scheduler

    def state_dict(self) -> dict[str, Any]:
        func = partial(
            get_optimizer_state_dict,
            options=StateDictOptions(flatten_optimizer_state_dict=True),
        )
        optimizer_state_dict = {k: v for sd in map(func, self.model, self.optimizer) for k, v in sd.items()}

        state_dict = {
            "optim": optimizer_state_dict,
        }
        if self.scheduler is not None:
            state_dict["sched"] = self.scheduler[0].state_dict()

        return state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # sets our state dicts on the optimizer, now that we've loaded
        func = partial(
            set_optimizer_state_dict,
            optim_state_dict=state_dict["optim"],
            options=StateDictOptions(flatten_optimizer_state_dict=True),
        )
        list(map(func, self.model, self.optimizer))

        # load the scheduler state if it exists
        if "sched" in state_dict and self.scheduler is not None:
            list(map(lambda x: x.load_state_dict(state_dict["sched"]), self.scheduler))


class Checkpointer:
    def save_model(self, model: nn.Module, weights_path: str) -> None:
        self._do_save(model.state_dict(), os.path.join(weights_path, "model"))

    def load_model(self, model: nn.Module, weights_path: str) -> None:
        state_dict = model.state_dict()
        state_dict = self._do_load(state_dict, os.path.join(weights_path, "model"))
        model.load_state_dict(state_dict)

    def save_optimizer(self, optimizer, model, weights_path: str, scheduler: Optional[Any] = None) -> None:
        optimizer_path = os.path.join(weights_path, "optim")
        os.makedirs(optimizer_path, exist_ok=True)
        optimizer_state = OptimizerState(model, optimizer, scheduler)
        state_dict = optimizer_state.state_dict()
        self._do_save(state_dict, optimizer_path)

    def load_optimizer(self, optimizer, model, weights_path: str, scheduler: Optional[Any] = None) -> None:
        optimizer_state = OptimizerState(model, optimizer, scheduler)
        state_dict = optimizer_state.state_dict()
        self._do_load(state_dict, os.path.join(weights_path, "optim"))

    def _do_load(self, state_dict, path: str):
        dcp.load(state_dict, checkpoint_id=path)
        return state_dict

    def _do_save(self, state_dict, path: str) -> None:
        dcp.save(state_dict, checkpoint_id=path)


def build(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 5) * max(0.0, 1 - s / TOTAL_STEPS))
    return model, optimizer, scheduler


def batches():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(16, 1, generator=g)
    for _ in range(TOTAL_STEPS):
        x = torch.randn(64, 16, generator=g)
        yield x, torch.sin(0.3 * x @ w) + 0.05 * torch.randn(64, 1, generator=g)


def train_steps(model, optimizer, scheduler, data, start, stop, tag):
    for step in range(start, stop):
        x, y = data[step]
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % 5 == 0 or step == stop - 1 or step == start:
            adam_step = optimizer.state[next(iter(model.parameters()))]["step"].item()
            print("[%s] step %2d loss %.4f lr %.5f adam step %d" % (
                tag, step, loss.item(), optimizer.param_groups[0]["lr"], adam_step))
    return loss.item()


def main():
    data = list(batches())
    checkpointer = Checkpointer()
    with tempfile.TemporaryDirectory() as ckpt_dir:
        # first job: train and checkpoint
        model, optimizer, scheduler = build()
        train_steps(model, optimizer, scheduler, data, 0, SAVE_AT, "job1")
        checkpointer.save_model(model, ckpt_dir)
        checkpointer.save_optimizer(optimizer, model, ckpt_dir, scheduler)
        ref_loss = train_steps(model, optimizer, scheduler, data, SAVE_AT, TOTAL_STEPS, "uninterrupted")

        # second job: resume from the checkpoint
        model, optimizer, scheduler = build(seed=123)
        checkpointer.load_model(model, ckpt_dir)
        checkpointer.load_optimizer(optimizer, model, ckpt_dir, scheduler)
        print("resumed: scheduler last_epoch %d lr %.5f" % (scheduler.last_epoch, optimizer.param_groups[0]["lr"]))
        loss = train_steps(model, optimizer, scheduler, data, SAVE_AT, TOTAL_STEPS, "resumed")
    print("final loss resumed %.4f uninterrupted %.4f" % (loss, ref_loss))


if __name__ == "__main__":
    main()
