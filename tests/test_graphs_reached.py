"""What a step leaves reaching into the autograd graph, and who it reaches (session 16):

  * model outputs kept with their graph across steps (a metric's running tensor), and the
    `.grad` a `backward(create_graph=True)` leaves on a non-parameter (a reference cycle):
    `silent.loss_graph_kept` (memory), only when the graphs alive grow with the steps;
  * one optimizer's backward left in another's `.grad` and applied by its step
    (`gradient.foreign_grads_applied`);
  * labels given as an asymmetric loss's input and the model's output as its target
    (`silent.loss_args_swapped`);
  * a bool tensor compared with a number it cannot hold (`silent.constant_comparison`).

Each written the ways users write it, with the quiet versions beside it."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from _lines import line_in
from torchtriage import Category, Severity
from torchtriage._session import Session

_line = line_in


def _session(loop, checks, *args):
    kw = dict(on_anomaly="record", report=False, checks=checks)
    with Session(discover=True, **kw) as s:
        loop(*args)
    return s.report


# ------------------------------------------------------------------ 1. metric state keeps graphs
class SquaredError:
    """A metric object the way trainer libraries write them: process() per batch, a running sum."""

    def __init__(self, detach: bool):
        self.detach, self.total, self.n = detach, 0.0, 0

    def process(self, pred, target):
        err = torch.pow(pred - target, 2)
        return err.detach() if self.detach else err

    def update(self, pred, target):
        err = self.process(pred, target)
        self.total = self.total + err.sum()
        self.n += err.numel()


def _metric_loop(detach=False, steps=12):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    metric = SquaredError(detach)
    for _ in range(steps):
        x = torch.randn(8, 6)
        y = x.sum(1, keepdim=True)
        opt.zero_grad()
        pred = model(x)
        F.mse_loss(pred, y).backward()
        opt.step()
        metric.update(pred, y)


def test_metric_running_sum_keeps_every_steps_graph():
    found = _session(_metric_loop, ["silent"]).filter(code="silent.loss_graph_kept")
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING and f.category is Category.MEMORY
    assert f.line == _line(SquaredError.process, "torch.pow(pred - target, 2)")
    assert f.evidence["steps_alive"] >= 6


def test_metric_that_detaches_is_quiet():
    assert not _session(lambda: _metric_loop(detach=True), ["silent"]).filter(code="silent.loss_graph_kept")


def _window_loop(n=4, steps=12):
    """A bounded window of un-detached outputs (the last few for a plot): not a growing leak."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    last = collections.deque(maxlen=n)
    for _ in range(steps):
        x = torch.randn(8, 4)
        opt.zero_grad()
        out = model(x)
        out.pow(2).mean().backward()
        opt.step()
        last.append(out)


def test_short_window_of_outputs_is_quiet():
    assert not _session(_window_loop, ["silent"]).filter(code="silent.loss_graph_kept")


def _predictions_list_loop(steps=12):
    """Variant: predictions appended to a list for an epoch-end metric, without detach."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), 0.1)
    preds = []
    for _ in range(steps):
        x, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        preds.append(logits.softmax(-1))
    return preds


def test_predictions_appended_without_detach():
    found = _session(_predictions_list_loop, ["silent"]).filter(code="silent.loss_graph_kept")
    assert len(found) == 1 and found[0].category is Category.MEMORY


# ------------------------------------------------------------------ 2. create_graph .grad cycle
def _gp_loop(autograd_grad=False, steps=10):
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt = torch.optim.Adam(critic.parameters(), 1e-4)
    for _ in range(steps):
        real, fake = torch.randn(16, 8) + 1, torch.randn(16, 8)
        eps = torch.rand(16, 1)
        mixed = (eps * real + (1 - eps) * fake).detach().requires_grad_(True)
        score = critic(mixed)
        if autograd_grad:
            grad = torch.autograd.grad(score.sum(), mixed, create_graph=True)[0]
        else:
            score.sum().backward(create_graph=True)
            grad = mixed.grad
        gp = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        loss = critic(fake).mean() - critic(real).mean() + 10 * gp
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_backward_create_graph_on_an_input_leaks_a_cycle_per_step():
    found = _session(_gp_loop, ["silent"]).filter(code="silent.loss_graph_kept")
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING and f.category is Category.MEMORY
    assert f.line == _line(_gp_loop, "score.sum().backward(create_graph=True)")
    assert "create_graph" in f.message


def test_autograd_grad_penalty_is_quiet():
    assert not _session(lambda: _gp_loop(autograd_grad=True), ["silent"]).filter(code="silent.loss_graph_kept")


# ------------------------------------------------------------------ 3. foreign gradients applied
def _gan(reset_before=False, module_reset=False, steps=10):
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 6))
    disc = nn.Sequential(nn.Linear(6, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g = torch.optim.Adam(gen.parameters(), 2e-4)
    opt_d = torch.optim.Adam(disc.parameters(), 2e-4)
    for _ in range(steps):
        real = torch.randn(16, 6) + 1
        fake = gen(torch.randn(16, 4))
        if reset_before:
            (disc.zero_grad if module_reset else opt_d.zero_grad)()
        d_loss = F.softplus(disc(fake.detach())).mean() + F.softplus(-disc(real)).mean()
        d_loss.backward()
        opt_d.step()
        if not reset_before:
            opt_d.zero_grad()
        g_loss = F.softplus(-disc(fake)).mean()
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()


def test_discriminator_steps_with_the_generators_gradient():
    found = _session(_gan, ["step_ledger"]).filter(code="gradient.foreign_grads_applied")
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING and f.category is Category.GRADIENT
    assert f.line == _line(_gan, "g_loss.backward()")
    assert f.evidence["steps_applying_it"] >= 2


def test_discriminator_reset_before_its_loss_is_quiet():
    for module_reset in (False, True):
        rep = _session(lambda m=module_reset: _gan(reset_before=True, module_reset=m), ["step_ledger"])
        assert not rep.filter(code="gradient.foreign_grads_applied")


def _two_optimizers_one_loss(steps=8):
    """One loss, an encoder optimizer and a decoder optimizer: both apply the same pass."""
    torch.manual_seed(0)
    enc, dec = nn.Linear(6, 3), nn.Linear(3, 6)
    o1, o2 = torch.optim.SGD(enc.parameters(), 0.1), torch.optim.SGD(dec.parameters(), 0.1)
    for _ in range(steps):
        x = torch.randn(8, 6)
        o1.zero_grad()
        o2.zero_grad()
        F.mse_loss(dec(enc(x)), x).backward()
        o1.step()
        o2.step()


def test_one_loss_two_optimizers_is_quiet():
    assert not _session(_two_optimizers_one_loss, ["step_ledger"]).filter(code="gradient.foreign_grads_applied")


def _manual_zero(steps=8):
    """Variant: the discriminator's grads zeroed by hand in a loop (no zero_grad call)."""
    torch.manual_seed(0)
    gen, disc = nn.Linear(3, 5), nn.Linear(5, 1)
    og, od = torch.optim.SGD(gen.parameters(), 0.01), torch.optim.SGD(disc.parameters(), 0.01)
    for _ in range(steps):
        fake = gen(torch.randn(8, 3))
        for p in disc.parameters():
            if p.grad is not None:
                p.grad.zero_()
        disc(fake.detach()).mean().backward()
        od.step()
        og.zero_grad()
        (-disc(fake).mean()).backward()
        og.step()


