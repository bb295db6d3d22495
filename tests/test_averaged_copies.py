"""Averaged copies of a model (EMA, mean teacher, SWA): `silent.ema_diverges` (the update moves the
copy away from the parameters) and `silent.ema_buffers_stale` (the copy's BatchNorm statistics
never updated, and it is evaluated so). Bugs written the way users write them, with the exact
finding; correct look-alikes (timm ModelEmaV2, warm-up decay, swa_utils, a frozen teacher, a
hard target copy) stay quiet."""

from __future__ import annotations

import copy
import math
import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, update_bn

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def data(n: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 8, 8, generator=g) * 0.2 + 0.4  # inputs far from zero mean / unit variance
    return x, (x.mean((1, 2, 3)) > 0.5).long()


def convnet(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def train(model, opt, after_step, steps: int = 24, evaluate=None):
    x, y = data()
    for step in range(steps):
        i = (step * 16) % 64
        loss = F.cross_entropy(model(x[i:i + 16]), y[i:i + 16])
        opt.zero_grad()
        loss.backward()
        opt.step()
        after_step(step)
    if evaluate is not None:
        evaluate(x)


def codes(report) -> list[str]:
    return [f.code for f in report.findings if f.code.startswith("silent.ema")]


# ---------------------------------------------------------------- silent.ema_diverges
class ShadowEMA:
    """Shadow tensors of the trainable parameters, as diffusers' / ai-toolkit's EMA keep them."""

    def __init__(self, params, decay):
        self.params = list(params)
        self.shadow = [p.clone().detach() for p in self.params]
        self.decay = decay

    def update_flipped(self):
        with torch.no_grad():
            for s, p in zip(self.shadow, self.params):
                gap = s - p
                s.add_(gap * (1 - self.decay))  # <- flipped

    def update(self):
        with torch.no_grad():
            for s, p in zip(self.shadow, self.params):
                s.sub_((s - p) * (1 - self.decay))


def regression(model, opt, after_step, steps: int = 40):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    y = x[:, :1] * 2
    for step in range(steps):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        after_step(step)


def test_ema_update_with_its_sign_flipped_moves_the_shadow_away():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ema = ShadowEMA(model.parameters(), decay=0.9)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        regression(model, opt, lambda step: ema.update_flipped())
    [f] = s.report.filter(code="silent.ema_diverges")
    assert (f.category.value, f.severity, f.line) == ("silent", Severity.WARNING, line("flipped"))
    assert f.module.startswith("ema.shadow[")  # the user's variable and the attribute holding the copies
    ev = f.evidence
    assert (ev["copies_updated"], ev["copies_moving_away"]) == (4, 4)
    assert abs(ev["update_coefficient_median"] + 0.1) < 1e-3  # -(1 - decay)
    assert float(ev["distance_last"]) > 2 * float(ev["distance_first"])
    assert f.parameter == ev["parameter"] + " (shadow)"
    assert f.message.startswith("an averaged copy of the parameters (tensor) moves away from them: each update "
                                "adds a negative share of (parameter - copy) (coefficient -0.1, an EMA's is "
                                "1 - decay > 0); ||copy - parameter|| of ".replace("(tensor)", f"({f.module})"))


def test_correct_shadow_ema_and_warmup_decay_are_quiet():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ema = ShadowEMA(model.parameters(), decay=0.9)
    warm = ShadowEMA(model.parameters(), decay=0.999)

    def after(step):
        ema.update()
        warm.decay = min(0.999, (1 + step) / (10 + step))  # warm-up decay
        warm.update()
        with torch.no_grad():  # a lerp_-based EMA of the same parameters
            torch._foreach_lerp_(lerped, list(model.parameters()), 0.05)

    lerped = [p.detach().clone() for p in model.parameters()]
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        regression(model, opt, after)
    assert codes(s.report) == []


# ---------------------------------------------------------------- silent.ema_buffers_stale
def test_ema_model_averaging_parameters_only_is_evaluated_with_initial_bn_statistics():
    model = convnet()
    ema = copy.deepcopy(model)
    for p in ema.parameters():
        p.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def ema_update(step, decay=0.9):
        for e, p in zip(ema.parameters(), model.parameters()):
            e.data.mul_(decay).add_(p.data, alpha=1 - decay)  # <- params only

    def evaluate(x):
        ema.eval()
        with torch.no_grad():
            ema(x)

    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        train(model, opt, ema_update, evaluate=evaluate)
    [f] = s.report.filter(code="silent.ema_buffers_stale")
    assert (f.category.value, f.severity, f.line) == ("silent", Severity.WARNING, line("params only"))
    assert (f.module, f.parameter) == ("ema.1", "ema.1.running_mean")
    ev = f.evidence
    assert ev["copy_modules_stale"] == ["ema.1", "ema.4"]  # one finding for the copy's two BatchNorms
    assert ev["buffers"] == ["running_mean", "running_var"]
    assert ev["copy_running_mean_mean"] == 0.0 and ev["source_running_mean_mean"] != 0.0
    assert f.message.startswith("the averaged copy ema.1 is evaluated with its BatchNorm "
                                "running statistics never updated: its buffers (running_mean, running_var) still "
                                "hold their initial values (running_mean mean 0.0)")


class ModelEmaV2(nn.Module):
    """timm's ModelEmaV2: the whole state dict averaged (buffers included)."""

    def __init__(self, model, decay=0.9):
        super().__init__()
        self.module = copy.deepcopy(model)
        self.module.eval()
        self.decay = decay

    def update(self, model):
        with torch.no_grad():
            for e, m in zip(self.module.state_dict().values(), model.state_dict().values()):
                if e.is_floating_point():
                    e.copy_(self.decay * e + (1.0 - self.decay) * m)
                else:
                    e.copy_(m)


def test_ema_models_whose_statistics_follow_or_are_recomputed_are_quiet():
    model = convnet()
    timm_ema = ModelEmaV2(model)
    swa = AveragedModel(model)  # buffers not averaged: update_bn recomputes them
    swa_buffers = AveragedModel(model, use_buffers=True)
    teacher = copy.deepcopy(model).eval()  # a frozen teacher: never updated
    target = copy.deepcopy(model)  # a hard target copy every 5 steps
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, _ = data()

    def after(step):
        timm_ema.update(model)
        swa.update_parameters(model)
        swa_buffers.update_parameters(model)
        if step % 5 == 4:
            target.load_state_dict(model.state_dict())

    def evaluate(x):
        update_bn([(x,)], swa)
        for m in (timm_ema.module, swa, swa_buffers, teacher, target):
            m.eval()
            with torch.no_grad():
                m(x)

    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        train(model, opt, after, evaluate=evaluate)
    assert codes(s.report) == []


def test_polyak_target_updated_before_the_step_every_second_step_is_quiet():
    model = convnet()
    target = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = data()

    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for step in range(24):
            loss = F.cross_entropy(model(x[:16]), y[:16])
            if step % 2 == 0:  # soft update (tau 0.2) of the whole state, before this step's update
                with torch.no_grad():
                    for t, m in zip(target.state_dict().values(), model.state_dict().values()):
                        t.copy_(m) if not t.is_floating_point() else t.lerp_(m, 0.2)
            opt.zero_grad()
            loss.backward()
            opt.step()
        target.eval()
        with torch.no_grad():
            target(x)
    assert codes(s.report) == []


def test_a_watched_ema_copy_deep_copies_and_saves_without_our_hook(tmp_path):
    model = convnet()
    ema = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def after(step):
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.lerp_(p, 0.1)

    with torchtriage.watch(model, opt, on_anomaly="record", report=False):
        train(model, opt, after, steps=4)
        hooked = [m for m in ema.modules() if m._forward_pre_hooks]
        assert hooked  # the copy's BatchNorm is watched for an evaluation with stale statistics
        again = copy.deepcopy(ema)
        torch.save(ema, tmp_path / "ema.pt")
    assert not any(m._forward_pre_hooks for m in again.modules())
    assert not any(m._forward_pre_hooks for m in ema.modules())  # removed on exit


# ---------------------------------------------------------------- silent.ema_not_averaging
class EMAModel:
    """diffusers' EMAModel (examples/text_to_image, 2022): a warm-up decay capped by `self.decay`."""

    def __init__(self, parameters, decay=0.9999, overwrite=True):
        parameters = list(parameters)
        self.shadow_params = [p.clone().detach() for p in parameters]
        self.decay = decay
        self.optimization_step = 0
        self.overwrite = overwrite

    def get_decay(self, optimization_step):
        value = (1 + optimization_step) / (10 + optimization_step)
        return 1 - min(self.decay, value)

    @torch.no_grad()
    def step(self, parameters):
        self.optimization_step += 1
        if self.overwrite:
            self.decay = self.get_decay(self.optimization_step)  # the cap overwritten by 1 - decay
            one_minus_decay = self.decay
        else:
            one_minus_decay = self.get_decay(self.optimization_step)
        for s_param, param in zip(self.shadow_params, parameters):
            s_param.sub_(one_minus_decay * (s_param - param))  # <- ema update


def test_ema_whose_decay_attribute_is_overwritten_each_step_follows_the_live_weights():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ema = EMAModel(model.parameters())
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        regression(model, opt, lambda step: ema.step(model.parameters()), steps=70)
    assert codes(s.report) == ["silent.ema_not_averaging"]
    [f] = s.report.filter(code="silent.ema_not_averaging")
    assert (f.category.value, f.severity, f.line) == ("silent", Severity.WARNING, line("ema update"))
    ev = f.evidence
    assert (ev["copies_updated"], ev["copies_not_averaging"], ev["updates_measured_after_warmup"]) == (4, 4, 2)
    assert (ev["update_coefficient_median"], ev["effective_decay"], ev["first_step_measured"]) == (0.5, 0.5, 33)
    assert f.module.startswith("ema.shadow_params[") and float(ev["relative_distance_to_parameter"]) < 0.05
    assert f.message.startswith(f"an averaged copy of the parameters ({f.module}) is no moving average: at each of "
                                "the 2 updates measured from step 33 on it moved 0.5 of the way to the live weights "
                                "(an EMA decay of 0.5, averaging over ~2.0 steps); ||copy - parameter|| / "
                                f"||parameter|| of {ev['parameter']} is ")


class ModelEMA:
    """YOLOv5's ModelEMA (utils/torch_utils.py): the decay ramps up as `decay * (1 - exp(-updates /
    tau))`, tau = 2000 updates, so over a short run the copy still moves most of the way to the
    live weights at each update, a little less every time."""

    def __init__(self, model, decay=0.9999, tau=2000):
        self.ema = copy.deepcopy(model).eval()
        self.updates = 0
        self.decay = lambda x: decay * (1 - math.exp(-x / tau))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        self.updates += 1
        d = self.decay(self.updates)
        msd = model.state_dict()
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                v *= d
                v += (1 - d) * msd[k].detach()


def test_ema_whose_decay_still_ramps_up_is_quiet():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ema = ModelEMA(model)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        regression(model, opt, lambda step: ema.update(model), steps=70)
    assert codes(s.report) == []


def test_ema_warmup_constant_decay_hard_copies_and_lookahead_are_quiet():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    fixed = EMAModel(model.parameters(), overwrite=False)  # the fix: the per-step weight kept local
    constant = ShadowEMA(model.parameters(), decay=0.9)
    target = copy.deepcopy(model)  # a target network copied whole every step
    slow = [p.detach().clone() for p in model.parameters()]  # Lookahead: alpha 0.5 every 5 steps

    def after(step):
        fixed.step(model.parameters())
        constant.update()
        target.load_state_dict(model.state_dict())
        if (step + 1) % 5 == 0:
            with torch.no_grad():
                for s_, p in zip(slow, model.parameters()):
                    s_.add_(0.5 * (p - s_))
                    p.copy_(s_)

    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        regression(model, opt, after, steps=70)
    assert codes(s.report) == []
