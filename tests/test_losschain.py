"""Contracts on the ops of the loss region (issue 26 item 4): a loss input squashed twice, a
softmax over a size-1 axis or over another axis than its matmul contracts, a division whose
divisor is only the epsilon, an accumulator keeping graphs (memory), ReduceLROnPlateau in the
wrong mode, and the op where a loss lost its gradient. Each bug in two or three shapes, each
with look-alikes that stay quiet."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import line_in
from torchtriage import Category, Severity

_line = line_in


def _watch(model, opt):
    return torchtriage.watch(model, opt, on_anomaly="record", report=False)


def _codes(report, prefix: str = "") -> list:
    return [f for f in report.findings if f.code.startswith(prefix) and f.severity is not Severity.INFO]


# ---------------------------------------------------------------- squashed twice
def _bce_loop(head_sigmoid: bool, outer, targets=None, steps: int = 3):
    torch.manual_seed(0)
    layers = [nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1)] + ([nn.Sigmoid()] if head_sigmoid else [])
    model = nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    x = torch.randn(32, 6)
    y = (x[:, :1] > 0).float() if targets is None else targets
    with _watch(model, opt) as s:
        for _ in range(steps):
            loss = outer(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


def _sigmoid_then_bce(p, y):
    return F.binary_cross_entropy(torch.sigmoid(p), y)  # the model already ends in nn.Sigmoid


def _bce_module_on_view(p, y):
    crit = nn.BCELoss()
    return crit(p.view(-1).sigmoid(), y.view(-1))  # method form, through a view


def test_sigmoid_on_sigmoid_output_functional():
    (f,) = _codes(_bce_loop(True, _sigmoid_then_bce), "silent.squashed_twice")
    assert (f.severity, f.line, f.module, f.op) == (Severity.WARNING, _line(_sigmoid_then_bce, "F.binary"), "3",
                                                   "binary_cross_entropy")
    assert f.evidence["possible_range"] == [0.5, 0.7311]
    assert f.evidence["input_min"] >= 0.5 and f.evidence["lowest_reachable_excess_loss"] > 0.1
    assert "twice" in f.message and "already" in f.message


def test_sigmoid_on_sigmoid_output_module_and_view():
    (f,) = _codes(_bce_loop(True, _bce_module_on_view), "silent.squashed_twice")
    assert f.line == _line(_bce_module_on_view, "crit(p.view")
    assert f.evidence["its_input_producer"] == "SigmoidBackward0"


def test_sigmoid_on_tanh_output():
    model_tanh = nn.Sequential(nn.Linear(6, 1), nn.Tanh())
    opt = torch.optim.SGD(model_tanh.parameters(), 0.1)
    x, y = torch.randn(16, 6), torch.randint(0, 2, (16, 1)).float()
    with _watch(model_tanh, opt) as s:
        for _ in range(2):
            loss = F.binary_cross_entropy(torch.sigmoid(model_tanh(x)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    (f,) = _codes(s.report, "silent.squashed_twice")
    assert f.evidence["possible_range"] == [0.2689, 0.7311]


def test_squashed_once_is_quiet():
    assert not _codes(_bce_loop(True, F.binary_cross_entropy), "silent.")  # probabilities straight in
    assert not _codes(_bce_loop(False, _sigmoid_then_bce), "silent.")  # logits, one sigmoid
    # soft targets inside the band: the loss can still reach its minimum
    soft = torch.full((32, 1), 0.6)
    assert not _codes(_bce_loop(True, _sigmoid_then_bce, targets=soft), "silent.squashed_twice")


# ---------------------------------------------------------------- softmax axis
class _Capsules(nn.Module):
    """Attention over capsules written as a softmax over the singleton axis of a view."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.att = nn.Linear(8, 6 * 4)
        self.value = nn.Linear(8, 6 * 4)
        self.soft_max = nn.Softmax(dim)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        a = self.att(x).view(-1, 6, 1, 4)
        w = self.soft_max(a)
        v = self.value(x).view(-1, 6, 1, 4)
        return self.head((w * v).sum(1).squeeze(1))


