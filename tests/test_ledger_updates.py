"""The step ledger's parameter updates (issue 26): a parameter that requires grad, is held by an
optimizer that stepped and has a non-zero gradient must move. Written as users write them; the
correct twins stay quiet."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import marked
from torchtriage import Severity

HERE = str(Path(__file__))


line_of = marked(Path(HERE))


def codes(report, *names):
    return [f for f in report if f.code in names]


MOVES = ("dtype.updates_rounded_away", "gradient.not_moved")


class TokenModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 64)
        self.proj = nn.Linear(4 * 64, 64)
        self.head = nn.Linear(64, 32)

    def forward(self, idx):
        return self.head(F.gelu(self.proj(self.emb(idx).flatten(1))))


def train_tokens(dtype, lr=1e-4, steps=12, autocast=False):
    torch.manual_seed(0)
    model = TokenModel()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(steps):
            x = torch.randint(0, 32, (64, 4))
            y = (x[:, -1] + 1) % 32
            if model.proj.weight.dtype != dtype:
                model = model.to(dtype=dtype)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()  # STEP-TOKENS
    return s.report


def test_a_model_cast_to_bf16_whose_updates_round_away_is_named():
    report = train_tokens(torch.bfloat16)
    [f] = codes(report, *MOVES)
    assert f.code == "dtype.updates_rounded_away" and f.severity is Severity.WARNING
    assert f.line == line_of("STEP-TOKENS")
    ev = f.evidence
    assert ev["dtype"] == "bfloat16" and ev["optimizer"] == "AdamW" and ev["lr"] == 1e-4
    assert {"proj.weight", "head.weight"} <= set(ev["parameters"])
    assert ev["unchanged"] >= 0.5 * ev["sampled_values_with_gradient"]
    assert ev["dtype_spacing_there"] > ev["lr"]


@pytest.mark.parametrize("autocast", [False, True])
def test_float32_weights_with_or_without_autocast_are_quiet(autocast):
    assert not codes(train_tokens(torch.float32, autocast=autocast), *MOVES)


def test_bf16_weights_with_a_learning_rate_that_moves_them_are_quiet():
    assert not codes(train_tokens(torch.bfloat16, lr=3e-2), *MOVES)


def test_an_optimizer_that_steps_a_stale_copy_is_named():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(6):
            x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()  # STEP-RESTORED
            model.load_state_dict(snapshot)  # "keep the best": restores the start each step
    [f] = codes(s.report, *MOVES)
    assert f.code == "gradient.not_moved" and f.severity is Severity.WARNING
    assert f.line == line_of("STEP-RESTORED")
    assert f.evidence["unchanged"] == f.evidence["sampled_values_with_gradient"] > 0
    assert f.evidence["count"] == 4 and f.evidence["optimizer"] == "SGD"


def test_zero_initialised_branches_and_an_lr_warmup_from_zero_are_quiet():
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 8)
            self.gate = nn.Parameter(torch.zeros(1))  # ReZero
            self.lora_a = nn.Parameter(torch.randn(2, 8) * 0.1)
            self.lora_b = nn.Parameter(torch.zeros(8, 2))  # LoRA B

        def forward(self, x):
            return x + self.gate * self.body(x) + x @ self.lora_a.t() @ self.lora_b.t()

    model = nn.Sequential(Block(), nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 3))
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(10):
            x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
    assert not codes(s.report, *MOVES)


def test_a_pruned_float32_layer_whose_pruned_weights_stay_zero_is_quiet():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    mask = (torch.rand_like(model[0].weight) > 0.8).float()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(8):
            x, y = torch.randn(16, 16), torch.randint(0, 2, (16,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            with torch.no_grad():
                model[0].weight.mul_(mask)
    assert not codes(s.report, *MOVES)


def test_a_clone_trained_with_the_original_models_optimizer_is_named():
    torch.manual_seed(0)
    import copy

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def fit(net, steps):
        for _ in range(steps):
            x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()  # STEP-SHARED

    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        fit(model, 4)
        clone = copy.deepcopy(model)
        for layer in clone:
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()
        fit(clone, 12)  # the clone's gradients are never applied
    [f] = codes(s.report, *MOVES)
    assert f.code == "gradient.not_moved" and f.line == line_of("STEP-SHARED")
    assert f.evidence["since_step"] == 4 and f.evidence["tensors_held"] == 4
    assert f.evidence["judged_steps_without_gradient"] == 12


def test_an_accumulation_condition_that_never_lets_the_optimizer_step_is_named():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    accumulation = 8
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _epoch in range(3):
            for i in range(6):  # 6 batches an epoch, fewer than `accumulation`
                x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
                (F.cross_entropy(model(x), y) / accumulation).backward()  # BACKWARD-ACCUM
                if (i + 1) % accumulation == 0:
                    opt.step()
                    opt.zero_grad()
    [f] = codes(s.report, *MOVES)
    assert f.code == "gradient.not_moved" and f.line == line_of("BACKWARD-ACCUM")
    assert f.evidence["optimizer_steps"] == 0 and f.evidence["judged_backwards"] >= 8
    assert f.evidence["count"] == 4 and f.evidence["unchanged_share"] == "100%"


def test_accumulation_that_steps_every_few_batches_is_quiet():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(24):
            x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
            (F.cross_entropy(model(x), y) / 4).backward()
            if (i + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
    assert not codes(s.report, *MOVES)


class _Learner(nn.Module):
    """A boosting stage's weak learner: its input norm runs only when a previous stage's features
    come in, so the first learner's norm never gets a gradient."""

    def __init__(self, d_in):
        super().__init__()
        self.fc, self.out = nn.Linear(d_in, 16), nn.Linear(16, 1)
        self.norm = nn.BatchNorm1d(d_in)

    def forward(self, x, lower=None):
        if lower is not None:
            x = self.norm(torch.cat([x, lower], 1))
        h = torch.relu(self.fc(x))
        return h, self.out(h)


