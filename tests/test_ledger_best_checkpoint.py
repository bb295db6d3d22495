"""A best-model checkpoint overwritten by a worse model (`other.best_checkpoint_regressed`):
bookkeeping bugs written as users write them (an early stopper's delta with the wrong sign in a
plain loop, a trainer class whose best accuracy is not restored on resume, an evaluation
callback with a relative tolerance), with the exact finding; the correct look-alikes (a latest
file written every epoch, a best file that stores another value too, a periodic save with a
final one) stay quiet."""

from __future__ import annotations

import os
import pathlib
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Category, Severity

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def found(report: torchtriage.Report) -> list[torchtriage.Finding]:
    return report.filter(code="other.best_checkpoint_regressed")


def setup(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.01), torch.randn(16, 4), torch.randn(16, 1)


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    for i in range(0, 16, 4):
        loss = F.mse_loss(model(x[i:i + 4]), y[i:i + 4])
        opt.zero_grad()
        loss.backward()
        opt.step()


# the validation results of a run that peaks, then wanders slightly above its best
VAL_LOSSES = [0.90, 0.70, 0.60, 0.75, 0.61, 0.62, 0.90, 0.615, 0.58, 0.59]


# ---------------------------------------------------------------- bugs
def test_early_stopping_delta_with_the_wrong_sign_in_a_plain_loop():
    model, opt, x, y = setup()
    path = os.path.join(tempfile.mkdtemp(), "best.pt")
    best, delta = None, 0.03
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for val_loss in VAL_LOSSES:
            train_epoch(model, opt, x, y)
            score = -val_loss
            if best is None or not score < best - delta:  # the bug: a slightly worse epoch counts
                best = score
                torch.save({"model": model.state_dict(), "val_loss": val_loss}, path)  # <- save A
    [f] = found(s.report)
    assert (f.category, f.severity, f.line, f.op) == (Category.OTHER, Severity.WARNING, line("save A"), "torch.save")
    ev = f.evidence
    assert (ev["metric"], ev["values_written"]) == ("val_loss", [0.9, 0.7, 0.6, 0.61, 0.62, 0.615, 0.58, 0.59])
    assert (ev["better"], ev["worse_writes"], ev["best_written"], ev["final_value"]) == ("lower", 4, 0.58, 0.59)
    assert ev["steps_written"] == [4, 8, 12, 20, 24, 32, 36, 40]
    assert f.message.startswith("best.pt is written only on some evaluations, as a best checkpoint, but 4 of its 8 "
                                "writes replaced a better")
    assert "it ends holding 0.59 while 0.58 was written before" in f.message


def test_best_accuracy_not_restored_when_a_trainer_class_resumes():
    class Trainer:
        def __init__(self, folder: str) -> None:
            self.model, self.opt, self.x, self.y = setup(1)
            self.folder = folder
            self.best_acc = 0.0  # never read back from the checkpoint
            last = os.path.join(folder, "last.pt")
            if os.path.exists(last):
                ckpt = torch.load(last)
                self.model.load_state_dict(ckpt["model"])

        def fit(self, accuracies: list[float]) -> None:
            for acc in accuracies:
                train_epoch(self.model, self.opt, self.x, self.y)
                self.validate_and_save(acc)
                torch.save({"model": self.model.state_dict()}, os.path.join(self.folder, "last.pt"))

        def validate_and_save(self, acc: float) -> None:
            if acc > self.best_acc:
                self.best_acc = acc
                torch.save(self.model.state_dict(), os.path.join(self.folder, "model_best.pth"))  # <- save B

    folder = tempfile.mkdtemp()
    with torchtriage.watch(on_anomaly="record", report=False) as s:
        Trainer(folder).fit([0.50, 0.62, 0.71, 0.69, 0.70])
        Trainer(folder).fit([0.64, 0.66, 0.65])  # the job was restarted
    [f] = found(s.report)
    assert (f.severity, f.line, f.module) == (Severity.WARNING, line("save B"), "Trainer")
    ev = f.evidence
    assert (ev["metric"], ev["better"], ev["values_written"]) == ("acc", "higher", [0.5, 0.62, 0.71, 0.64, 0.66])
    assert (ev["first_worse_value"], ev["best_before_it"], ev["final_value"]) == (0.64, 0.71, 0.66)


