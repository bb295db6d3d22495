"""Session 10: a scheduler's decay lost when the optimizer is rebuilt (`_dynamics/_drift.py`,
`dynamics.scheduler_decay_lost`). The bug: a second training phase (freeze a teacher, unfreeze a
backbone) recreates the optimizer at the base lr and a fresh StepLR at the epoch the old StepLR
had just decayed. The look-alikes stay quiet: the rebuilt optimizer at the decayed lr, two
optimizers of a GAN with their own schedules, a new phase after a cosine that ran its course."""

from __future__ import annotations

import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()
lrs = torch.optim.lr_scheduler
CODE = "dynamics.scheduler_decay_lost"


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


class Trainer:
    def __init__(self, carry_lr: bool, make_sched=None, epochs: int = 6, switch: int = 3) -> None:
        torch.manual_seed(0)
        self.teacher, self.student = nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        self.carry_lr, self.epochs, self.switch = carry_lr, epochs, switch
        self.make_sched = make_sched or (lambda opt: lrs.StepLR(opt, switch, 0.1))
        self.params = list(self.teacher.parameters()) + list(self.student.parameters())
        self.optimizer = torch.optim.Adam(self.params, 1e-3)
        self.scheduler = self.make_sched(self.optimizer)
        g = torch.Generator().manual_seed(1)
        self.data = [(x := torch.randn(16, 8, generator=g), x.sum(1, keepdim=True)) for _ in range(4)]

    def freeze_teacher(self) -> None:
        lr = self.scheduler.get_last_lr()[0] if self.carry_lr else 1e-3
        self.optimizer = torch.optim.Adam(self.student.parameters(), lr)  # <- rebuilt
        self.scheduler = self.make_sched(self.optimizer)

    def train(self) -> None:
        for epoch in range(self.epochs):
            if epoch == self.switch:
                self.freeze_teacher()
            for x, y in self.data:
                loss = F.mse_loss(self.student(self.teacher(x)), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            self.scheduler.step()


def run(trainer: Trainer) -> torchtriage.Report:
    with torchtriage.watch([trainer.teacher, trainer.student], on_anomaly="record", report=False,
                           discover=True) as s:
        trainer.train()
    return s.report


def lost(report: torchtriage.Report) -> list[tuple[str, str]]:
    return [(f.code, f.message) for f in report.findings if f.code == CODE]


def test_optimizer_rebuilt_at_the_base_lr_when_the_steplr_had_just_decayed():
    trainer = Trainer(carry_lr=False)
    [f] = run(trainer).filter(code=CODE)
    assert (f.severity, f.line, f.step) == (Severity.WARNING, line("rebuilt"), 12)
    ev = f.evidence
    assert (ev["lr_before_its_last_step"], ev["lr_it_set"], ev["new_optimizer_lr"]) == ("0.001", "0.0001", "0.001")
    assert (ev["scheduler_steps"], ev["new_optimizer_steps"]) == (3, 12)
    assert f.message == ("StepLR decayed the lr from 0.001 to 0.0001, but its optimizer was replaced before any "
                         "step used it: the new Adam over the same parameters started at 0.001, the lr from before "
                         "the decay (10x the scheduled one), and ran 12 steps; the decay was reset and never applied")


def test_optimizer_rebuilt_at_the_decayed_lr_is_quiet():
    assert lost(run(Trainer(carry_lr=True))) == []


def test_a_new_phase_after_a_cosine_that_ran_its_course_is_quiet():
    # the old schedule's last change (to eta_min) is not from the lr the new phase starts at
    assert lost(run(Trainer(carry_lr=False, make_sched=lambda opt: lrs.CosineAnnealingLR(opt, T_max=3)))) == []


def test_two_optimizers_of_a_gan_with_their_own_schedules_are_quiet():
    torch.manual_seed(0)
    G, D = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8)), nn.Sequential(nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(G.parameters(), 1e-3), torch.optim.Adam(D.parameters(), 1e-3)
    with torchtriage.watch([G, D], [opt_g, opt_d], on_anomaly="record", report=False) as s:
        sched_d = lrs.StepLR(opt_d, 2, 0.1)
        for epoch in range(4):
            if epoch == 2:  # the generator's optimizer is started late, at the base lr
                sched_g = lrs.StepLR(opt_g, 2, 0.1)
            for _ in range(3):
                real, z = torch.randn(16, 8), torch.randn(16, 4)
                if epoch >= 2:  # (the generator steps first: D's decay is still pending at G's first step)
                    opt_g.zero_grad()
                    F.softplus(-D(G(z))).mean().backward()
                    opt_g.step()
                opt_d.zero_grad()
                (F.softplus(-D(real)).mean() + F.softplus(D(G(z).detach())).mean()).backward()
                opt_d.step()
            sched_d.step()
            if epoch >= 2:
                sched_g.step()
    assert lost(s.report) == []


def test_a_second_optimizer_joining_while_the_first_keeps_stepping_is_quiet():
    # the head's optimizer keeps training after the backbone's optimizer starts at its base lr
    torch.manual_seed(0)
    backbone, head = nn.Linear(8, 16), nn.Linear(16, 1)
    opt_head = torch.optim.Adam(list(head.parameters()), 1e-3)
    with torchtriage.watch([backbone, head], on_anomaly="record", report=False, discover=True) as s:
        sched_head = lrs.StepLR(opt_head, 2, 0.1)
        opt_all = None
        for epoch in range(5):
            if epoch == 2:
                opt_all = torch.optim.Adam(list(backbone.parameters()) + list(head.parameters()), 1e-3)
            for _ in range(3):
                x = torch.randn(16, 8)
                loss = F.mse_loss(head(torch.relu(backbone(x))), x.sum(1, keepdim=True))
                opt_head.zero_grad()
                if opt_all is not None:
                    opt_all.zero_grad()
                loss.backward()
                if opt_all is not None:
                    opt_all.step()
                opt_head.step()
            sched_head.step()
    assert lost(s.report) == []
