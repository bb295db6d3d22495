"""Inside watch() no rerun can localize a non-finite value the step did not record (issue 27):
the "not reproduced" finding says why and what to do (`torchtriage run`, a seed, or
step_tape='always')."""

from __future__ import annotations

import torch
import torch.nn as nn

import torchtriage

WATCH_TEXT = ("inside watch() no rerun follows, and this step was not recorded: run the script under "
              "`torchtriage run` (seed it with torch.manual_seed(...) so that the rerun draws the same data), "
              "which reruns it up to this step to localize the value, or pass step_tape='always' to watch() "
              "to record every step")


def _rare_batch(**options):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchtriage.watch(model, opt, report=False, on_anomaly="record", **options) as session:
        for step in range(12):
            x = torch.randn(32, 8)
            y = torch.rand(32, 1) + 0.5
            if step == 10:
                y[3] = 0.0  # one rare batch: a zero target
            rel = (model(x) - y) / y  # hand-written relative error
            loss = rel.pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if not torch.isfinite(loss):
                break
    return session.report


def test_watch_says_why_no_rerun_and_what_to_do():
    f = next(f for f in _rare_batch().findings if f.code == "numerical.nonfinite_loss")
    assert (f.op, f.step) == (None, 10)
    assert f.evidence["why"].startswith("the ops outside the models were not recorded at this step")
    assert f.evidence["what to do"] == WATCH_TEXT


def test_with_every_step_taped_the_value_is_localized():
    f = next(f for f in _rare_batch(step_tape="always").findings if f.code == "numerical.nonfinite_loss")
    assert f.op is not None and "what to do" not in f.evidence
