"""A NaN batch made by the loop's own code, in a loop whose steps no optimizer closes (no
optimizer known to the session: Lightning's, or none): every step's batch is traced to the same
op and line, and counted on one finding."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import marked
from torchtriage import Severity

HERE = str(Path(__file__))


line_of = marked(Path(HERE))


def standardize_steps(steps: int, **options):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    with torchtriage.watch(net, on_anomaly="record", report=False, **options) as s:
        for _ in range(steps):
            raw = torch.rand(8, 4)
            raw[:, 0] = 0  # an empty feature: its std is 0
            x = (raw - raw.mean(0)) / raw.std(0)  # standardized
            loss = F.mse_loss(net(x), x)
            net.zero_grad()
            loss.backward()
    return [f for f in s.report if f.severity is not Severity.INFO]


def test_every_steps_nan_batch_is_traced_to_the_line_that_made_it():
    (f,) = standardize_steps(5)
    assert (f.code, f.step, f.file, f.line) == ("numerical.nonfinite_data", 0, HERE, line_of("standardized"))
    assert f.count == 5 and f.evidence["produced by"] == "aten::div"


def test_a_later_batch_not_traced_is_counted_on_the_traced_one():
    """Only step 0 is taped (the sentinel alone: no other check holds the tape on): the later
    batches' NaN in the same input is not traced again, and is counted on the finding that was."""
    (f,) = standardize_steps(4, step_tape_steps=1, checks=["nonfinite"])
    assert (f.code, f.file, f.line, f.count) == ("numerical.nonfinite_data", HERE, line_of("standardized"), 4)