def test_earlier_boosting_stages_that_the_corrective_step_reaches_but_does_not_train_are_quiet():
    """Each stage trains a new learner with its own optimizer; the corrective step backpropagates
    through the whole ensemble but optimizes the newest learner only (TALENT's GrowNet). The
    earlier learners get gradients no optimizer holds any more: they were trained in their stage.
    The first stage's optimizer stepped two tensors that never had a gradient (the unused norm):
    no copy of a later learner's parameters, whose shapes are others."""
    torch.manual_seed(0)
    X = torch.randn(256, 4)
    Y = X[:, :1] * 2 + X[:, 1:2] ** 2
    learners = []

    def ensemble(x):
        lower, pred = None, 0
        for m in learners:
            lower, out = m(x, lower)
            pred = pred + out
        return pred

    with torchtriage.watch(on_anomaly="record", report=False, discover=True) as s:
        for stage in range(6):
            m = _Learner(4 if stage == 0 else 4 + 16)
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
            for i in range(16):  # two passes
                x, y = X[i % 8 * 32:(i % 8 + 1) * 32], Y[i % 8 * 32:(i % 8 + 1) * 32]
                with torch.no_grad():
                    lower, base = None, 0
                    for prev in learners:
                        lower, out = prev(x, lower)
                        base = base + out
                _, out = m(x, lower)
                loss = F.mse_loss(out, y - base)
                m.zero_grad()
                loss.backward()
                opt.step()
            learners.append(m)
            if stage > 0:
                opt = torch.optim.AdamW(m.parameters(), lr=5e-4)  # the newest learner only
                for i in range(8):
                    x, y = X[i * 32:(i + 1) * 32], Y[i * 32:(i + 1) * 32]
                    loss = F.mse_loss(ensemble(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    assert codes(s.report, *MOVES) == []