class _Heads(nn.Module):
    """Multi-head self-attention; `dim` is the axis the softmax normalizes."""

    def __init__(self, dim: int = -1, d: int = 16, h: int = 2) -> None:
        super().__init__()
        self.qkv, self.h, self.out = nn.Linear(d, 3 * d), h, nn.Linear(d, 4)
        self.softmax = nn.Softmax(dim=dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        attn = self.drop(self.softmax(q @ k.transpose(-1, -2) / 4))
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, d)[:, 0])


class _Bmm3d(nn.Module):
    """Single-head attention with torch.bmm and a functional softmax."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.q, self.k, self.v, self.dim = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16), dim
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        scores = torch.bmm(self.q(x), self.k(x).transpose(1, 2))
        weights = F.softmax(scores, dim=self.dim)
        return self.out(torch.bmm(weights, self.v(x)).mean(1))


class _Einsum(nn.Module):
    """Single-head attention in einsum; `transposed` writes it as (V^T A^T)^T instead."""

    def __init__(self, dim: int, transposed: bool = False) -> None:
        super().__init__()
        self.q, self.k, self.v, self.dim = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16), dim
        self.transposed, self.out = transposed, nn.Linear(16, 4)

    def forward(self, x):
        weights = torch.einsum("bqd,bkd->bqk", self.q(x), self.k(x)).softmax(self.dim)
        if self.transposed:
            mixed = torch.matmul(self.v(x).transpose(1, 2), weights.transpose(1, 2)).transpose(1, 2)
        else:
            mixed = torch.einsum("bqk,bkd->bqd", weights, self.v(x))
        return self.out(mixed.mean(1))


class _SlotLike(nn.Module):
    """Slot attention: softmax over the slots, then a weighted mean over the inputs (correct)."""

    def __init__(self) -> None:
        super().__init__()
        self.slots, self.k, self.v, self.out = nn.Parameter(torch.randn(3, 16)), nn.Linear(16, 16), \
            nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        dots = torch.einsum("sd,bnd->bsn", self.slots, self.k(x))
        attn = dots.softmax(dim=1) + 1e-8
        attn = attn / attn.sum(dim=-1, keepdim=True)
        return self.out(torch.einsum("bsn,bnd->bsd", attn, self.v(x)).mean(1))


class _LinearAttention(nn.Module):
    """Efficient attention: keys normalized over the sequence, contracted over it (correct)."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.out = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        q, k = self.q(x).softmax(dim=-1), self.k(x).softmax(dim=-2)
        context = k.transpose(-2, -1) @ self.v(x)
        return self.out((q @ context).mean(1))


def _attn_loop(model, x_shape=(8, 6, 16), steps: int = 3):
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with _watch(model, opt) as s:
        for _ in range(steps):
            x = torch.randn(*x_shape)
            y = torch.randint(0, model.out.out_features if hasattr(model, "out") else 3, (x_shape[0],))
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


def test_softmax_over_singleton_axis_inside_model():
    (f,) = _codes(_attn_loop(_Capsules(2), x_shape=(8, 8)), "silent.softmax_over_singleton")
    assert (f.category, f.severity, f.module, f.line) == (Category.SHAPE, Severity.WARNING, "soft_max",
                                                         _line(_Capsules.forward, "self.soft_max(a)"))
    assert f.evidence["shape"] == (8, 6, 1, 4) and f.evidence["dim"] == 2
    assert "always 1" in f.message


