"""A loss whose prediction and target both keep their batch axis, at two places of the broadcast
(`silent.loss_broadcast`, variant "paired"): each prediction is scored against every target of the
batch. Programs written the ways users write them, and the look-alikes that stay quiet."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from _lines import line_in
from torchtriage import Severity
from torchtriage._session import Session
from torchtriage._silent._shapes import paired_batch_broadcast

_line = line_in


def _run(loop, *, discover: bool = True, model=None, opt=None):
    kw = dict(on_anomaly="record", report=False, checks=["silent"])
    if discover:
        with Session(discover=True, **kw) as s:
            loop()
    else:
        with Session(model, opt, **kw) as s:
            loop()
    return s.report.filter(code="silent.loss_broadcast")


# ------------------------------------------------------------------------------ shape arithmetic
def test_shape_relation():
    assert paired_batch_broadcast((16, 1, 24, 24), (16, 1, 1, 24, 24)) == (16, 16, 1, 24, 24)
    assert paired_batch_broadcast((8, 1), (8,)) == (8, 8)
    assert paired_batch_broadcast((8, 5), (8, 1, 5)) == (8, 8, 5)
    assert paired_batch_broadcast((8, 1, 5), (1, 8, 5)) is None   # spelled out: b's first axis is 1
    assert paired_batch_broadcast((8, 5), (8, 1)) is None         # a per-sample weight
    assert paired_batch_broadcast((8, 5), (5,)) is None           # a per-class weight
    assert paired_batch_broadcast((1, 5), (1, 1, 5)) is None      # one sample: nothing to mix
    assert paired_batch_broadcast((8, 4, 4), (8, 4, 4)) is None


# ------------------------------------------------------------------- 1. a focal loss module, run
class _Seg(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 1, 1))

    def forward(self, x):
        return self.net(x)


class DiceBCE(nn.Module):  # a parameterless loss module: under `run` it is the loss stage, not a model
    def forward(self, logits, mask):
        p = torch.sigmoid(logits)
        mask = mask.unsqueeze(1)
        bce = -(mask * torch.log(p + 1e-6) + (1 - mask) * torch.log(1 - p + 1e-6))
        return bce.mean()


def _seg_loop(fixed: bool = False):
    torch.manual_seed(0)
    model, crit = _Seg(), DiceBCE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(4):
        x = torch.randn(6, 1, 8, 8)
        y = (x > 0.5).float()
        loss = crit(model(x), y.squeeze(1) if fixed else y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_loss_module_target_unsqueezed_is_found_under_discovery():
    found = _run(_seg_loop)
    assert len(found) == 1, found
    f = found[0]
    assert f.severity is Severity.WARNING and f.op == "mul"
    assert f.line == _line(DiceBCE.forward, "bce = -(mask")
    assert f.evidence["prediction_shape"] == (6, 1, 8, 8)
    assert f.evidence["target_shape"] == (6, 1, 1, 8, 8)
    assert f.evidence["broadcast_shape"] == (6, 6, 1, 8, 8)
    assert f.evidence["targets_per_prediction"] == 6
    assert f.evidence["loss_aligned"] not in ("n/a", f.evidence["loss_computed"])
    assert "all 6 targets" in f.message


def test_loss_module_fixed_is_quiet():
    assert not _run(lambda: _seg_loop(fixed=True))


# --------------------------------------------------------- 2. keypoint heatmaps, a plain function
def _heatmap_loss(pred, heat):
    return torch.mean(torch.square(torch.sub(pred, heat[:, None])))


def test_heatmap_target_indexed_with_none_in_a_function():
    torch.manual_seed(0)
    model = nn.Conv2d(3, 5, 3, padding=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loop():
        for _ in range(3):
            img, heat = torch.randn(4, 3, 6, 6), torch.rand(4, 5, 6, 6)
            loss = _heatmap_loss(model(img), heat)
            opt.zero_grad()
            loss.backward()
            opt.step()

    found = _run(loop, discover=False, model=model, opt=opt)
    assert len(found) == 1
    f = found[0]
    assert f.op == "sub" and f.line == _line(_heatmap_loss, "torch.sub(pred")
    assert f.evidence["broadcast_shape"] == (4, 4, 5, 6, 6)
    assert f.evidence["target_shape"] == (4, 1, 5, 6, 6)


# ------------------------------------------------- 3. a class trainer, regression with view(B, 1, D)
class _Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(7, 16), nn.Tanh(), nn.Linear(16, 3))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)

    def compute_loss(self, x, y):
        out = self.model(x)
        y = y.view(len(y), 1, -1)
        return (out - y).abs().sum(-1).mean()

    def fit(self):
        for _ in range(3):
            x, y = torch.randn(10, 7), torch.randn(10, 3)
            loss = self.compute_loss(x, y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()


def test_trainer_regression_target_viewed_with_an_extra_axis():
    t = _Trainer()
    found = _run(t.fit)
    assert len(found) == 1
    f = found[0]
    assert f.line == _line(_Trainer.compute_loss, "(out - y)")
    assert (f.evidence["prediction_shape"], f.evidence["target_shape"], f.evidence["broadcast_shape"]) == \
        ((10, 3), (10, 1, 3), (10, 10, 3))


# ------------------------------------------------------------------------------ look-alikes: quiet
def _quiet(loss_fn, *, n=8, d=6):
    torch.manual_seed(0)
    model = nn.Linear(d, d)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loop():
        for _ in range(3):
            x, y = torch.randn(n, d), torch.randn(n, d)
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return _run(loop, discover=False, model=model, opt=opt)


def test_clip_contrastive_logits_are_quiet():
    def clip(z, y):
        z, y = F.normalize(z, dim=-1), F.normalize(y, dim=-1)
        logits = z @ y.t() / 0.07
        labels = torch.arange(len(z))
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
    assert not _quiet(clip)


def test_pairwise_distances_of_the_embeddings_are_quiet():
    def batch_hard(z, y):
        d = (z.unsqueeze(1) - z).pow(2).sum(-1)            # both sides carry the graph
        same = (y[:, 0].unsqueeze(1) - y[:, 0]).abs() < 0.5  # both sides are targets
        return (d * same).mean() - (d * ~same).mean().clamp(max=1.0)
    assert not _quiet(batch_hard)


def test_spelled_out_pairing_against_a_memory_is_quiet():
    def proto(z, y):
        return ((z[:, None, :] - y[None, :, :]) ** 2).sum(-1).logsumexp(1).mean()
    assert not _quiet(proto)


def test_per_class_and_per_sample_weights_are_quiet():
    w_class = torch.linspace(0.5, 2.0, 6)
    w_sample = torch.rand(8, 1)

    def weighted(z, y):
        return (((z - y) ** 2) * w_class * w_sample).mean()
    assert not _quiet(weighted)


def test_masked_sequence_loss_is_quiet():
    def masked(z, y):
        mask = (y > 0).float()
        return ((z - y).abs() * mask).sum() / mask.sum().clamp(min=1)
    assert not _quiet(masked)


# ------------------------------------------- discovery: a module with nothing to train is no model
class _Pipe(nn.Module):
    """Holds the denoiser outside its submodules (a pipeline object) and computes the loss."""

    def __init__(self, net):
        super().__init__()
        self.__dict__["net"] = net  # not registered: the pipeline has no parameters

    def forward(self, x):
        return ((self.net(x) - x.flip(0)) ** 2).mean()


def test_parameterless_pipeline_is_transparent_to_discovery():
    torch.manual_seed(0)
    net = nn.Linear(3, 3)
    pipe = _Pipe(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with Session(discover=True, on_anomaly="record", report=False) as s:
        for _ in range(4):
            loss = pipe(torch.randn(5, 3))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert any(m is net for m in s.models) and not any(m is pipe for m in s.models)
    assert s.step == 4 or s.steps_seen == 4
