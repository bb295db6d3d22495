"""Parameters that receive a gradient at every step and that no optimizer holds (session 12): a
module built outside the model the optimizer was built from. Written as users write them (a loss
module with its own projection, a head kept by a trainer class, a function-based loop that adds a
layer after the optimizer was built); the look-alikes stay quiet."""

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


def sinks(report, severity=None):
    return [f for f in report if f.code == "gradient.not_in_optimizer" and "judged_backwards_reaching_them" in
            f.evidence and (severity is None or f.severity is severity)]


class FeatureDistill(nn.Module):
    """A distillation loss that maps the student's features to the teacher's width."""

    def __init__(self, cs, ct):
        super().__init__()
        self.align = nn.Conv2d(cs, ct, 1)

    def forward(self, s, t):
        return F.mse_loss(self.align(s), t)


def test_a_distillation_loss_whose_align_conv_is_in_no_optimizer_is_named():
    torch.manual_seed(0)
    student = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
    teacher = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()).eval()
    distill = FeatureDistill(4, 8)
    opt = torch.optim.SGD(student.parameters(), lr=0.05)
    with torchtriage.watch(student, opt, on_anomaly="record", report=False) as s:
        for _ in range(8):
            x = torch.randn(8, 3, 8, 8)
            with torch.no_grad():
                t = teacher(x)
            loss = distill(student(x), t)
            opt.zero_grad()
            loss.backward()  # BACKWARD-DISTILL
            opt.step()
    [f] = sinks(s.report)
    assert f.severity is Severity.WARNING and f.line == line_of("BACKWARD-DISTILL")
    ev = f.evidence
    assert ev["parameters"] == ["distill.align.weight", "distill.align.bias"] and ev["count"] == 2
    assert ev["values"] == 8 * 4 + 8 and ev["moved"] is False and ev["on_trained_path"] is True
    assert ev["judged_backwards_reaching_them"] >= 3
    assert ev["grad_sample_norm_end"] > ev["grad_sample_norm_first"] > 0  # .grad piles up
    assert f.module == "distill.align"


class Trainer:
    """A class trainer that keeps a projection head of its own."""

    def __init__(self):
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.Tanh())
        self.projector = nn.Linear(32, 8)
        self.optimizer = torch.optim.Adam(self.encoder.parameters(), lr=1e-3)

    def step(self, x):
        z = self.projector(self.encoder(x))
        loss = (z - z.flip(0)).pow(2).mean()
        self.optimizer.zero_grad()
        loss.backward()  # BACKWARD-TRAINER
        self.optimizer.step()


def test_a_trainer_class_whose_projection_head_is_in_no_optimizer_is_named():
    torch.manual_seed(0)
    trainer = Trainer()
    with torchtriage.watch(trainer.encoder, trainer.optimizer, on_anomaly="record", report=False) as s:
        for _ in range(8):
            trainer.step(torch.randn(16, 16))
    [f] = sinks(s.report)
    assert f.severity is Severity.WARNING and f.line == line_of("BACKWARD-TRAINER")
    assert f.evidence["parameters"] == ["self.projector.weight", "self.projector.bias"]  # as the line names it


def fit(model, opt, data):
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()  # BACKWARD-FIT
        opt.step()


def test_a_layer_added_after_the_optimizer_was_built_is_named():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.append(nn.Linear(3, 3))  # a calibration layer added after the optimizer was built
    data = [(torch.randn(12, 10), torch.randint(0, 3, (12,))) for _ in range(8)]
    with torchtriage.watch(None, opt, on_anomaly="record", report=False) as s:
        fit(model, opt, data)
    [f] = sinks(s.report)
    assert f.severity is Severity.WARNING and f.line == line_of("BACKWARD-FIT")
    assert f.evidence["parameters"] == ["model.3.weight", "model.3.bias"]


# ---------------------------------------------------------------------------- look-alikes
def test_a_pretrained_perceptual_network_in_eval_left_with_requires_grad_is_info():
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
    features = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).eval()  # fixed feature net
    opt = torch.optim.Adam(gen.parameters(), lr=1e-3)
    with torchtriage.watch(gen, opt, on_anomaly="record", report=False) as s:
        for _ in range(8):
            z, target = torch.randn(8, 8), torch.randn(8, 16)
            loss = F.mse_loss(features(gen(z)), features(target))
            opt.zero_grad()
            loss.backward()
            opt.step()
    print([(f.code, f.severity, f.module, f.evidence) for f in sinks(s.report)])
    [f] = sinks(s.report)
    assert f.severity is Severity.INFO and f.evidence["module_mode"] == "eval"


def test_manual_sgd_two_optimizers_frozen_and_gan_are_quiet():
    torch.manual_seed(0)
    body = nn.Linear(8, 8)
    head = nn.Linear(8, 2)  # updated by hand
    frozen = nn.Linear(8, 8).requires_grad_(False)
    side = nn.Linear(8, 8)  # its own optimizer, stepped every other step
    opt = torch.optim.SGD(body.parameters(), lr=0.1)
    opt_side = torch.optim.SGD(side.parameters(), lr=0.1)
    disc = nn.Linear(2, 1)
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
    with torchtriage.watch(body, opt, on_anomaly="record", report=False) as s:
        for i in range(10):
            x = torch.randn(8, 8)
            out = head(side(frozen(body(x))))
            loss = F.cross_entropy(out, torch.randint(0, 2, (8,))) - disc(out).mean()
            opt.zero_grad()
            opt_side.zero_grad()
            opt_d.zero_grad()
            loss.backward()
            opt.step()
            if i % 2:
                opt_side.step()
            with torch.no_grad():
                for p in head.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
            opt_d.zero_grad()
            (disc(out.detach()).mean()).backward()
            opt_d.step()
    assert not sinks(s.report)


def test_a_target_network_fed_with_data_in_train_mode_is_info_at_most():
    torch.manual_seed(0)
    online = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    target = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(online.parameters(), lr=1e-3)
    with torchtriage.watch(online, opt, on_anomaly="record", report=False) as s:
        for _ in range(8):
            obs, nxt = torch.randn(16, 4), torch.randn(16, 4)
            td = 1.0 + 0.9 * target(nxt).max(1).values  # not detached: target gets a .grad, is fixed
            loss = F.smooth_l1_loss(online(obs).max(1).values, td)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not sinks(s.report, Severity.WARNING)


class _LoRA(nn.Module):
    def __init__(self, fan_in, fan_out, rank=2):
        super().__init__()
        self.lora_A = nn.Parameter(torch.randn(rank, fan_in) * 0.1)
        self.lora_B = nn.Parameter(torch.zeros(fan_out, rank))

    def forward(self, w):
        return w + self.lora_B @ self.lora_A


def _adapt(model, data):
    """The optimizer lives in this call only: gone when the session ends."""
    params = [p for n, p in model.named_parameters() if "lora_" in n]
    fit(model, torch.optim.AdamW(params, lr=1e-2), data)


def test_a_lora_base_weight_left_out_beside_its_adapters_is_info_after_its_optimizer_is_gone():
    from torch.nn.utils import parametrize

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    for layer in (model[0], model[2]):
        parametrize.register_parametrization(layer, "weight", _LoRA(layer.in_features, layer.out_features))
    data = [(torch.randn(12, 10), torch.randint(0, 3, (12,))) for _ in range(8)]
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        _adapt(model, data)
    assert not sinks(s.report, Severity.WARNING), str(s.report)
