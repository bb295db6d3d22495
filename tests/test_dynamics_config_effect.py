"""Session 13: optimizer / scheduler configuration that the code's own structure says should take
effect and does not (`_dynamics/_groups.py`, `_periodic.py`, `_clipcfg.py`).

  * `dynamics.group_lrs_collapsed`: param groups declared with different lrs run at one lr on
    every step (a scheduler given a scalar, a loop writing one lr into every group);
  * `dynamics.empty_param_group`: a group that holds nothing, its distinct weight decay meant for
    tensors that all sit in the other group;
  * `dynamics.lr_decay_never_due`: a periodic lr change whose test never holds;
  * `dynamics.clip_configured_off`: clipping applied while the configuration set it to 0.

Each with programs written in different styles, and the look-alikes correct code writes."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()
lrs = torch.optim.lr_scheduler


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def net(bias: bool = True) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16, bias=bias), nn.LayerNorm(16, bias=bias, elementwise_affine=bias),
                         nn.ReLU(), nn.Linear(16, 1, bias=bias))


def batches(n: int = 40):
    g = torch.Generator().manual_seed(1)
    for _ in range(n):
        x = torch.randn(16, 8, generator=g)
        yield x, x.sum(1, keepdim=True)


def watch(model: nn.Module, train) -> torchtriage.Report:
    with torchtriage.watch([model], on_anomaly="record", report=False, discover=True) as s:
        train()
    return s.report


def codes(report: torchtriage.Report, code: str) -> list:
    return report.filter(code=code)


# ---------------------------------------------------------------- group lrs collapsed
GROUPS = "dynamics.group_lrs_collapsed"


def onecycle(per_group: bool, same: bool = False):
    m = net()

    def train() -> None:
        opt = torch.optim.AdamW([{"params": m[0].parameters(), "lr": 1e-3 if same else 1e-4},
                                 {"params": m[3].parameters(), "lr": 1e-3}], weight_decay=0.0)
        max_lr = [g["lr"] for g in opt.param_groups] if per_group else 1e-3
        sched = lrs.OneCycleLR(opt, max_lr, total_steps=40)  # <- onecycle
        for x, y in batches():
            loss = F.mse_loss(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return m, train


def test_onecycle_scalar_max_lr_collapses_the_groups():
    [f] = codes(watch(*onecycle(per_group=False)), GROUPS)
    assert (f.severity, f.line, f.module) == (Severity.WARNING, line("onecycle"), "OneCycleLR")
    ev = f.evidence
    assert ev["declared_lr_per_group"] == ["0.0001", "0.001"]
    assert (ev["steps_with_identical_lrs"], ev["optimizer_steps"]) == (40, 40)
    assert ev["peak_lr_per_group"] == ["0.001", "0.001"]
    assert f.message.startswith("AdamW's 2 param groups were declared with different learning rates (0.0001 / 0.001) "
                                "but the OneCycleLR scheduler overrides them: every group ran at the same lr on all "
                                "40 optimizer steps")


def test_onecycle_per_group_max_lr_and_one_declared_lr_are_quiet():
    assert not codes(watch(*onecycle(per_group=True)), GROUPS)
    assert not codes(watch(*onecycle(per_group=False, same=True)), GROUPS)


class CyclicTrainer:
    """A class trainer: backbone at a tenth of the head's rate, CyclicLR given scalars."""

    def __init__(self, scalar: bool) -> None:
        self.model, self.scalar = net(), scalar

    def configure(self) -> None:
        base, scalar = self.model[0], self.scalar
        self.opt = torch.optim.SGD([{"params": base.parameters(), "lr": 0.001},
                                    {"params": self.model[3].parameters(), "lr": 0.01}], momentum=0.9)
        lo = 0.001 if scalar else [0.0001, 0.001]
        hi = 0.01 if scalar else [0.001, 0.01]
        self.sched = lrs.CyclicLR(self.opt, base_lr=lo, max_lr=hi, step_size_up=10)  # <- cyclic

    def fit(self) -> None:
        self.configure()
        for x, y in batches():
            self.opt.zero_grad()
            F.mse_loss(self.model(x), y).backward()
            self.opt.step()
            self.sched.step()


