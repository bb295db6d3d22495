"""Model selection read from the decision that guards a best-model save (session 15).

`other.best_checkpoint_regressed` when the running best is set outside the branch that saves (it
follows every evaluation, so a save compares with the previous evaluation, not the best): a plain
loop scored on accuracy, a trainer class whose save is a helper method, an HF-like callback
reading a metrics dict. `other.best_checkpoint_on_training_loss` when the compared score is the
training batch's loss just recorded: a plain loop, a class trainer keeping `self.last_loss`, an
engine-like handler with a score function. Look-alikes stay quiet: the running best set inside the
branch, `best = min(best, loss)`, early stopping with patience, a best file chosen on validation
while the epoch's mean training loss is also around, a best chosen on the epoch's mean training loss.
"""

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


def regressed(report: torchtriage.Report) -> list[torchtriage.Finding]:
    return report.filter(code="other.best_checkpoint_regressed")


def on_train(report: torchtriage.Report) -> list[torchtriage.Finding]:
    return report.filter(code="other.best_checkpoint_on_training_loss")


def setup(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05), torch.randn(32, 4), torch.randn(32, 1)


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> list[float]:
    model.train()
    losses = []
    for i in (torch.randperm(3) * 8).tolist():  # a shuffled loader: the last batch differs by epoch
        loss = F.mse_loss(model(x[i:i + 8]), y[i:i + 8])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def validate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    return F.mse_loss(model(x[24:]), y[24:]).item()


# validation results that bottom out, rise, and dip once
ACCS = [0.40, 0.55, 0.52, 0.61, 0.66, 0.60, 0.58, 0.62, 0.57]
LOSSES = [1.0, 0.8, 0.85, 0.6, 0.55, 0.7, 0.72, 0.65, 0.9, 0.7]


# ---------------------------------------------------------------- the running best follows every evaluation
def test_plain_loop_best_accuracy_set_after_every_epoch():
    model, opt, x, y = setup()
    path = os.path.join(tempfile.mkdtemp(), "best_acc.pt")
    best_acc = 0.0
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for acc in ACCS:
            train_epoch(model, opt, x, y)
            if acc > best_acc:
                torch.save(model.state_dict(), path)  # <- save A
            best_acc = acc  # <- record A
    [f] = regressed(s.report)
    assert (f.category, f.severity, f.line, f.op) == (Category.OTHER, Severity.WARNING, line("save A"), "torch.save")
    ev = f.evidence
    assert (ev["metric"], ev["better"], ev["values_written"]) == ("acc", "higher", [0.4, 0.55, 0.61, 0.66, 0.62])
    assert (ev["best_written"], ev["final_value"], ev["best_record"]) == (0.66, 0.62, "best_acc")
    assert ev["record_set_every_evaluation_at"].endswith(f":{line('record A')}")
    assert f"at line {line('record A')} after every evaluation" in f.cause


def test_trainer_class_saving_through_a_helper_method():
    class Trainer:
        def __init__(self, folder: str) -> None:
            self.model, self.opt, self.x, self.y = setup(1)
            self.folder = folder
            self.best_val = float("inf")

        def save(self) -> None:
            torch.save({"model": self.model.state_dict()}, os.path.join(self.folder, "best.ckpt"))

        def on_validation_end(self, val: float) -> None:
            if val < self.best_val:
                self.save()  # <- save B
            self.best_val = val

        def fit(self, vals: list[float]) -> None:
            for v in vals:
                train_epoch(self.model, self.opt, self.x, self.y)
                self.on_validation_end(v)

    with torchtriage.watch(on_anomaly="record", report=False) as s:
        Trainer(tempfile.mkdtemp()).fit(LOSSES)
    [f] = regressed(s.report)
    assert (f.severity, f.line) == (Severity.WARNING, line("save B"))
    ev = f.evidence
    assert (ev["metric"], ev["better"]) == ("val", "lower")
    assert ev["values_written"] == [1.0, 0.8, 0.6, 0.55, 0.65, 0.7]
    assert (ev["best_written"], ev["final_value"], ev["best_record"]) == (0.55, 0.7, "self.best_val")


def test_callback_reading_a_metrics_dict():
    class SaveBest:
        def __init__(self, model: nn.Module, path: str) -> None:
            self.model, self.path, self.best = model, path, None

        def on_evaluate(self, metrics: dict) -> None:
            if self.best is None or metrics["eval_loss"] < self.best:
                torch.save(self.model.state_dict(), self.path)
            self.best = metrics["eval_loss"]

    model, opt, x, y = setup(2)
    cb = SaveBest(model, os.path.join(tempfile.mkdtemp(), "model.bin"))
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for loss in LOSSES:
            train_epoch(model, opt, x, y)
            cb.on_evaluate({"eval_loss": loss, "epoch": 1.0})
    [f] = regressed(s.report)
    assert f.severity == Severity.WARNING and f.module == "SaveBest"
    assert f.evidence["metric"] == "metrics['eval_loss']" and f.evidence["final_value"] == 0.7