def test_log_softmax_over_singleton_axis_functional():
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.out = nn.Linear(8, 5)

        def forward(self, x):
            scores = self.out(x).unsqueeze(-1)  # (B, 5, 1)
            return F.log_softmax(scores, dim=-1).squeeze(-1)

    torch.manual_seed(0)
    model = Tagger()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with _watch(model, opt) as s:
        for _ in range(2):
            loss = F.nll_loss(model(torch.randn(4, 8)), torch.randint(0, 5, (4,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = [f for f in s.report.findings if f.code == "silent.softmax_over_singleton"]
    assert found and found[0].op == "log_softmax" and found[0].evidence["output"] == 0.0
    assert found[0].line == _line(Tagger.forward, "F.log_softmax")


def test_softmax_over_capsule_axis_is_quiet():
    assert not _codes(_attn_loop(_Capsules(1), x_shape=(8, 8)), "silent.softmax")


def test_attention_softmax_over_query_axis_4d():
    (f,) = _codes(_attn_loop(_Heads(dim=2)), "silent.softmax_not_contracted_axis")
    assert (f.category, f.module, f.line) == (Category.SHAPE, "softmax", _line(_Heads.forward, "self.softmax("))
    ev = f.evidence
    assert (ev["shape"], ev["normalized_dim"], ev["contracted_dim"], ev["consumer"]) == ((8, 2, 6, 6), 2, 3, "bmm")
    assert ev["weights_sum_over_contracted_min"] < 0.99 or ev["weights_sum_over_contracted_max"] > 1.01


def test_attention_softmax_over_query_axis_bmm_3d():
    (f,) = _codes(_attn_loop(_Bmm3d(dim=1)), "silent.softmax_not_contracted_axis")
    assert f.line == _line(_Bmm3d.forward, "F.softmax(") and f.evidence["contracted_dim"] == 2


@pytest.mark.parametrize("transposed", [False, True])
def test_attention_softmax_over_query_axis_einsum_and_transposed(transposed):
    (f,) = _codes(_attn_loop(_Einsum(dim=1, transposed=transposed)), "silent.softmax_not_contracted_axis")
    assert (f.evidence["normalized_dim"], f.evidence["contracted_dim"]) == (1, 2)


@pytest.mark.parametrize("model", [lambda: _Heads(dim=-1), lambda: _Bmm3d(dim=-1), _SlotLike, _LinearAttention,
                                   lambda: _Einsum(-1), lambda: _Einsum(-1, transposed=True)])
def test_attention_over_the_contracted_axis_is_quiet(model):
    assert not _codes(_attn_loop(model()), "silent.softmax")


# ---------------------------------------------------------------- eps-dominated division
def _policy_loop(advantages_fn, steps: int = 3):
    torch.manual_seed(0)
    policy = nn.Linear(8, 5)
    opt = torch.optim.SGD(policy.parameters(), 1e-2)
    rewards = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 0, 0], [0.0, 0, 0, 0], [1.0, 1, 1, 0]])
    with _watch(policy, opt) as s:
        for _ in range(steps):
            logp = torch.log_softmax(policy(torch.randn(16, 8)), -1)[:, 0]
            adv = advantages_fn(rewards).reshape(-1)
            loss = -(adv * logp).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


def _leave_one_out(r):
    k = r.shape[1]
    base = (r.sum(1, keepdim=True) - r) / (k - 1)
    sq = ((r ** 2).sum(1, keepdim=True) - r ** 2) / (k - 1)
    std = (sq - base ** 2).clamp(min=0).sqrt()
    return (r - base) / (std + 1e-6)


def _scaled_not_centred(r):
    return r / (r.std(dim=1, keepdim=True) + 1e-8)  # a group of all-ones rewards has std 0


def _group_normalized(r):
    return (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-8)  # constant group: 0 / eps = 0


def test_leave_one_out_std_zero():
    (f,) = _codes(_policy_loop(_leave_one_out), "silent.eps_dominated_division")
    assert (f.category, f.severity, f.line, f.op) == (Category.NUMERICAL, Severity.WARNING,
                                                     _line(_leave_one_out, "return (r - base)"), "div")
    ev = f.evidence
    assert ev["epsilon"] == 1e-6 and ev["largest_quotient_where_divisor_degenerate"] > 1e5
    assert ev["largest_quotient_elsewhere"] < 10 and ev["share_of_abs_sum"] > 0.99


def test_uncentred_numerator_over_zero_std():
    def rewards_with_constant_group(r):
        r = r.clone()
        r[3] = 1.0
        return _scaled_not_centred(r)

    (f,) = _codes(_policy_loop(rewards_with_constant_group), "silent.eps_dominated_division")
    assert f.line == _line(_scaled_not_centred, "return r /") and f.evidence["epsilon"] == 1e-8


def test_centred_normalization_and_counts_are_quiet():
    assert not _codes(_policy_loop(_group_normalized), "silent.eps")
    assert not _codes(_policy_loop(lambda r: r / r.sum(1, keepdim=True).clamp(min=1)), "silent.eps")


