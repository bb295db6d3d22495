"""A clamp that replaces every value it is given, across zero (`silent.clamp_flips_sign`): the
guard `(b - a).clamp(min=eps)` on a difference that is negative everywhere. Written the ways users
write it, and the guards that stay quiet."""

from __future__ import annotations

import torch
import torch.nn as nn

from _lines import line_in, run_silent
from torchtriage import Category, Severity

_line = line_in


def _run(model, loop, discover=False):
    return run_silent(model, loop, "silent.clamp_flips_sign", discover)


# ------------------------------------------- 1. flow-matching distillation, a plain loop
def _flow(model, opt, fixed=False):
    sigmas = torch.linspace(1.0, 0.0, 9)
    for _ in range(3):
        x = torch.randn(16, 4)
        for k in range(4):
            s, s_next = sigmas[k], sigmas[k + 1]
            x_next = x * 0.9
            d = s_next - s
            den = torch.sign(d) * d.abs().clamp(min=1e-6) if fixed else d.clamp(min=1e-6)
            target = (x_next - x) / den
            loss = ((model(x) - target) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


def test_flow_target_with_a_reversed_difference_clamped():
    torch.manual_seed(0)
    found = _run(nn.Linear(4, 4), _flow)
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING and f.category is Category.NUMERICAL and f.op == "clamp"
    assert f.line == _line(_flow, "else d.clamp(min=1e-6)")
    assert f.evidence["elements_replaced"] == "1/1" and f.evidence["bound"] == "min=1e-06"
    assert f.evidence["input_max"] < 0 and f.evidence["largest_scale_change"] > 1e5


def test_flow_target_with_the_sign_kept_is_quiet():
    torch.manual_seed(0)
    assert not _run(nn.Linear(4, 4), lambda m, o: _flow(m, o, fixed=True))


# --------------------------------- 2. a per-row weight from log-probabilities, function style
def weighted_nll(logits, y):
    logp = torch.log_softmax(logits, -1)
    picked = logp.gather(1, y[:, None]).squeeze(1)
    w = picked.detach().clamp_min(1e-3)   # meant: a confidence weight, but log-probs are < 0
    return -(w * picked).mean()


def _clf(model, opt):
    for _ in range(3):
        x, y = torch.randn(12, 6), torch.randint(0, 3, (12,))
        loss = weighted_nll(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_clamp_min_of_log_probabilities_in_a_loss_function():
    torch.manual_seed(0)
    (f,) = _run(nn.Linear(6, 3), _clf)
    assert f.line == _line(weighted_nll, "clamp_min(1e-3)") and f.evidence["elements_replaced"] == "12/12"
    assert f.evidence["input_shape"] == (12,)


# ------------------------------ 3. a loss module under discovery, torch.clip of a time step
class RateLoss(nn.Module):  # no parameters: the loss stage, its ops the user's step code
    def forward(self, pred, x_now, x_prev, t_now, t_prev):
        dt = torch.clip(t_prev - t_now, min=1e-4)   # times grow: t_prev - t_now < 0
        return ((pred - (x_now - x_prev) / dt[:, None]) ** 2).mean()


def _rate(model, opt):
    crit = RateLoss()
    for _ in range(3):
        t = torch.rand(10).sort().values
        t_prev, t_now = t, t + 0.1 + torch.rand(10)
        x_prev, x_now = torch.randn(10, 2), torch.randn(10, 2)
        loss = crit(model(x_now), x_now, x_prev, t_now, t_prev)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_clip_in_a_loss_module_found_under_discovery():
    torch.manual_seed(0)
    (f,) = _run(nn.Linear(2, 2), _rate, discover=True)
    assert f.line == _line(RateLoss.forward, "torch.clip(") and f.evidence["elements_replaced"] == "10/10"


# ------------------------------------------------------------------------------ quiet guards
def _guards(model, opt):
    for step in range(3):
        x, y = torch.randn(16, 4), torch.randn(16, 4)
        out = model(x)
        z = (out - out.mean(0)) / out.std(0).clamp(min=1e-6)      # a std: positive, guard idle
        warm = torch.clamp(torch.tensor(step / 2.0), max=1.0)       # a warm-up factor
        hinge = (1 - out * y).clamp(min=0)                          # a hinge: bound at zero
        zeros = torch.zeros(16).clamp(min=1e-8)                     # exact zeros: nothing to flip
        loss = warm * ((z - y) ** 2).mean() + hinge.mean() + (zeros * 0).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_guards_that_do_their_job_are_quiet():
    torch.manual_seed(0)
    assert not _run(nn.Linear(4, 4), _guards)
