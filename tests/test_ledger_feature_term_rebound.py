"""Session 19: a GAN feature-matching term detached as a whole (`|D(fake) - D(real)|.detach()`)
reaches no parameter, though the generator's output it was computed from was rebound before the
discriminator saw it (`fake = G(z); fake = fake[..., 2:]`, G returning a view): the view G
returned is dead by the generator's step (the slice keeps only the base alive), so the ledger
resolves each event's model calls when the step closes (`_ledger_step/_terms.py`, `upstream`).
The fixed loss detaches only the real side: quiet."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import line_in
from torchtriage import Severity


class Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(14, 32), nn.Linear(32, 32)])
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        feats = []
        for b in self.blocks:
            x = F.leaky_relu(b(x), 0.2)
            feats.append(x)
        return feats + [self.out(x)]


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))

    def forward(self, z):
        return self.net(z.unsqueeze(1)).squeeze(1)  # (a view: the slice below is a view of its base)


class FeatureMatching(nn.Module):
    def __init__(self, detach_all: bool) -> None:
        super().__init__()
        self.detach_all = detach_all

    def forward(self, real, fake):
        loss = torch.tensor(0.0)
        for r, f in zip(real[:-1], fake[:-1]):
            if self.detach_all:
                loss += torch.abs(f - r).detach().mean()  # <- fm-term
            else:
                loss += torch.abs(f - r.detach()).mean()
        return loss


def train(detach_all: bool, steps: int = 6):
    torch.manual_seed(0)
    gen = Generator()
    critic = Critic()
    fm = FeatureMatching(detach_all)
    opt_g = torch.optim.AdamW(gen.parameters(), lr=1e-3, betas=(0.5, 0.9))
    opt_d = torch.optim.AdamW(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
    g = torch.Generator().manual_seed(1)
    with torchtriage.watch([gen, critic], [opt_g, opt_d], on_anomaly="record", report=False) as s:
        for _ in range(steps):
            real = torch.randn(32, 16, generator=g)[..., 2:]
            fake = gen(torch.randn(32, 8, generator=g))
            fake = fake[..., 2:]  # (the generator's first outputs are warm-up: dropped)
            opt_d.zero_grad()
            d_real = critic(real)
            d_loss = F.relu(1 - d_real[-1]).mean() + F.relu(1 + critic(fake.detach())[-1]).mean()
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            d_fake = critic(fake)
            adv = F.relu(1 - d_fake[-1]).mean()
            loss = adv + 100 * fm(d_real, d_fake) + F.l1_loss(fake, real)
            loss.backward()
            opt_g.step()
    return s.report


def test_feature_term_detached_as_a_whole_is_named():
    [f] = [f for f in train(True) if f.code == "gradient.term_detached"]
    assert f.severity is Severity.WARNING
    assert f.evidence["stepped_without_it"] == ["gen"]
    assert "gen" in f.evidence["computed_from"]
    assert f.evidence["cut_at"].endswith(f":{line_in(__file__, 'fm-term')} (detach)")


def test_feature_term_detaching_only_the_real_side_is_quiet():
    assert not [f for f in train(False) if f.severity is not Severity.INFO]
