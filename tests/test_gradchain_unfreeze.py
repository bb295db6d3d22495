"""An unfreeze that cannot unfreeze (session 12): `if p.requires_grad: p.requires_grad = flag` only
ever turns requires_grad off. Written three ways (a mixin method, a module method with another
name, a backbone's method called on a submodule); a backbone frozen for the whole run and the
fixed method stay quiet."""

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


def found(report):
    return [f for f in report if f.code == "gradient.unfreeze_noop"]


class TrainableMixIn:
    def set_trainable(self, trainable=False):
        for p in self.parameters():
            if p.requires_grad:
                p.requires_grad = trainable  # MIXIN


class Encoder(nn.Module, TrainableMixIn):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))

    def forward(self, x):
        return self.features(x)


def finetune(encoder, freeze, unfreeze, epochs=4, per_epoch=4):
    torch.manual_seed(0)
    head = nn.Linear(16, 3)
    model = nn.Sequential(encoder, head)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for epoch in range(epochs):
            if epoch == 0:
                freeze()
            if epoch == 2 and unfreeze is not None:
                unfreeze()
            for _ in range(per_epoch):
                x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    return s.report


def test_a_mixin_set_trainable_that_cannot_unfreeze_is_named():
    enc = Encoder()
    [f] = found(finetune(enc, lambda: enc.set_trainable(False), lambda: enc.set_trainable(True)))
    assert f.severity is Severity.WARNING and f.line == line_of("MIXIN")
    assert f.evidence["count"] == 4 and f.evidence["parameters"][0] == "0.features.0.weight"
    assert f.evidence["method"] == "TrainableMixIn.set_trainable"


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16))

    def forward(self, x):
        return self.body(x)

    def freeze(self, mode=True):
        for param in self.body.parameters():
            if param.requires_grad:
                param.requires_grad = not mode  # BACKBONE


def test_a_freeze_method_with_a_negated_flag_is_named():
    bb = Backbone()
    [f] = found(finetune(bb, lambda: bb.freeze(True), lambda: bb.freeze(False)))
    assert f.line == line_of("BACKBONE") and f.evidence["method"] == "Backbone.freeze"


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(8, 16)
        self.block = nn.Linear(16, 16)

    def forward(self, x):
        return self.block(F.relu(self.stem(x)))

    def trainable(self, on):
        for name, w in self.named_parameters():
            if name.startswith("stem"):
                continue
            if w.requires_grad:
                w.requires_grad = on  # TOWER


def test_a_partial_unfreeze_that_skips_frozen_weights_is_named():
    t = Tower()
    [f] = found(finetune(t, lambda: t.trainable(False), lambda: t.trainable(True)))
    assert f.line == line_of("TOWER") and f.evidence["parameters"] == ["0.block.weight", "0.block.bias"]


# ---------------------------------------------------------------------------- look-alikes
class Fixed(Encoder):
    def set_trainable(self, trainable=False):
        for p in self.parameters():
            p.requires_grad = trainable


def test_the_fixed_method_and_a_backbone_frozen_for_the_whole_run_are_quiet():
    enc = Fixed()
    assert not found(finetune(enc, lambda: enc.set_trainable(False), lambda: enc.set_trainable(True)))
    enc2 = Encoder()
    assert not found(finetune(enc2, lambda: enc2.requires_grad_(False), None))