def test_grads_zeroed_by_hand_are_quiet():
    assert not _session(_manual_zero, ["step_ledger"]).filter(code="gradient.foreign_grads_applied")


# ------------------------------------------------------------------ 4. loss arguments swapped
def _swapped_loop(swapped=True, steps=4):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 5), nn.Softmax(dim=1))
    opt = torch.optim.Adam(net.parameters())
    criterion = nn.CrossEntropyLoss(reduction="sum")
    for _ in range(steps):
        x = torch.randn(16, 12)
        y = F.one_hot(torch.randint(0, 5, (16,)), 5).float()
        probs = net(x)
        loss = criterion(y, probs) if swapped else criterion(torch.log(probs), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_labels_as_input_and_probabilities_as_target():
    found = _session(_swapped_loop, ["silent"]).filter(code="silent.loss_args_swapped")
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING and f.op == "cross_entropy"
    assert f.line == _line(_swapped_loop, "criterion(y, probs) if swapped")
    assert f.evidence["loss_floor_per_sample"] == round(__import__("math").log(__import__("math").e + 4) - 1, 4)


def test_arguments_in_order_are_quiet():
    assert not _session(lambda: _swapped_loop(swapped=False), ["silent"]).filter(code="silent.loss_args_swapped")


def _kl_swapped(steps=4):
    """Variant: kl_div given the labels' rows as its log-probability input."""
    torch.manual_seed(0)
    net = nn.Linear(6, 4)
    opt = torch.optim.SGD(net.parameters(), 0.1)
    for _ in range(steps):
        x = torch.randn(8, 6)
        target = F.one_hot(torch.randint(0, 4, (8,)), 4).float()
        loss = F.kl_div(target, net(x).softmax(-1), reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_kl_div_swapped():
    found = _session(_kl_swapped, ["silent"]).filter(code="silent.loss_args_swapped")
    assert len(found) == 1 and found[0].op == "kl_div"


def _distill(steps=4):
    """Soft targets from a teacher that carry a graph (self-distillation) and logits as the input: quiet."""
    torch.manual_seed(0)
    net = nn.Linear(6, 4)
    opt = torch.optim.SGD(net.parameters(), 0.1)
    for _ in range(steps):
        x = torch.randn(8, 6)
        logits = net(x)
        loss = F.cross_entropy(logits.detach() * 2, logits.softmax(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_detached_logits_against_soft_targets_is_quiet():
    assert not _session(_distill, ["silent"]).filter(code="silent.loss_args_swapped")


# ------------------------------------------------------------------ 5. bool compared with 2
def iou(pred, target, k, cast=False):
    a, b = (pred == k), (target == k)
    if cast:
        a, b = a.int(), b.int()
    inter = (a + b).eq(2).sum().item()
    union = (a + b).ge(1).sum().item()
    return inter / max(union, 1)


def _seg_loop(cast=False, epochs=2):
    torch.manual_seed(0)
    net = nn.Conv1d(3, 4, 3, padding=1)
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    x = torch.randn(32, 3, 20)
    y = x[:, :, :].abs().argmax(1)
    for _ in range(epochs):
        net.train()
        for i in range(0, 24, 8):
            loss = F.cross_entropy(net(x[i:i + 8]), y[i:i + 8])
            opt.zero_grad()
            loss.backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            pred = net(x[24:]).argmax(1)
            [iou(pred, y[24:], k, cast) for k in range(4)]


def test_bool_sum_compared_with_two():
    found = _session(_seg_loop, ["dynamics"]).filter(code="silent.constant_comparison")
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING and f.category is Category.DTYPE
    assert f.line == _line(iou, "(a + b).eq(2)")
    assert f.evidence["result_is_always"] == "False"
    assert "logical or" in f.evidence["bool_tensor_made_by"]


def test_cast_before_adding_is_quiet():
    assert not _session(lambda: _seg_loop(cast=True), ["dynamics"]).filter(code="silent.constant_comparison")
