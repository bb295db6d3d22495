"""The step's data is every per-sample tensor entering it (issue 11): a bundle stores the
target of a hand-written loss beside the batch, replay and shrink slice them together, and a
candidate that breaks the step is "invalid", not "gone"."""

from __future__ import annotations

import math
import textwrap

import torch

import torchtriage

SCRIPT = """
import sys
import torch
import torchtriage

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(0)
x = torch.randn(256, 4, generator=g)
x[173] = float("nan")
y = torch.randn(256, 1, generator=g)
with torchtriage.watch(model, opt, bundle_dir=sys.argv[1], on_anomaly="record", report=False):
    for step in range(2):
        pred = model(x)
        {loss}
        opt.zero_grad()
        loss.backward()
        opt.step()
"""

HAND_WRITTEN = "loss = ((pred - y) ** 2).mean()"
BUILT_INSIDE = "w = torch.ones(256, 1); loss = (((pred - y) ** 2) * w).mean()"


def _bundle(tmp_path, loss):
    import runpy
    import sys

    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT.format(loss=loss)), encoding="utf-8")
    old = sys.argv[:]
    sys.argv = [str(script), str(tmp_path / "b")]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = old
    return script, torchtriage.load_bundle(tmp_path / "b")


def _loss_line(script):
    return next(i for i, t in enumerate(script.read_text().splitlines(), 1) if "loss = " in t)


def test_bundle_keeps_the_target_of_a_hand_written_loss_and_shrink_slices_it(tmp_path):
    script, bundle = _bundle(tmp_path, HAND_WRITTEN)
    (entry,) = bundle.meta["batch"]["inputs"]
    assert (entry["where"], entry["shape"], entry["line"]) == ("sub", [256, 1], _loss_line(script))
    assert bundle.trigger["code"] == "numerical.nonfinite_data"
    result = torchtriage.shrink(bundle, lambda b: torchtriage.replay(b, script=script), log=None)
    assert result.samples == (173,) and result.invalid is None
    assert result.replays <= 2 * math.log2(256) + 4
    small = result.bundle.batch()
    assert small.args[0].shape == (1, 4) and small.inputs[0]["tensor"].shape == (1, 1)
    assert torch.equal(small.inputs[0]["tensor"], bundle.batch().inputs[0]["tensor"][173:174])


def test_a_tensor_of_the_step_that_is_not_sliced_makes_the_split_invalid(tmp_path):
    script, bundle = _bundle(tmp_path, BUILT_INSIDE)
    result = torchtriage.shrink(bundle, lambda b: torchtriage.replay(b, script=script), log=None)
    assert result.samples == tuple(range(256)) and result.replays == 3
    assert result.invalid.startswith("every half of the batch broke the step instead of curing it: "
                                     "a tensor of the step was not sliced with the batch")
    # the line where the unsliced tensor met the batch
    assert f"train.py:{_loss_line(script)}" in result.invalid