def test_cyclic_scalar_base_lr_collapses_the_groups():
    t = CyclicTrainer(scalar=True)
    [f] = codes(watch(t.model, t.fit), GROUPS)
    assert (f.severity, f.line, f.evidence["scheduler"]) == (Severity.WARNING, line("cyclic"), "CyclicLR")
    t = CyclicTrainer(scalar=False)
    assert not codes(watch(t.model, t.fit), GROUPS)


def manual_warmup(scaled: bool):
    m = net()

    def train() -> None:
        opt = torch.optim.Adam([{"params": m[0].parameters(), "lr": 2e-4},  # <- manual
                                {"params": m[3].parameters(), "lr": 2e-3}])
        base = [g["lr"] for g in opt.param_groups]
        for step, (x, y) in enumerate(batches()):
            warm = min(1.0, (step + 1) / 10)
            for g, b in zip(opt.param_groups, base):
                g["lr"] = (b if scaled else 2e-3) * warm
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
    return m, train


def test_a_loop_writing_one_lr_into_every_group():
    [f] = codes(watch(*manual_warmup(scaled=False)), GROUPS)
    assert (f.severity, f.line, f.evidence["scheduler"]) == (Severity.WARNING, line("manual"), None)
    assert "ran at the same lr on all 40 optimizer steps" in f.message
    assert not codes(watch(*manual_warmup(scaled=True)), GROUPS)


def test_warmup_from_zero_with_distinct_groups_is_quiet():
    m = net()

    def train() -> None:
        opt = torch.optim.AdamW([{"params": m[0].parameters(), "lr": 1e-4}, {"params": m[3].parameters()}], lr=1e-3)
        sched = lrs.LambdaLR(opt, lambda s: min(1.0, s / 10))
        for x, y in batches():
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
            sched.step()
    assert not codes(watch(m, train), GROUPS)


# ---------------------------------------------------------------- empty param group
EMPTY = "dynamics.empty_param_group"


def bert_optimizer(model: nn.Module, substring: bool) -> torch.optim.Optimizer:
    no_decay = ["bias", "LayerNorm.weight", "norm.weight"]
    named = list(model.named_parameters())
    test = (lambda n: any(nd in n for nd in no_decay)) if substring else (lambda n: n in no_decay)
    groups = [{"params": [p for n, p in named if not test(n)], "weight_decay": 0.01},
              {"params": [p for n, p in named if test(n)], "weight_decay": 0.0}]  # <- nodecay
    return torch.optim.AdamW(groups, lr=1e-3)


def fit(model: nn.Module, opt: torch.optim.Optimizer, n: int = 20) -> None:
    for x, y in batches(n):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()


def test_no_decay_names_that_match_nothing():
    m = net()
    report = watch(m, lambda: fit(m, bert_optimizer(m, substring=False)))
    [f] = codes(report, EMPTY)
    assert (f.severity, f.line) == (Severity.WARNING, line("nodecay"))
    ev = f.evidence
    assert (ev["empty_group"], ev["tensors_per_group"], ev["meant_for_tensors"], ev["meant_for_elements"]) == (
        1, [6, 0], 4, 16 + 16 + 16 + 1)
    assert ev["meant_for_examples"][:2] == ["0.bias", "1.weight"]
    assert f.message.startswith("param group 1 of AdamW (weight_decay=0.0) is empty (6 / 0 tensors per group): the "
                                "name test that was to fill it matched no parameter, so the 4 1-D tensor(s)")


def test_substring_no_decay_is_quiet():
    m = net()
    report = watch(m, lambda: fit(m, bert_optimizer(m, substring=True)))
    assert not codes(report, EMPTY)


