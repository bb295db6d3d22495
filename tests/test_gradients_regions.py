"""A no_grad region that cut the loss is named where the loss's inputs were made (the step
record's data flow), once: not an earlier evaluation forward of the step, not once per layer of
the model that ran there, and not as an evaluation in train() mode."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import marked
from torchtriage import Severity

HERE = str(Path(__file__))


line_of = marked(Path(HERE))


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.head = nn.Sequential(nn.Dropout(0.1), nn.Linear(width, 3))

    def forward(self, x):
        return self.head(self.features(x))


def _loud(report):
    return [f for f in report if f.severity is not Severity.INFO]


def distill(student_under_no_grad: bool):
    torch.manual_seed(0)
    teacher, student = Net(16), Net(8)
    opt_t = torch.optim.Adam(teacher.parameters())
    opt_s = torch.optim.Adam(student.parameters())
    batches = [(torch.randn(4, 6), torch.randint(0, 3, (4,))) for _ in range(2)]
    raises = pytest.raises(RuntimeError, match="does not require grad") if student_under_no_grad \
        else contextlib.nullcontext()
    with raises, torchtriage.watch([teacher, student], [opt_t, opt_s], on_anomaly="record", report=False) as s:
        for x, y in batches:  # the teacher first
            opt_t.zero_grad()
            F.cross_entropy(teacher(x), y).backward()
            opt_t.step()
        teacher.eval()
        with torch.no_grad():
            teacher(batches[0][0])  # evaluation of the teacher
        for x, y in batches:
            opt_s.zero_grad()
            with torch.no_grad():
                if student_under_no_grad:
                    logits = student(x)  # student under no_grad
                soft = F.softmax(teacher(x) / 2, dim=-1)  # (the last forward before backward)
            if not student_under_no_grad:
                logits = student(x)
            loss = F.kl_div(F.log_softmax(logits / 2, dim=-1), soft, reduction="batchmean") + F.cross_entropy(logits, y)
            loss.backward()
            opt_s.step()
    return s.report


def test_the_students_forward_in_the_teachers_no_grad_block_is_the_one_cut():
    (f,) = _loud(distill(student_under_no_grad=True))
    assert (f.code, f.severity) == ("gradient.loss_no_grad_fn", Severity.ERROR)
    assert (f.file, f.line) == (HERE, line_of("student under no_grad"))
    assert f.cause == f"the forward ran under torch.no_grad() ({HERE}:{line_of('student under no_grad')}): " \
                      "no graph was recorded"


def test_distillation_with_the_student_outside_no_grad_is_quiet():
    assert _loud(distill(student_under_no_grad=False)) == []


def test_a_model_that_ran_only_under_no_grad_is_one_finding_for_all_its_layers():
    """Two models with the same layer names: the one whose forward ran under no_grad (its output
    still added to a loss that has a graph) gets one cut for all its parameters, at its call."""
    torch.manual_seed(0)
    a, b = Net(8), Net(8)
    opt = torch.optim.SGD([*a.parameters(), *b.parameters()], lr=0.1)
    with torchtriage.watch([a, b], opt, on_anomaly="record", report=False) as s:
        for _ in range(2):
            x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
            with torch.no_grad():
                hint = b(x)  # b under no_grad
            loss = F.cross_entropy(a(x) + hint, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    (f,) = _loud(s.report)
    assert (f.code, f.module, f.evidence["model"]) == ("gradient.cut_no_grad", "", "b")
    assert (f.file, f.line) == (HERE, line_of("b under no_grad"))
    assert f.evidence["count"] == len(list(b.parameters()))
