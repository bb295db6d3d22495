"""What is random in evaluation (issue 26 item 5): random ops in an eval() forward are named
(info), a BatchNorm switched back to train() whose running statistics an evaluation forward
changed is a warning; the user's RNG stream and outputs are untouched; deterministic
evaluation, sampling with a generator, and BatchNorm in eval() stay quiet."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage

CODES = ("silent.eval_random", "silent.eval_bn_updates")


class NoisyEncoder(nn.Module):
    """A VAE-like encoder that samples in every mode."""

    def __init__(self):
        super().__init__()
        self.mu, self.logvar = nn.Linear(6, 4), nn.Linear(6, 4)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        mu, logvar = self.mu(x), self.logvar(x)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()  # SAMPLE
        return self.head(z)


class Quiet(nn.Module):
    def __init__(self, generator=None):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 3))
        self.generator = generator

    def forward(self, x):
        out = self.body(x)
        if self.generator is not None:  # sampling on purpose, with its own generator
            out = out + 0.01 * torch.randn(out.shape, generator=self.generator)
        return out


def _loop(model, evaluate, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
    outs = []
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(steps):
            model.train()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            outs.append(evaluate(model, x, y))
    return s, outs


def _eval_no_grad(model, x, y):
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()  # EVAL


def _ours(s):
    return [f for f in s.report.findings if f.code in CODES]


def test_a_model_that_samples_in_eval_is_named_as_an_info():
    torch.manual_seed(0)
    s, _ = _loop(NoisyEncoder(), _eval_no_grad)
    [f] = _ours(s)
    assert (f.code, f.severity.value, f.module, f.op) == ("silent.eval_random", "info", "NoisyEncoder", "randn_like")
    assert f.evidence["random_ops_by_module"] == ["NoisyEncoder: randn_like ×1"]
    assert f.evidence["grad_enabled"] is False


def test_mc_dropout_switched_back_on_is_named_with_its_module():
    def mc(model, x, y):
        model.eval()
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.train()
        with torch.no_grad():
            return model(x).softmax(1).mean().item()

    torch.manual_seed(0)
    s, _ = _loop(nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3)), mc)
    [f] = _ours(s)
    assert f.severity.value == "info" and f.module == "2" and f.op == "dropout"
    assert f.evidence["random_ops_by_module"] == ["2: dropout ×1 (module in train() mode)"]


def test_batchnorm_back_in_train_mode_whose_statistics_an_evaluation_changes_is_a_warning():
    def partial_eval(model, x, y):
        model.eval()
        model[1].train()  # BN_BACK
        with torch.no_grad():
            return (model(x).argmax(1) == y).float().mean().item()  # BN_EVAL

    torch.manual_seed(0)
    s, _ = _loop(nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3)), partial_eval)
    [f] = _ours(s)
    assert (f.code, f.severity.value, f.module) == ("silent.eval_bn_updates", "warning", "1")
    assert f.evidence["batchnorm_in_train_mode"] == ["1"]
    assert f.evidence["running_stats_changed_by_evaluation_forward"] is True
    src = Path(__file__).read_text().splitlines()
    assert src[f.line - 1].rstrip().endswith("# BN_EVAL")


def test_deterministic_evaluation_and_sampling_with_a_generator_are_quiet():
    torch.manual_seed(0)
    s, _ = _loop(Quiet(), _eval_no_grad)
    assert _ours(s) == []
    torch.manual_seed(0)
    s, _ = _loop(Quiet(torch.Generator().manual_seed(1)), _eval_no_grad)
    assert _ours(s) == []


def test_the_rng_stream_and_outputs_are_untouched():
    def run(watched):
        torch.manual_seed(0)
        model = NoisyEncoder()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        x = torch.randn(8, 6)
        outs = []

        def body():
            for _ in range(3):
                model.train()
                F.mse_loss(model(x), torch.zeros(8, 3)).backward()
                opt.step()
                model.eval()
                with torch.no_grad():
                    outs.append(model(x))
            outs.append(torch.rand(3))

        if watched:
            with torchtriage.watch(model, opt, on_anomaly="record", report=False):
                body()
        else:
            body()
        return outs

    for a, b in zip(run(False), run(True)):
        assert torch.equal(a, b)


def test_a_partly_frozen_model_trained_in_eval_mode_is_not_an_evaluation():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8),
                                                                   nn.Dropout(0.2), nn.Linear(8, 3)))
    opt = torch.optim.SGD(model[2].parameters(), lr=0.05)
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            model.eval()
            model[2].train()  # the head trains, BatchNorm and dropout included
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert _ours(s) == []
