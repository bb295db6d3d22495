"""A loss term read out with .item() and added back as a number reaches nothing (session 10)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import torchtriage
from _lines import marked
from torchtriage import Severity

HERE = str(Path(__file__))


line_of = marked(Path(HERE))


def _train(combine, steps: int = 5):
    torch.manual_seed(0)
    enc = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    disc = nn.Linear(8, 1)
    for p in disc.parameters():
        p.requires_grad = False  # the discriminator is held fixed in the encoder's update
    opt = torch.optim.Adam(enc.parameters(), lr=1e-3)
    with torchtriage.watch([enc, disc], optimizer=opt, on_anomaly="record", report=False) as s:
        for _ in range(steps):
            x = torch.randn(16, 8)
            z = enc(x)
            rec = F.mse_loss(z, x)
            adv = F.binary_cross_entropy_with_logits(disc(z), torch.ones(16, 1))
            loss = combine(rec, adv)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return [f for f in s.report if f.severity is not Severity.INFO]


def _item_added(rec, adv):
    adv = adv.detach().item()  # ITEM
    return rec + adv


def test_an_adversarial_term_added_as_a_number_is_named():
    [f] = [f for f in _train(_item_added) if f.code == "gradient.term_detached"]
    assert f.severity is Severity.WARNING and f.line == line_of("ITEM")
    ev = f.evidence
    assert ev["reaches_models"] == "no trainable parameter" and ev["requires_grad"] is False
    assert ev["computed_from"] == ["disc", "enc"] and ev["stepped_without_it"] == ["enc"]
    assert ev["cut_at"].endswith(f"test_ledger_item_term.py:{line_of('ITEM')} (item)")
    assert f.message.startswith("the loss term item is computed from enc's output but reaches no trainable "
                                "parameter")


def test_the_term_kept_as_a_tensor_is_quiet():
    assert _train(lambda rec, adv: rec + adv) == []


def test_a_number_read_for_logging_only_is_quiet():
    log = []

    def logged(rec, adv):
        log.append(adv.detach().item())
        return rec + adv

    assert _train(logged) == []


def test_a_number_used_as_a_coefficient_is_quiet():
    # an adaptive weight read out of the losses scales a term: not a term of its own
    assert _train(lambda rec, adv: rec + (rec.item() / max(adv.item(), 1e-8)) * adv) == []
    assert _train(lambda rec, adv: rec.add(adv, alpha=rec.item())) == []
