"""Quiet on correct code: realistic, correct training loops under the default checks produce no
error and no warning; the only infos are the intended ones. Also: torchtriage never changes the
numbers (losses and parameters bitwise identical over 20 steps with and without it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from conftest import run_cli
from torchtriage import Severity
from zoo import clean as z


def _watched(name):
    models, optimizers, train = z.LOOPS[name]()
    with torchtriage.watch(models, optimizers, on_anomaly="record", report=False) as s:
        train()
    assert s.steps_seen >= 2, "the loop did not run its steps"
    return s.report


@pytest.mark.filterwarnings("error::torchtriage.TriageInternalWarning")  # our own bug is an error here
@pytest.mark.parametrize("name", sorted(z.LOOPS))
def test_correct_loop_is_quiet(name):
    report = _watched(name)
    loud = [(f.severity.value, f.code, f.module, f.message) for f in report if f.severity is not Severity.INFO]
    assert not loud, str(report)
    infos = sorted(f.code for f in report if f.severity is Severity.INFO)
    assert infos == z.INFOS.get(name, []), str(report)


def test_frozen_backbone_info_names_the_backbone():
    f = _watched("frozen_backbone").findings[0]
    assert (f.code, f.module, f.evidence["parameters"], f.evidence["values"]) == ("gradient.frozen", "backbone", 4, 416)


def test_zoo_covers_the_required_patterns():
    required = {"mlp_regression", "classifier_smoothing_weights", "lm_bool_mask", "lm_float_mask",
                "cnn_batchnorm_eval", "autocast_bf16", "autocast_bf16_scaler", "grad_accumulation",
                "clip_and_warmup", "frozen_backbone", "ema_teacher", "gan_dcgan", "actor_critic",
                "distillation", "bce_multilabel", "seq2seq_padding_idx", "lm_weight_tying",
                "module_called_twice", "lbfgs_closure", "activation_checkpointing",
                "dataloader_with_validation", "contrastive_infonce", "masked_mse", "dict_output"}
    assert required <= set(z.LOOPS)


# ------------------------------------------------------------------------------ through the CLI
CLI_SCRIPT = """\
import sys
sys.path.insert(0, {tests!r})
from zoo.clean import LOOPS
models, optimizers, train = LOOPS[{name!r}]()
train()
print("trained")
"""


@pytest.mark.parametrize("name", ["gan_dcgan", "lm_float_mask", "lstm_packed_sequences"])
def test_correct_loop_through_run_is_quiet(tmp_path, name):
    script = tmp_path / "train.py"
    script.write_text(CLI_SCRIPT.format(tests=str(Path(__file__).parent), name=name), encoding="utf-8")
    out = tmp_path / "report.json"
    p = run_cli("run", "--json", str(out), str(script), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "trained" in p.stdout
    assert "No finding" in p.stderr, p.stderr
    assert "TriageInternalWarning" not in p.stderr and "internal error" not in p.stderr, p.stderr
    assert json.loads(out.read_text(encoding="utf-8"))["findings"] == []


# ------------------------------------------------------------------------------ numerics untouched
def _lm_run(steps=20):
    torch.manual_seed(1)
    vocab, T = 64, 16
    model = z.TinyLM(vocab, d=32, layers=2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
    data = torch.randint(0, vocab, (steps, 4, T + 1))
    losses = []

    def train():
        for i in range(steps):
            ids = data[i]
            logits = model(ids[:, :-1], mask=mask)
            loss = F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.detach())
    return model, opt, train, losses


def _cnn_run(steps=20):
    torch.manual_seed(1)
    model = z.SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(steps, 8, 3, 16, 16), torch.randint(0, 4, (steps, 8))
    losses = []

    def train():
        for i in range(steps):
            model.train()
            opt.zero_grad()
            loss = F.cross_entropy(model(x[i]), y[i])
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            if i % 5 == 4:
                model.eval()
                with torch.no_grad():
                    model(x[0])
    return model, opt, train, losses


@pytest.mark.parametrize("make", [_lm_run, _cnn_run], ids=["transformer_lm_adamw", "cnn_sgd"])
def test_numerics_bitwise_identical_over_20_steps(make):
    model_a, _, train_a, losses_a = make()
    train_a()
    rng_a = torch.get_rng_state()
    model_b, opt_b, train_b, losses_b = make()
    with torchtriage.watch(model_b, opt_b, on_anomaly="record", report=False) as s:
        train_b()
    rng_b = torch.get_rng_state()
    assert s.report.ok, str(s.report)
    assert len(losses_a) == len(losses_b) == 20
    for i, (a, b) in enumerate(zip(losses_a, losses_b)):
        assert torch.equal(a, b), f"loss differs at step {i}: {a.item()!r} vs {b.item()!r}"
    for (name, pa), pb in zip(model_a.state_dict().items(), model_b.state_dict().values()):
        assert torch.equal(pa, pb), f"{name} differs"
    assert torch.equal(rng_a, rng_b), "torchtriage consumed random numbers"

