"""Factory replay runs the whole recorded step from the bundle (issue 11): every model call
(the siamese net twice, a GAN's G and D), the hand-written loss from the step tape, the step's
external inputs; the NaN comes back at the same op and line, and shrink works on it."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn as nn

import torchtriage
from _lines import line_in
from zoo import step as zoo

STEP = zoo.__file__


_line = line_in


def _siamese():
    torch.manual_seed(0)
    net = zoo.Embed()
    return net, torch.optim.SGD(net.parameters(), lr=0.1)


def _gan():
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(2, 4), nn.Tanh())
    netD = nn.Sequential(nn.Linear(4, 4), zoo.LogFeatures(), nn.Linear(4, 1))
    return G, netD, torch.optim.Adam(G.parameters(), 1e-3), torch.optim.Adam(netD.parameters(), 1e-3)


@pytest.fixture(scope="module")
def siamese_bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("siamese") / "b"
    net, opt = _siamese()
    with torchtriage.watch(net, opt, on_anomaly="record", report=False, bundle_dir=path) as s:
        zoo.siamese_contrastive(net, opt, steps=1)
    (f,) = [f for f in s.report.filter(code="numerical.nonfinite_backward") if f.severity is torchtriage.Severity.ERROR]
    return torchtriage.load_bundle(path), f


def test_siamese_step_is_stored_as_data_and_replays_from_a_factory(siamese_bundle):
    bundle, original = siamese_bundle
    program = bundle.meta["batch"]["step"]
    kinds = [(e["kind"], e.get("model") or e.get("op")) for e in program["events"]]
    assert kinds[:3] == [("call", "net"), ("call", "net"), ("op", "torch.Tensor.sub")]
    assert ("op", "torch.sqrt") in kinds and kinds[-2:] == [("backward", None), ("update", None)]
    assert program["left_out"] == []
    json.dumps(program)  # plain data: no pickle
    result = torchtriage.replay(bundle, factory=_siamese)
    assert result.reproduced, result.describe()
    f = result.matched
    line = _line(zoo.siamese_contrastive, "dist = torch.sqrt(")
    assert (f.code, f.op, f.file, f.line) == ("numerical.nonfinite_backward", "aten::sqrt", STEP, line)
    assert (original.op, original.line) == (f.op, f.line)
    assert f.evidence["localized_by"] == "step_replay"
    assert f.evidence["replayed"].startswith("2 model call(s)")  # the replay's own whole-step replay


def test_siamese_replay_with_a_fixed_loss_is_gone_and_shrink_keeps_a_same_pair(siamese_bundle):
    bundle, _ = siamese_bundle
    result = torchtriage.shrink(bundle, lambda b: torchtriage.replay(b, factory=_siamese), log=None)
    # the culprits are the pairs at distance 0 (samples 0-3); one is enough
    assert len(result.samples) == 1 and result.samples[0] < 4 and result.invalid is None
    assert result.replays <= 2 * math.log2(8) + 4
    small = result.bundle.batch()
    assert small.args[0].shape == (1, 4)


def test_gan_step_replays_both_models_from_a_factory_and_names_the_line(tmp_path):
    G, netD, optG, optD = _gan()
    with torchtriage.watch([G, netD], [optD, optG], on_anomaly="record", report=False,
                           bundle_dir=tmp_path / "b") as s:
        zoo.gan(G, netD, optG, optD, steps=1)
    bundle = torchtriage.load_bundle(tmp_path / "b")
    assert [m["label"] for m in bundle.meta["models"]] == ["G", "netD"]

    def factory():
        G, netD, optG, optD = _gan()
        return {"models": {"G": G, "netD": netD}, "optimizers": [optD, optG]}

    result = torchtriage.replay(bundle, factory=factory)
    assert result.reproduced, result.describe()
    f = result.matched
    assert (f.code, f.module, f.op, f.evidence["model"]) == ("numerical.nonfinite_forward", "1", "aten::log", "netD")
    assert (f.file, f.line) == (STEP, _line(zoo.LogFeatures.forward, "BUG: log of negative features"))
    assert f.line == s.report.filter(code="numerical.nonfinite_forward")[0].line
    # a factory giving one model of the two is told which ones the step calls
    with pytest.raises(torchtriage.BundleError, match="the bundle's step calls G, netD; the factory gave G"):
        torchtriage.replay(bundle, factory=lambda: {"models": {"G": _gan()[0]}})
    # shrink: the NaN needs a negative feature, which most samples give: one sample is enough
    small = torchtriage.shrink(bundle, lambda b: torchtriage.replay(b, factory=factory), log=None)
    assert len(small.samples) == 1 and small.invalid is None


def test_an_op_that_is_not_plain_data_is_stored_as_its_result_and_named(tmp_path):
    torch.manual_seed(0)
    net = zoo.Embed()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 4, generator=g)
    with torchtriage.watch(net, opt, on_anomaly="record", report=False, bundle_dir=tmp_path / "b"):
        opt.zero_grad()
        e = net(x)
        keep = torch.rand(8, generator=g) > 2.0  # a Generator argument: not plain data
        loss = torch.sqrt((e * keep[:, None]).pow(2).sum(1)).mean()  # sqrt at 0: NaN in the backward
        loss.backward()
        opt.step()
    bundle = torchtriage.load_bundle(tmp_path / "b")
    (left,) = bundle.meta["batch"]["step"]["left_out"]
    this = test_an_op_that_is_not_plain_data_is_stored_as_its_result_and_named
    assert left == f"rand at line {_line(this, 'keep = torch.rand')} (Generator): its result is stored"

    def factory():
        torch.manual_seed(0)
        net = zoo.Embed()
        return net, torch.optim.SGD(net.parameters(), lr=0.1)

    result = torchtriage.replay(bundle, factory=factory)
    assert result.reproduced, result.describe()
    assert (result.matched.op, result.matched.file, result.matched.line) == (
        "aten::sqrt", __file__, _line(this, "loss = torch.sqrt"))
    assert result.notes[-1].startswith(
        "note: ops not stored in the bundle (their results were stored instead): rand at line")
