"""Session 10: writes to the gradients that no optimizer step reads (`_dynamics/_gradwrites.py`,
`dynamics.grad_write_discarded`). The bug is a hand-written gradient clip in a training-step
function that runs before the loop zeroes the gradients and calls backward (a LightningModule's
`training_step`), and the same clip after `optimizer.step()`. The look-alikes stay quiet: the clip
between backward and step, a GAN whose generator backward fills the discriminator's gradients,
gradients zeroed by hand after the step."""

from __future__ import annotations

import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()
CODE = "dynamics.grad_write_discarded"


def clip_grad_norm_(parameters, max_norm: float) -> torch.Tensor:
    """Copied from torch.nn.utils.clip_grad_norm_ (as repositories keep their own)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total = torch.norm(torch.stack([torch.norm(g.detach(), 2.0) for g in grads]), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.detach().mul_(coef)
    return total


def setup(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = [(x := torch.randn(16, 8, generator=g), 3 * x.sum(1, keepdim=True)) for _ in range(12)]
    return model, opt, data


def findings(report: torchtriage.Report) -> list[tuple[str, str]]:
    return [(f.code, f.message) for f in report.findings if f.code == CODE]


def test_clip_inside_a_training_step_that_runs_before_zero_grad_and_backward():
    model, opt, data = setup()

    def training_step(x, y):
        loss = F.mse_loss(model(x), y)
        clip_grad_norm_(list(model.parameters()), 0.01)  # (the previous step's gradients)
        return loss

    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in data:  # Lightning's automatic optimization: step, zero_grad, backward, optimizer.step
            loss = training_step(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    [f] = s.report.filter(code=CODE)
    assert (f.category.value, f.severity, f.step) == ("gradient", Severity.WARNING, 1)
    assert f.evidence["steps_seen_like_this"] == [1, 2]
    assert (f.evidence["gradients_written_after_step"], f.evidence["gradients_followed"]) == (4, 4)
    assert f.message == ("4 of 4 gradients followed were changed in place after optimizer.step() had applied them "
                         "(a clip or scale on the previous step's gradients), then reset by zero_grad() before any "
                         "step read them, at 2 steps from step 1 (0.weight, 0.bias): the write had no effect; the "
                         "gradients the optimizer used were not clipped")


def test_clip_after_the_step_written_by_hand():
    model, opt, data = setup()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in data:
            F.mse_loss(model(x), y).backward()
            opt.step()
            clip_grad_norm_(list(model.parameters()), 0.01)
            opt.zero_grad()
    assert [c for c, _ in findings(s.report)] == [CODE]


def test_clip_between_backward_and_step_is_quiet():
    model, opt, data = setup()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in data:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            clip_grad_norm_(list(model.parameters()), 0.01)
            opt.step()
    assert findings(s.report) == []


def test_a_gan_generator_backward_filling_the_discriminator_grads_is_quiet():
    torch.manual_seed(0)
    G, D = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8)), nn.Sequential(nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(G.parameters(), 1e-3), torch.optim.Adam(D.parameters(), 1e-3)
    with torchtriage.watch([G, D], [opt_g, opt_d], on_anomaly="record", report=False) as s:
        for _ in range(12):
            real, z = torch.randn(16, 8), torch.randn(16, 4)
            opt_d.zero_grad()  # (D's grads still hold what G's backward added last iteration)
            d_loss = F.softplus(-D(real)).mean() + F.softplus(D(G(z).detach())).mean()
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            F.softplus(-D(G(z))).mean().backward()  # accumulates into D's .grad in place
            opt_g.step()
    assert findings(s.report) == []


def test_gradients_zeroed_by_hand_after_the_step_are_quiet():
    model, opt, data = setup()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in data:
            F.mse_loss(model(x), y).backward()
            opt.step()
            for p in model.parameters():
                p.grad.zero_()
            opt.zero_grad()
    assert findings(s.report) == []


def test_the_finding_carries_the_zero_grad_line_and_the_loss_numbers():
    model, opt, data = setup()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in data:
            F.mse_loss(model(x), y).backward()
            opt.step()
            clip_grad_norm_(list(model.parameters()), 0.01)
            opt.zero_grad()  # discards the clipped gradients
    [f] = s.report.filter(code=CODE)
    assert f.line is not None and HERE[f.line - 1].strip() == "opt.zero_grad()  # discards the clipped gradients"
    assert f.severity is Severity.WARNING and f.evidence["run_kept_learning"] is False
    assert {"loss_at_finding", "loss_at_end"} <= set(f.evidence)


def test_a_clip_after_the_step_in_a_run_that_learns_is_an_info():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    data = [(x := torch.randn(16, 8, generator=g), 3 * x.sum(1, keepdim=True)) for _ in range(60)]
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in data:
            F.mse_loss(model(x), y).backward()
            opt.step()
            clip_grad_norm_(list(model.parameters()), 0.01)  # (acts: the gradients are larger)
            opt.zero_grad()
    [f] = s.report.filter(code=CODE)
    assert f.severity is Severity.INFO and f.evidence["run_kept_learning"] is True
    assert float(f.evidence["loss_at_end"]) < float(f.evidence["loss_at_finding"])


def test_a_clip_after_the_step_that_never_acts_is_quiet():
    """A misplaced clip whose threshold the gradients never reach scales them by 1: it changed no
    value, so discarding it changed nothing on this run (VAME's and MVTN's loops clip after
    `optimizer.step()` with a threshold above their gradients' norm)."""
    model, opt, data = setup()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in data:
            F.mse_loss(model(x), y).backward()
            opt.step()
            clip_grad_norm_(list(model.parameters()), 1e6)  # coef 1: mul_(1.0) moves the versions only
            opt.zero_grad()
    assert findings(s.report) == []


def test_torch_clip_after_the_step_is_left_to_the_clip_order_finding():
    """`torch.nn.utils.clip_grad_norm_`, seen by the session: the clip-order finding names its line,
    and this check adds no second finding without one."""
    model, opt, data = setup()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in data:
            F.mse_loss(model(x), y).backward()
            opt.step()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)  # the misplaced clip
            opt.zero_grad()
    assert findings(s.report) == []
    [f] = s.report.filter(code="dynamics.clip_after_step")
    assert HERE[f.line - 1].strip() == "torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)  # the misplaced clip"