# ---------------------------------------------------------------- the best chosen on the training batch's loss
def test_plain_loop_best_on_the_last_batch_loss_with_a_validation_pass():
    model, opt, x, y = setup(3)
    path = os.path.join(tempfile.mkdtemp(), "best.pt")
    best = float("inf")
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(12):
            last = train_epoch(model, opt, x, y)[-1]
            validate(model, x, y)
            if last < best:
                best = last
                torch.save(model.state_dict(), path)  # <- save C
    [f] = on_train(s.report)
    assert (f.category, f.severity, f.line) == (Category.OTHER, Severity.WARNING, line("save C"))
    ev = f.evidence
    assert ev["metric"] == "last" and ev["writes"] >= 3
    assert ev["values_compared"][:3] == ev["training_loss_at_write"][:3]
    assert ev["evaluation_forwards_before_last_write"] >= 2
    assert "equals the loss of the training batch just trained on" in f.message


def test_trainer_class_keeping_its_last_loss():
    class Trainer:
        def __init__(self) -> None:
            self.model, self.opt, self.x, self.y = setup(4)
            self.best_loss = float("inf")
            self.last_loss = float("inf")
            self.dir = tempfile.mkdtemp()

        def training_step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
            loss = F.mse_loss(self.model(xb), yb)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.last_loss = loss.item()

        def end_of_epoch(self, epoch: int) -> None:
            if self.last_loss <= self.best_loss:
                self.best_loss = self.last_loss
                torch.save(self.model.state_dict(), os.path.join(self.dir, f"best_{epoch}.pt"))

        def run(self) -> None:
            for epoch in range(12):
                self.model.train()
                for i in (torch.randperm(3) * 8).tolist():
                    self.training_step(self.x[i:i + 8], self.y[i:i + 8])
                self.end_of_epoch(epoch)

    with torchtriage.watch(on_anomaly="record", report=False) as s:
        Trainer().run()
    [f] = on_train(s.report)
    assert f.severity == Severity.INFO  # no evaluation in the run: only one batch's loss is visible
    assert f.evidence["metric"] == "self.last_loss" and f.evidence["files"] == f.evidence["writes"] >= 3


def test_engine_handler_with_a_score_function():
    class Engine:
        def __init__(self, step_fn) -> None:
            self.step_fn, self.output, self.handlers = step_fn, None, []

        def run(self, batches: list, epochs: int, evaluate) -> None:
            for _ in range(epochs):
                for k in torch.randperm(len(batches)).tolist():
                    self.output = self.step_fn(batches[k])
                for h in self.handlers:
                    h(self)
                evaluate()

    class KeepBest:
        def __init__(self, model: nn.Module, folder: str, score_fn) -> None:
            self.model, self.folder, self.score_fn, self.best = model, folder, score_fn, None

        def __call__(self, engine: Engine) -> None:
            value = self.score_fn(engine)
            if self.best is not None and value <= self.best:
                return
            self.best = value
            torch.save(self.model.state_dict(), os.path.join(self.folder, "best.pt"))

    model, opt, x, y = setup(5)

    def step(batch):
        xb, yb = batch
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return {"loss": loss.item()}

    def score(engine):
        return -engine.output["loss"]  # <- score F

    engine = Engine(step)
    engine.handlers.append(KeepBest(model, tempfile.mkdtemp(), score))
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        engine.run([(x[i:i + 8], y[i:i + 8]) for i in range(0, 24, 8)], 14, lambda: validate(model, x, y))
    [f] = on_train(s.report)
    assert (f.severity, f.line, f.module) == (Severity.WARNING, line("score F"), "KeepBest")
    assert f.evidence["score_computed_at"].endswith(f":{line('score F')}")


# ---------------------------------------------------------------- look-alikes: quiet
def test_running_best_set_inside_the_branch_is_quiet():
    model, opt, x, y = setup(6)
    path = os.path.join(tempfile.mkdtemp(), "best_acc.pt")
    best_acc = 0.0
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for acc in ACCS:
            train_epoch(model, opt, x, y)
            if acc > best_acc:
                torch.save(model.state_dict(), path)
                best_acc = acc
    assert regressed(s.report) == [] and on_train(s.report) == []


def test_best_with_min_and_early_stopping_is_quiet():
    model, opt, x, y = setup(7)
    path = os.path.join(tempfile.mkdtemp(), "best.pt")
    best, bad, patience = float("inf"), 0, 3
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for val in LOSSES:
            train_epoch(model, opt, x, y)
            if val < best:
                torch.save(model.state_dict(), path)
                bad = 0
            else:
                bad += 1
                if bad > patience:
                    break
            best = min(best, val)
    assert regressed(s.report) == [] and on_train(s.report) == []


def test_best_on_validation_beside_the_training_loss_is_quiet():
    model, opt, x, y = setup(8)
    path = os.path.join(tempfile.mkdtemp(), "best.pt")
    best = float("inf")
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(12):
            losses = train_epoch(model, opt, x, y)
            last = losses[-1]
            val = validate(model, x, y)
            if val < best:
                best = val
                torch.save({"model": model.state_dict(), "train_loss": last, "val": val}, path)
    assert regressed(s.report) == [] and on_train(s.report) == []


def test_best_on_the_epoch_mean_training_loss_is_quiet():
    model, opt, x, y = setup(9)
    path = os.path.join(tempfile.mkdtemp(), "best.pt")
    best = float("inf")
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(12):
            losses = train_epoch(model, opt, x, y)
            mean = sum(losses) / len(losses)
            if mean < best:
                best = mean
                torch.save(model.state_dict(), path)
    assert regressed(s.report) == [] and on_train(s.report) == []
