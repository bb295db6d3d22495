"""Checkpoints read back into the run: a restore whose copy loop takes none of the weights read
(`checkpoint.not_loaded`, variant unchanged), a resume that restarts its epoch counter and
best score (`other.checkpoint_resume_reset`), a resume that freezes again parameters it had been
training (`gradient.resume_refrozen`), checkpoint names with swapped label values
(`other.checkpoint_name_swapped`) and a test after training on the last weights instead of the
best saved (`other.checkpoint_test_not_best`). Written the ways users write them, with the
correct look-alikes that stay quiet."""

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


def codes(report: torchtriage.Report, code: str) -> list[torchtriage.Finding]:
    return report.filter(code=code)


def loud(report: torchtriage.Report) -> list[torchtriage.Finding]:
    return [f for f in report.findings if f.severity is not Severity.INFO]


def net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))


_X = torch.randn(64, 4, generator=torch.Generator().manual_seed(5))
DATA = (_X, (_X[:, 0] + 0.5 * _X[:, 1] > 0).long())


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer) -> float:
    x, y = DATA
    model.train()
    total = 0.0
    for i in range(0, 64, 16):
        loss = F.cross_entropy(model(x[i:i + 16]), y[i:i + 16])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    return total / 4


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


# ------------------------------------------------ 1. a restore that copies nothing
def restore(model: nn.Module, path: str, fixed: bool = False) -> None:
    ckpt = torch.load(path)
    if fixed:
        ckpt = ckpt["state_dict"]
    own = model.state_dict()
    for name, value in ckpt.items():  # the checkpoint's top level: 'epoch', 'state_dict', 'optim'
        if name in own and own[name].shape == value.shape:
            own[name].copy_(value)
    model.load_state_dict(own)  # <- restore


def _restore_run(fixed: bool) -> torchtriage.Report:
    path = os.path.join(tempfile.mkdtemp(), "snap.pt")
    first = net(0)
    opt = torch.optim.SGD(first.parameters(), lr=0.1)
    for _ in range(2):
        train_epoch(first, opt)
    torch.save({"epoch": 2, "state_dict": first.state_dict(), "optim": opt.state_dict()}, path)
    with torchtriage.watch(discover=True, on_anomaly="record", report=False) as s:
        model = net(1)
        restore(model, path, fixed)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            train_epoch(model, opt)
    return s.report


def test_restore_copy_loop_matching_top_level_keys_loads_nothing():
    [f] = codes(_restore_run(False), "checkpoint.not_loaded")
    assert (f.severity, f.category, f.line) == (Severity.ERROR, Category.OTHER, line("restore"))
    assert f.evidence["state_dict_in_checkpoint"] == "['state_dict']"
    assert f.evidence["parameters_in_checkpoint"] == 4 and f.evidence["changed_by_the_load"] == 0


def test_restore_of_the_nested_state_dict_is_quiet():
    assert not loud(_restore_run(True))