# ---------------------------------------------------------------- graphs kept (memory)
def test_epoch_loss_accumulator_is_a_memory_finding_on_its_line():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), 0.01)
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def loop():
        for _epoch in range(3):
            epoch_loss = 0.0
            for i in range(0, 16, 2):
                loss = F.mse_loss(model(x[i:i + 2]), y[i:i + 2])
                opt.zero_grad()
                loss.backward()
                opt.step()
                epoch_loss += loss / 8
    with _watch(model, opt) as s:
        loop()
    found = [f for f in s.report.findings if f.code == "silent.loss_graph_kept"]
    assert len(found) == 1  # the later epochs' accumulators are the same line, not the loss's line
    assert (found[0].category, found[0].line) == (Category.MEMORY, _line(loop, "epoch_loss += loss"))


# ---------------------------------------------------------------- ReduceLROnPlateau mode
def _plateau_loop(metric: str, mode: str = "min", epochs: int = 8):
    torch.manual_seed(0)
    model = nn.Linear(10, 3)
    opt = torch.optim.SGD(model.parameters(), 0.05)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode=mode, patience=1, factor=0.2)
    x = torch.randn(400, 10)
    y = x[:, :3].argmax(1)
    with _watch(model, opt) as s:
        for _ in range(epochs):
            for i in range(0, 400, 50):
                loss = F.cross_entropy(model(x[i:i + 50]), y[i:i + 50])
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():
                out = model(x)
                acc = (out.argmax(1) == y).sum().item() / len(y)
                val_loss = F.cross_entropy(out, y).item()
            sched.step(acc if metric == "acc" else -val_loss if metric == "neg_loss" else val_loss)
    return s.report


def test_plateau_min_mode_fed_accuracy():
    (f,) = [f for f in _plateau_loop("acc").findings if f.code == "dynamics.plateau_wrong_mode"]
    assert (f.severity, f.op) == (Severity.WARNING, "ReduceLROnPlateau")
    assert f.evidence["mode"] == "min" and f.evidence["metric_is_fraction_of"] == 400
    assert "mode='min'" in f.message and f.evidence["source_line"].startswith("sched.step(")


def test_plateau_max_mode_fed_a_loss_is_info_without_a_count():
    found = [f for f in _plateau_loop("loss", mode="max").findings if f.code == "dynamics.plateau_wrong_mode"]
    assert found and found[0].severity is Severity.INFO


@pytest.mark.parametrize("metric,mode", [("loss", "min"), ("acc", "max"), ("neg_loss", "max")])
def test_plateau_in_the_right_mode_is_quiet(metric, mode):
    assert not [f for f in _plateau_loop(metric, mode).findings if f.code == "dynamics.plateau_wrong_mode"]


# ---------------------------------------------------------------- where the gradient was lost
class _Bins(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.out_x = nn.Conv2d(8, 17, 1)

    def forward(self, x):
        return self.out_x(self.features(x))


def _decode_loop(decode):
    torch.manual_seed(0)
    model = _Bins()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    target = torch.rand(2, 6, 6)
    with pytest.raises(RuntimeError, match="does not require grad"):
        with _watch(model, opt) as s:
            for _ in range(2):
                pred = decode(model(torch.rand(2, 3, 6, 6)))
                loss = F.l1_loss(pred, target)
                opt.zero_grad()
                loss.backward()
                opt.step()
    return s.report


def _argmax_decode(logits):
    coords = torch.argmax(logits, dim=1)
    return coords.float() / 16.0


def _threshold_decode(logits):
    mask = logits[:, 0] > 0
    return mask.float()


@pytest.mark.parametrize("decode,text,op", [(_argmax_decode, "torch.argmax", "argmax"),
                                            (_threshold_decode, "logits[:, 0] > 0", "gt")])
def test_loss_without_grad_names_the_non_differentiable_op(decode, text, op):
    report = _decode_loop(decode)
    (f,) = [f for f in report.findings if f.code == "gradient.loss_no_grad_fn"]
    assert (f.line, f.op) == (_line(decode, text), op)
    assert "not differentiable" in f.message
    assert not [g for g in report.findings if g.code.startswith("gradient.cut_")]  # the same cause, once


def test_argmax_for_a_metric_beside_a_differentiable_loss_is_quiet():
    torch.manual_seed(0)
    model = _Bins()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with _watch(model, opt) as s:
        for _ in range(2):
            logits = model(torch.rand(2, 3, 6, 6))
            target = torch.randint(0, 17, (2, 6, 6))
            loss = F.cross_entropy(logits, target)
            _acc = (logits.argmax(1) == target).float().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not [f for f in s.report.findings if f.code.startswith("gradient.")]
