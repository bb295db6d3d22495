"""Session 18: a resume that restores the weights and drops the optimizer state the checkpoint holds
(`other.optimizer_not_resumed`), written the way users write a resume, and the look-alikes that are
correct: the optimizer state loaded, a second stage that starts its own count, the same optimizer
training on after best weights are reloaded, a checkpoint this run did not write."""

from __future__ import annotations

import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()
CODE = "other.optimizer_not_resumed"


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def data(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(96, 6, generator=g)
    return x, (x[:, :3].sum(1) > 0).long()


def epoch_of(model, opt, x, y) -> None:
    for i in range(0, len(x), 16):
        loss = F.cross_entropy(model(x[i:i + 16]), y[i:i + 16])
        opt.zero_grad()
        loss.backward()
        opt.step()


def found(report: torchtriage.Report) -> list:
    return [f for f in report if f.code == CODE]


# ---------------------------------------------------------------- Adam, the optimizer rebuilt on resume
def adam_resume(tmp_path: pathlib.Path, load_optimizer: bool) -> torchtriage.Report:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    x, y = data()
    path = tmp_path / "last.pt"

    def fit(start: int, epochs: int, resume: bool) -> None:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        if resume:
            ckpt = torch.load(path)
            model.load_state_dict(ckpt["model"])  # <- adam-model-load
            if load_optimizer:
                opt.load_state_dict(ckpt["optimizer"])
            start = ckpt["epoch"] + 1
        for epoch in range(start, start + epochs):
            epoch_of(model, opt, x, y)
            torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict()}, path)

    def train() -> None:
        fit(0, 3, resume=False)
        fit(0, 3, resume=True)  # the "interrupted" job started again with --resume

    with torchtriage.watch(model, on_anomaly="record", report=False, discover=True) as s:
        train()
    return s.report


def test_a_resume_that_rebuilds_adam_and_never_loads_its_state_is_a_warning(tmp_path):
    [f] = found(adam_resume(tmp_path, load_optimizer=False))
    assert f.severity is Severity.WARNING and f.line == line("adam-model-load")
    assert f.evidence["saved_step"] == 18 and f.evidence["live_step_at_first_step"] == 1
    assert f.evidence["optimizer_load_state_dict_called"] is False
    assert f.evidence["loop_continued"] == "'epoch' 2 restored, 3 written"
    assert "optimizer" in f.message and "Adam" in f.message


def test_a_resume_that_loads_the_optimizer_state_is_quiet(tmp_path):
    assert not found(adam_resume(tmp_path, load_optimizer=True))


# ---------------------------------------------------------------- SGD + StepLR, nested state, a new model
class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(6, 12)
        self.head = nn.Linear(12, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


def load_checkpoint(model, filename, optimizer=None):  # the optimizer argument accepted and ignored
    state = torch.load(filename)
    model.load_state_dict(state["state"]["net"])  # <- sgd-model-load
    return state["iteration"]


def sgd_resume(tmp_path: pathlib.Path) -> torchtriage.Report:
    x, y = data(1)
    path = tmp_path / "ckpt.pth"

    def main(resume: bool, iters: int) -> None:
        torch.manual_seed(0)
        model = Net()
        start = 0
        if resume:
            start = load_checkpoint(model, path)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.1)
        for it in range(start, start + iters):
            epoch_of(model, opt, x, y)
            sched.step()
            torch.save({"iteration": it + 1, "state": {"net": model.state_dict(), "opt": opt.state_dict()}}, path)

    def train() -> None:
        main(False, 5)
        main(True, 4)

    with torchtriage.watch([], on_anomaly="record", report=False, discover=True) as s:
        train()
    return s.report


def test_an_ignored_optimizer_argument_on_resume_with_a_decayed_lr_is_a_warning(tmp_path):
    [f] = found(sgd_resume(tmp_path))
    assert f.severity is Severity.WARNING and f.line == line("sgd-model-load")
    assert f.evidence["saved_lr"] is not None and abs(f.evidence["saved_lr"] - 0.01) < 1e-9
    assert f.evidence["live_lr_at_first_step"] == 0.1
    assert f.evidence["optimizer_state_in_checkpoint"] == "['state']['opt']"


# ---------------------------------------------------------------- look-alikes that are correct
def two_stages(tmp_path: pathlib.Path, same_optimizer: bool) -> torchtriage.Report:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    x, y = data(2)
    best = tmp_path / "best.pt"

    def train() -> None:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        best_loss = float("inf")
        for epoch in range(4):
            epoch_of(model, opt, x, y)
            with torch.no_grad():
                val = F.cross_entropy(model(x), y).item()
            if val < best_loss:
                best_loss = val
                torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict()}, best)
        model.load_state_dict(torch.load(best)["model"])
        # stage two: fine-tune from the best weights with its own optimizer (or the same one)
        tune = opt if same_optimizer else torch.optim.SGD(model.parameters(), lr=1e-4)
        for _ in range(3):
            epoch_of(model, tune, x, y)
        torch.save(model.state_dict(), tmp_path / "final.pt")

    with torchtriage.watch(model, on_anomaly="record", report=False, discover=True) as s:
        train()
    return s.report


def test_a_second_stage_with_its_own_optimizer_is_quiet(tmp_path):
    assert not found(two_stages(tmp_path, same_optimizer=False))


def test_reloading_the_best_weights_and_training_on_with_the_same_optimizer_is_quiet(tmp_path):
    assert not found(two_stages(tmp_path, same_optimizer=True))


def test_fine_tuning_from_a_checkpoint_this_run_did_not_write_is_quiet(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    x, y = data(3)
    pre = torch.optim.Adam(model.parameters())
    epoch_of(model, pre, x, y)
    torch.save({"epoch": 0, "model": model.state_dict(), "optimizer": pre.state_dict()}, tmp_path / "pre.pt")

    def train() -> None:
        ckpt = torch.load(tmp_path / "pre.pt")
        model.load_state_dict(ckpt["model"])
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        for epoch in range(ckpt["epoch"] + 1, ckpt["epoch"] + 4):
            epoch_of(model, opt, x, y)
            torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict()},
                       tmp_path / "tuned.pt")

    with torchtriage.watch(model, on_anomaly="record", report=False, discover=True) as s:
        train()
    assert not found(s.report)