def test_plain_load_of_a_pretrained_file_is_quiet():
    path = os.path.join(tempfile.mkdtemp(), "pre.pt")
    torch.save(net(3).state_dict(), path)
    with torchtriage.watch(discover=True, on_anomaly="record", report=False) as s:
        model = net(1)
        model.load_state_dict(torch.load(path))
        train_epoch(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert not loud(s.report)


def test_teacher_loaded_then_student_reset_to_its_own_copy_is_quiet():
    import copy
    path = os.path.join(tempfile.mkdtemp(), "teacher.pt")
    torch.save(net(3).state_dict(), path)
    with torchtriage.watch(discover=True, on_anomaly="record", report=False) as s:
        teacher, student = net(1), net(2)
        start = copy.deepcopy(student.state_dict())
        teacher.load_state_dict(torch.load(path))
        student.load_state_dict(start)  # the same architecture, reset to its own initialization
        train_epoch(student, torch.optim.SGD(student.parameters(), lr=0.1))
    assert not codes(s.report, "checkpoint.not_loaded")


# ------------------------------------------------ 2. a resume that restarts its counter and best
def fit(folder: str, iters: int, resume: str | None, fixed: bool = False) -> nn.Module:
    model = net(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    start, best_loss = 0, float("inf")
    if resume:
        ckpt = torch.load(resume)  # <- resume
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        start, best_loss = ckpt["iter"], ckpt["best_loss"]
    if not fixed:
        best_loss = float("inf")  # the bug: the restored best is thrown away
    for it in range(start if fixed else 0, iters):
        loss = train_epoch(model, opt)
        if loss < best_loss:
            best_loss = loss
        torch.save({"iter": it + 1, "best_loss": best_loss, "model": model.state_dict(), "opt": opt.state_dict()},
                   os.path.join(folder, f"iter_{it + 1}.pt"))
    return model


def _resume_run(fixed: bool) -> torchtriage.Report:
    folder = tempfile.mkdtemp()
    with torchtriage.watch(discover=True, on_anomaly="record", report=False) as s:
        fit(folder, 4, None, fixed)
        fit(folder, 8, os.path.join(folder, "iter_4.pt"), fixed)
    return s.report


def test_resume_that_restarts_the_iteration_counter_and_best():
    [f] = codes(_resume_run(False), "other.checkpoint_resume_reset")
    assert (f.severity, f.category, f.line) == (Severity.WARNING, Category.OTHER, line("resume"))
    assert f.evidence["counters_reset"] == [{"key": "iter", "restored": 4, "written_after_resume": 1}]


def test_resume_from_the_restored_counter_is_quiet():
    assert not loud(_resume_run(True))


def test_fine_tuning_from_a_file_another_run_wrote_is_quiet():
    folder = tempfile.mkdtemp()
    fit(folder, 4, None)  # an earlier job, not watched: its file is a pretrained start
    with torchtriage.watch(discover=True, on_anomaly="record", report=False) as s:
        model = net(0)
        model.load_state_dict(torch.load(os.path.join(folder, "iter_4.pt"))["model"])
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(3):
            train_epoch(model, opt)
            torch.save({"iter": epoch + 1, "model": model.state_dict()}, os.path.join(folder, f"ft_{epoch}.pt"))
    assert not codes(s.report, "other.checkpoint_resume_reset")


# ------------------------------------------------ 3. a resume that freezes what it trained
def _refrozen_run(fixed: bool) -> torchtriage.Report:
    path = os.path.join(tempfile.mkdtemp(), "last.pt")
    with torchtriage.watch(discover=True, on_anomaly="record", report=False) as s:
        model = net(0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(2):
            train_epoch(model, opt)  # the whole network trains (unfrozen at epoch 0)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)

        model = net(0)
        for p in model[0].parameters():
            p.requires_grad_(False)  # the freeze of a fresh start, run again on resume
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ckpt = torch.load(path)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])  # <- optimizer restored
        if fixed:
            for p in model[0].parameters():
                p.requires_grad_(True)
        for _ in range(2):
            train_epoch(model, opt)
    return s.report


def test_resume_that_freezes_again_the_trained_first_layer():
    [f] = codes(_refrozen_run(False), "gradient.resume_refrozen")
    assert (f.severity, f.category, f.line) == (Severity.WARNING, Category.GRADIENT, line("optimizer restored"))
    assert f.parameter == "0.weight" and f.evidence["count"] == 2


def test_resume_that_unfreezes_after_the_restore_is_quiet():
    assert not codes(_refrozen_run(True), "gradient.resume_refrozen")


# ------------------------------------------------ 4. checkpoint names with swapped values
def _named_run(fixed: bool) -> torchtriage.Report:
    folder = tempfile.mkdtemp()
    x, y = DATA
    with torchtriage.watch(discover=True, on_anomaly="record", report=False) as s:
        model = net(0)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for epoch in range(3):
            loss = train_epoch(model, opt)
            acc = evaluate(model, x, y)
            name = "epoch{}_loss{:.4f}_acc{:.4f}.pt".format(epoch, *((loss, acc) if fixed else (acc, loss)))
            torch.save(model.state_dict(), os.path.join(folder, name))  # <- named save
    return s.report


def test_checkpoint_name_with_loss_and_accuracy_swapped():
    [f] = codes(_named_run(False), "other.checkpoint_name_swapped")
    assert (f.severity, f.category, f.line) == (Severity.WARNING, Category.OTHER, line("named save"))
    assert {f.evidence["label"], f.evidence["other_label"]} == {"loss", "acc"} and f.evidence["saves"] == 3


def test_checkpoint_name_in_the_order_of_its_labels_is_quiet():
    assert not codes(_named_run(True), "other.checkpoint_name_swapped")


# ------------------------------------------------ 5. a test on the last weights, not the best
VAL_ACC = [0.55, 0.70, 0.80, 0.72, 0.74, 0.71, 0.69]


def _test_run(fixed: bool, test: bool = True) -> torchtriage.Report:
    best_path = os.path.join(tempfile.mkdtemp(), "best.pt")
    x, y = DATA
    with torchtriage.watch(discover=True, on_anomaly="record", report=False) as s:
        model = net(0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        best_acc = 0.0
        for scripted in VAL_ACC:
            train_epoch(model, opt)
            evaluate(model, x, y)
            val_acc = scripted  # (the validation result, scripted: it peaks at the third epoch)
            if val_acc > best_acc:
                best_acc = val_acc
                torch.save(model.state_dict(), best_path)
        if fixed:
            model.load_state_dict(torch.load(best_path))
        if test:
            print("test accuracy", evaluate(model, x[:32], y[:32]))  # <- test
    return s.report


def test_test_after_training_on_the_last_weights():
    [f] = codes(_test_run(False), "other.checkpoint_test_not_best")
    assert (f.severity, f.category, f.line) == (Severity.WARNING, Category.OTHER, line("test"))
    assert f.evidence["validations_after_best_not_saved"] >= 2


def test_test_after_loading_the_best_is_quiet():
    assert not codes(_test_run(True), "other.checkpoint_test_not_best")


def test_training_without_a_test_is_quiet():
    assert not codes(_test_run(False, test=False), "other.checkpoint_test_not_best")
