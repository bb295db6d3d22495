"""`late_read=True`: the sentinel's flags are read one step late (on CUDA a non_blocking copy
into pinned memory behind an event; on the CPU the values are ready at once but judged at the
next step, the same code path). A trip then names the step and stage it happened in."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from tests._syncs import SyncCounter

import torchtriage
from torchtriage import ConfigError, Severity, Stage


def _errors(s):
    return [f for f in s.report.findings if f.severity is not Severity.INFO]


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _train(model, opt, batches, after_step=None):
    for i, (x, y) in enumerate(batches):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if after_step is not None:
            after_step(i)


def _batches(n, nan_at=None):
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        x, y = torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)
        if i == nan_at:
            x[3, 2] = float("nan")  # one bad sample, as a corrupt record in a dataset
        out.append((x, y))
    return out


def test_a_nan_batch_read_one_step_late_names_its_step_and_stage():
    model, opt = _model()
    seen = []
    with torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False,
                           late_read=True) as s:
        # the finding comes at step 4's read point, not at step 3's (the update was applied)
        _train(model, opt, _batches(6, nan_at=3), after_step=lambda i: seen.append(len(_errors(s))))
    assert seen[:4] == [0, 0, 0, 0] and seen[4] >= 1
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step) == ("numerical.nonfinite_read_late", Stage.DATA, 3)
    assert f.message == ("A non-finite value first showed in the batch of step 3, read one step late "
                         "(late_read=True): the step's update was applied and the step was not replayed")
    assert "without late_read=True" in f.next_check
    # the applied update left NaN parameters: steps 4 and 5 trip on them, a consequence counted
    # on the first finding, not a new problem (the immediate read does the same)
    assert len(_errors(s)) == 1 and f.count == 3


class ExpHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x):
        return self.lin(x).exp()  # a rate head: overflows to +Inf for a large input


def test_a_forward_overflow_read_late_names_the_forward():
    torch.manual_seed(0)
    model = ExpHead()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = _batches(4)
    batches[2] = (batches[2][0] * 1e4, batches[2][1])  # a finite batch, out of the head's range

    with torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False,
                           late_read=True) as s:
        _train(model, opt, batches)
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step) == ("numerical.nonfinite_read_late", Stage.FORWARD, 2)


def test_a_clean_run_records_the_same_series_as_the_immediate_read():
    series = []
    for late in (False, True):
        model, opt = _model()
        with torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False,
                               late_read=late) as s:
            _train(model, opt, _batches(5))
        assert _errors(s) == []
        series.append((s.health.points("loss"), s.health.points("grad_norm")))
    assert series[0] == series[1] and len(series[0][0]) == 5


def test_late_reads_are_one_per_step_and_none_under_skip_step():
    model, opt = _model()
    counter = SyncCounter()
    with counter, torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False,
                                    late_read=True):
        _train(model, opt, _batches(4))
    reads = [c[1][0] for c in counter.calls]
    # steps 0-2 read at steps 1-3, step 3 at the exit, with the exit's full check of the last update
    assert reads == ["_nonfinite/_late.py:values"] * 4 + ["_nonfinite/_sentinel.py:_read"], reads
    # skip_step needs the answer before the update: the read stays where it was
    model, opt = _model()
    counter = SyncCounter()
    with counter, torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="skip_step", report=False,
                                    late_read=True) as s:
        _train(model, opt, _batches(3, nan_at=1))
    assert [c[1][0] for c in counter.calls][:2] == ["_nonfinite/_sentinel.py:_read"] * 2  # steps 0 and 1
    assert (_errors(s)[0].stage, _errors(s)[0].step) == (Stage.DATA, 1)


def test_late_read_must_be_a_bool():
    model, opt = _model()
    with pytest.raises(ConfigError, match=r"^late_read='yes'; accepted: True or False$"):
        torchtriage.watch(model, opt, late_read="yes")
