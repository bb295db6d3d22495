"""A loss line first called after the warm-up steps (a distillation phase after the teacher's
own training, fine-tuning after pre-training) gets the loss-input checks too: the semantics
hold for every loss line, not only those of the run's first steps. Written as users write it;
the correct distillation and a late evaluation loss stay quiet."""

from __future__ import annotations

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


def loud(report):
    return [f for f in report if f.severity is not Severity.INFO]


def teacher_then_student(student_input: str, teacher_steps: int = 12):
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    student = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))
    opt_t = torch.optim.Adam(teacher.parameters(), 1e-2)
    opt_s = torch.optim.SGD(student.parameters(), 0.1)
    w = torch.randn(6, 4)
    with torchtriage.watch([teacher, student], [opt_t, opt_s], on_anomaly="record", report=False) as s:
        for _ in range(teacher_steps):  # phase 1: the teacher learns the labels
            x = torch.randn(16, 6)
            loss = F.cross_entropy(teacher(x), (x @ w).argmax(1))
            opt_t.zero_grad()
            loss.backward()
            opt_t.step()
        teacher.eval()
        for _ in range(6):  # phase 2: the student distils the teacher
            x = torch.randn(16, 6)
            with torch.no_grad():
                soft = F.softmax(teacher(x), dim=1)
            out = student(x)
            inp = F.log_softmax(out, dim=1) if student_input == "log" else F.softmax(out, dim=1)
            kd = F.kl_div(inp, soft, reduction="batchmean")  # late kl
            opt_s.zero_grad()
            kd.backward()
            opt_s.step()
        with torch.no_grad():  # a late evaluation of the same quantity
            x = torch.randn(16, 6)
            F.kl_div(F.log_softmax(student(x), 1), F.softmax(teacher(x), 1), reduction="batchmean")
    return s.report


def test_kl_div_on_probabilities_in_a_late_phase_is_named():
    (f,) = [f for f in teacher_then_student("prob") if f.code == "silent.kl_div_input_not_log"]
    assert (f.severity, f.line, f.op) == (Severity.ERROR, line_of("late kl"), "kl_div")
    assert f.evidence["input_producer"].startswith("SoftmaxBackward")
    assert f.step >= 12  # found in phase 2, after the run's warm-up steps


def test_kl_div_on_log_softmax_in_a_late_phase_is_quiet():
    assert loud(teacher_then_student("log")) == []


@pytest.mark.parametrize("student_input", ["prob", "log"])
def test_the_same_line_in_the_warm_up_is_judged_once(student_input):
    # no teacher phase: the kl line is a warm-up line (its teacher, never trained, is a finding
    # of its own); the late-site rule adds nothing to it
    found = [f for f in teacher_then_student(student_input, 0) if f.code.startswith("silent.")]
    assert [f.code for f in found] == (["silent.kl_div_input_not_log"] if student_input == "prob" else [])