class DecayByModule:
    """Groups built from modules: the decay group takes `nn.Linear` weights of a model whose
    layers are a custom class, so it is empty and nothing is decayed."""

    class Dense(nn.Module):
        def __init__(self, i: int, o: int) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(o, i) * 0.1)
            self.b = nn.Parameter(torch.zeros(o))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.w.t() + self.b

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.Sequential(self.Dense(8, 16), nn.ReLU(), self.Dense(16, 1))

    def optimizer(self) -> torch.optim.Optimizer:
        decay = [m.weight for m in self.model.modules() if isinstance(m, nn.Linear)]
        rest = [p for p in self.model.parameters() if all(p is not d for d in decay)]
        return torch.optim.SGD([
            {"params": decay, "weight_decay": 5e-4},  # <- decaygroup
            {"params": rest, "weight_decay": 0.0}], lr=0.01)


def test_an_empty_decay_group_leaves_every_matrix_undecayed():
    t = DecayByModule()
    [f] = codes(watch(t.model, lambda: fit(t.model, t.optimizer())), EMPTY)
    assert (f.severity, f.line, f.evidence["meant_for_tensors"]) == (Severity.WARNING, line("decaygroup"), 2)
    assert f.evidence["empty_group_settings"] == "weight_decay=0.0005"


def test_custom_decay_key_and_a_model_without_biases():
    m = net()
    no_decay = ("bias", "gamma")
    groups = [{"params": [p for n, p in m.named_parameters() if n not in no_decay], "weight_decay_rate": 0.01},
              {"params": [p for n, p in m.named_parameters() if n in no_decay], "weight_decay_rate": 0.0}]
    [f] = codes(watch(m, lambda: fit(m, torch.optim.SGD(groups, lr=0.01))), EMPTY)
    assert f.severity == Severity.WARNING and "weight_decay_rate=0.01" in f.message
    # no bias and no norm scale: nothing was meant for the empty group, an info at most
    m = net(bias=False)
    assert [f.severity for f in codes(watch(m, lambda: fit(m, bert_optimizer(m, substring=False))), EMPTY)] in (
        [], [Severity.INFO])


def test_an_empty_group_of_a_frozen_backbone_is_an_info():
    m = net()
    for p in m[0].parameters():
        p.requires_grad_(False)
    groups = [{"params": [p for p in m[0].parameters() if p.requires_grad], "lr": 1e-5},
              {"params": [p for p in m[1:].parameters() if p.requires_grad], "lr": 1e-3}]
    found = codes(watch(m, lambda: fit(m, torch.optim.Adam(groups))), EMPTY)
    assert [f.severity for f in found] == [Severity.INFO]


# ---------------------------------------------------------------- periodic lr change never due
NEVER = "dynamics.lr_decay_never_due"


def step_decay(parenthesized: bool, epochs: int = 6, decay_step: int = 45):
    m = net()

    def train() -> None:
        lr = 0.01
        opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
        data = list(batches(20))
        for epo in range(epochs):
            for i, (x, y) in enumerate(data):
                opt.zero_grad()
                F.mse_loss(m(x), y).backward()
                opt.step()
                if parenthesized and (i + epo * len(data)) % decay_step == 0 and i != 0:
                    lr *= 0.1
                    for g in opt.param_groups:
                        g["lr"] = lr
                if not parenthesized and i + epo * len(data) % decay_step == 0 and i != 0:  # <- picanet
                    lr *= 0.1
                    for g in opt.param_groups:
                        g["lr"] = lr
    return m, train


def test_step_decay_whose_precedence_never_fires():
    [f] = codes(watch(*step_decay(parenthesized=False)), NEVER)
    assert (f.severity, f.line) == (Severity.WARNING, line("picanet"))
    ev = f.evidence
    assert (ev["dividend"], ev["dividend_range"], ev["divisor"], ev["multiples_passed"]) == (
        "epo * len(data)", ["0", "100"], "45", 2)
    assert not codes(watch(*step_decay(parenthesized=True)), NEVER)


def precedence(fixed: bool, total: int = 120, every: int = 30):
    m = net()

    def train() -> None:
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        step = 0
        data = list(batches(10))
        while step < total:
            for x, y in data:
                opt.zero_grad()
                F.mse_loss(m(x), y).backward()
                opt.step()
                step += 1
                if fixed and step % every == 0:
                    for g in opt.param_groups:
                        g["lr"] *= 0.5
                if not fixed and step + 1 % every == 0:  # <- never
                    for g in opt.param_groups:
                        g["lr"] *= 0.5
    return m, train