def test_evaluation_callback_with_a_relative_tolerance_the_wrong_way():
    class BestModelCallback:
        def __init__(self, model: nn.Module, path: str, tolerance: float = 0.05) -> None:
            self.model, self.path, self.tolerance = model, path, tolerance
            self.best_metric = float("inf")

        def on_evaluate(self, metrics: dict) -> None:
            current = float(metrics["eval_loss"])
            if current < self.best_metric * (1 + self.tolerance):  # the bug: should be (1 - tolerance)
                self.best_metric = current
                self._save(current)

        def _save(self, current: float) -> None:
            torch.save({"state": self.model.state_dict(), "eval_loss": current}, self.path)

    model, opt, x, y = setup(2)
    cb = BestModelCallback(model, os.path.join(tempfile.mkdtemp(), "checkpoint-best"))
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for epoch, loss in enumerate([1.0, 0.8, 2.0, 0.7, 0.72, 0.74, 1.5, 0.76]):
            train_epoch(model, opt, x, y)
            cb.on_evaluate({"eval_loss": torch.tensor(loss), "epoch": epoch})
    [f] = found(s.report)
    assert f.severity == Severity.WARNING and f.module == "BestModelCallback"
    assert f.evidence["values_written"] == [1.0, 0.8, 0.7, 0.72, 0.74, 0.76]
    assert f.evidence["worse_writes"] == 3


def test_a_worse_write_later_put_back_is_info():
    model, opt, x, y = setup(3)
    path = os.path.join(tempfile.mkdtemp(), "best.pt")
    best = float("inf")
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for val_loss in [0.9, 0.7, 0.8, 0.72, 0.95, 0.5]:
            train_epoch(model, opt, x, y)
            if val_loss < best + 0.1:
                best = min(best, val_loss)
                torch.save(model.state_dict(), path)
    [f] = found(s.report)
    assert f.severity == Severity.INFO and f.evidence["values_written"] == [0.9, 0.7, 0.72, 0.5]
    assert f.evidence["worse_writes"] == 1


# ---------------------------------------------------------------- look-alikes: quiet
def test_correct_best_and_latest_files_are_quiet():
    model, opt, x, y = setup(4)
    folder = tempfile.mkdtemp()
    best = float("inf")
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for epoch, val_loss in enumerate(VAL_LOSSES):
            train_epoch(model, opt, x, y)
            torch.save({"model": model.state_dict(), "val_loss": val_loss, "epoch": epoch},
                       os.path.join(folder, "last.pt"))  # every epoch: not a best file
            if val_loss < best - 0.005:
                best = val_loss
                torch.save({"model": model.state_dict(), "val_loss": val_loss}, os.path.join(folder, "best.pt"))
    assert found(s.report) == []


def test_best_by_accuracy_storing_the_train_loss_too_is_quiet():
    model, opt, x, y = setup(5)
    path = os.path.join(tempfile.mkdtemp(), "best_acc.pt")
    best_acc = -1.0
    accs = [0.5, 0.55, 0.52, 0.6, 0.58, 0.58, 0.7, 0.69]
    train_losses = [1.0, 0.9, 0.95, 0.7, 0.8, 0.6, 0.65, 0.5]
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for acc, train_loss in zip(accs, train_losses):
            train_epoch(model, opt, x, y)
            if acc >= best_acc:
                best_acc = acc
                torch.save({"model": model.state_dict(), "train_loss": train_loss, "acc": acc}, path)
    assert found(s.report) == []


def test_periodic_saves_with_a_final_one_are_quiet():
    model, opt, x, y = setup(6)
    path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    losses = [0.9, 0.7, 0.8, 0.6, 0.65, 0.62, 0.7]
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for epoch, val_loss in enumerate(losses):
            train_epoch(model, opt, x, y)
            if epoch % 2 == 1 or epoch == len(losses) - 1:
                torch.save({"model": model.state_dict(), "val_loss": val_loss}, path)
        train_epoch(model, opt, x, y)
        torch.save({"model": model.state_dict(), "val_loss": 0.75}, path)  # the end of training
    assert found(s.report) == []