def test_step_plus_one_modulo_never_holds():
    [f] = codes(watch(*precedence(fixed=False)), NEVER)
    assert (f.severity, f.line) == (Severity.WARNING, line("never"))
    ev = f.evidence
    assert (ev["dividend"], ev["divisor"], ev["multiples_passed"], ev["test_held_past_the_start"]) == (
        "step + 1 % every", "30", 4, 0)
    assert ev["lr_constant"] == ["0.001"]
    assert "the learning rate never changed" in f.message


def test_fixed_and_short_runs_are_quiet():
    assert not codes(watch(*precedence(fixed=True)), NEVER)
    assert not codes(watch(*precedence(fixed=False, total=40, every=30)), NEVER)  # not due twice


class ResidueTrainer:
    """A class trainer whose residue test compares with the divisor itself: never true."""

    def __init__(self, wrong: bool) -> None:
        self.model = net()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.it, self.decay_every = 0, 8
        self.residue = self.decay_every if wrong else 0

    def adjust_learning_rate(self) -> None:
        for g in self.opt.param_groups:
            g["lr"] *= 0.5

    def train_epoch(self) -> None:
        for x, y in batches(10):
            self.opt.zero_grad()
            F.mse_loss(self.model(x), y).backward()
            self.opt.step()
            self.it += 1
            if self.it % self.decay_every == self.residue:  # <- residue
                self.adjust_learning_rate()

    def fit(self) -> None:
        for _ in range(4):
            self.train_epoch()


def test_a_residue_compared_with_its_divisor():
    t = ResidueTrainer(wrong=True)
    [f] = codes(watch(t.model, t.fit), NEVER)
    assert (f.line, f.evidence["multiples_passed"]) == (line("residue"), 4)
    t = ResidueTrainer(wrong=False)
    assert not codes(watch(t.model, t.fit), NEVER)


def test_a_never_true_periodic_branch_that_does_not_touch_the_lr_is_quiet():
    m = net()

    def train() -> None:
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        for it, (x, y) in enumerate(batches(60)):
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
            if it + 1 % 10 == 0:
                print("checkpoint")
    assert not codes(watch(m, train), NEVER)


def test_periodic_decay_with_a_scheduler_changing_the_lr_is_quiet():
    m = net()

    def train() -> None:
        lr = 0.01
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        sched = lrs.StepLR(opt, 10, 0.5)
        for it, (x, y) in enumerate(batches(60)):
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
            sched.step()
            if it + 1 % 20 == 0:
                lr *= 0.1
    assert not codes(watch(m, train), NEVER)


def milestones(text: bool, epochs: int = 6):
    m = net()
    steps = "2,4" if text else [2, 4]

    def train() -> None:
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        decay_epochs = steps.split(",") if text else steps
        for epoch in range(epochs):
            if epoch in decay_epochs:  # <- milestones
                for g in opt.param_groups:
                    g["lr"] *= 0.1
            fit(m, opt, 5)
    return m, train


def test_milestones_read_as_text_never_match_the_epoch():
    [f] = codes(watch(*milestones(text=True)), NEVER)
    assert (f.severity, f.line) == (Severity.WARNING, line("milestones"))
    assert (f.evidence["dividend"], f.evidence["targets_passed"], f.evidence["multiples_passed"]) == (
        "epoch", "'2', '4'", 2)
    assert "passing '2', '4', the value(s) the test names" in f.message
    assert not codes(watch(*milestones(text=False)), NEVER)
    assert not codes(watch(*milestones(text=True, epochs=2)), NEVER)  # the milestones lie past the run


def test_an_lr_reset_at_step_zero_and_a_last_epoch_branch_are_quiet():
    m = net()

    def train() -> None:
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for epoch in range(4):
            for it, (x, y) in enumerate(batches(5)):
                if it == 0 and epoch == 0:
                    for g in opt.param_groups:
                        g["lr"] = 0.05
                if epoch == 3:
                    for g in opt.param_groups:
                        g["lr"] = 0.01
                opt.zero_grad()
                F.mse_loss(m(x), y).backward()
                opt.step()
    assert not codes(watch(m, train), NEVER)


# ---------------------------------------------------------------- clipping configured off
CLIP = "dynamics.clip_configured_off"


def sum_loss_fit(model: nn.Module, opt: torch.optim.Optimizer, max_norm: float | None, n: int = 30) -> None:
    for x, y in batches(n):
        opt.zero_grad()
        F.mse_loss(model(x) * 10, y * 10, reduction="sum").backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # <- clipcall
        opt.step()


def test_max_norm_zero_turned_into_a_default_by_a_truth_test():
    m = net()
    cfg = {"optim": {"lr": 1e-4, "clip_grad": {"max_norm": 0}}}
    clip = cfg["optim"]["clip_grad"]
    max_norm = clip.get("max_norm") or 1.0  # <- falsy
    [f] = codes(watch(m, lambda: sum_loss_fit(m, torch.optim.SGD(m.parameters(), lr=1e-4), max_norm)), CLIP)
    assert (f.severity, f.line, f.category.value) == (Severity.WARNING, line("falsy"), "gradient")
    ev = f.evidence
    assert ev["configured"] == "cfg['optim']['clip_grad']['max_norm'] = 0"
    assert (ev["calls_clipped"], ev["calls_read"], ev["max_norm_used"]) == (30, 30, "1")
    assert ev["clip_call"].endswith(f":{line('clipcall')}")
    assert f.message.startswith("the configuration turns gradient clipping off "
                                "(cfg['optim']['clip_grad']['max_norm'] = 0), but clip_grad_norm_ ran with "
                                "max_norm=1: it clipped the gradient on 30/30 steps")


def test_argparse_clip_zero_with_an_or_default():
    m = net()
    args = argparse.Namespace(lr=1e-4, clip=0.0, epochs=1)
    [f] = codes(watch(m, lambda: sum_loss_fit(m, torch.optim.SGD(m.parameters(), lr=args.lr), args.clip or 0.5)), CLIP)
    assert f.severity == Severity.WARNING and f.evidence["configured"] == "args.clip = 0.0"


@dataclasses.dataclass
class TrainConfig:
    lr: float = 1e-4
    grad_clip_norm: float = 0.0


class ConfigTrainer:
    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg, self.model = cfg, net()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr)

    def fit(self) -> None:
        max_norm = self.cfg.grad_clip_norm if self.cfg.grad_clip_norm else 2.0  # <- ifexp
        sum_loss_fit(self.model, self.opt, max_norm)


def test_dataclass_config_clip_zero_replaced_in_a_trainer():
    t = ConfigTrainer(TrainConfig())
    [f] = codes(watch(t.model, t.fit), CLIP)
    assert (f.severity, f.line) == (Severity.WARNING, line("ifexp"))
    assert f.evidence["configured"] == "self.cfg.grad_clip_norm = 0.0"


def test_clipping_as_configured_is_quiet():
    m = net()
    cfg = {"clip_grad": {"max_norm": 1.0}}
    assert not codes(watch(m, lambda: sum_loss_fit(m, torch.optim.SGD(m.parameters(), lr=1e-4),
                                                   cfg["clip_grad"]["max_norm"])), CLIP)
    m = net()  # a deliberate small norm, no configuration: clipped every step, quiet
    assert not codes(watch(m, lambda: sum_loss_fit(m, torch.optim.SGD(m.parameters(), lr=1e-4), 0.1)), CLIP)


def test_clipping_configured_off_and_honoured_is_quiet():
    m = net()
    off = {"max_grad_norm": 0}  # off, and honoured: no clip call
    assert not codes(watch(m, lambda: sum_loss_fit(m, torch.optim.SGD(m.parameters(), lr=1e-4),
                                                   off["max_grad_norm"] or None)), CLIP)


def test_clip_that_seldom_bites_is_an_info():
    m = net()
    settings = argparse.Namespace(clip=0)
    found = codes(watch(m, lambda: sum_loss_fit(m, torch.optim.SGD(m.parameters(), lr=1e-5), settings.clip or 1e6)),
                  CLIP)
    assert [f.severity for f in found] == [Severity.INFO]
