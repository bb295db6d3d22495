"""Session 9: the lr schedule a run follows against the one its code declares (`_dynamics/_drift.py`,
`_dynamics/_decay.py`): a scheduler stepped again between optimizer steps, scheduler changes
undone by a manual lr write, a scheduler that restarts on resume, weight decay on 1-D tensors
only. Each bug is written the way users write it; the clean loops are the look-alikes that must
stay quiet (per-step and per-epoch schedules with matching horizons, warm restarts on purpose,
a warm-up that hands over, ReduceLROnPlateau, a correct resume, no-decay groups done right)."""

from __future__ import annotations

import math
import pathlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()
lrs = torch.optim.lr_scheduler
CODES = ("dynamics.scheduler_extra_steps", "dynamics.scheduler_overridden", "dynamics.scheduler_not_resumed",
         "dynamics.weight_decay_inverted", "dynamics.epoch_scheduler_per_batch", "dynamics.warmup_restarts")


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def batches(n: int = 6, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(8, 1, generator=g)
    out = []
    for _ in range(n):
        x = torch.randn(16, 8, generator=g)
        out.append((x, x @ w + 0.1 * torch.randn(16, 1, generator=g)))
    return out


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def step(model: nn.Module, opt: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor) -> None:
    loss = F.mse_loss(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()


def watched(model: nn.Module, opt: torch.optim.Optimizer, train, discover: bool = False) -> torchtriage.Report:
    with torchtriage.watch(model, opt, on_anomaly="record", report=False, discover=discover) as s:
        train()
    return s.report


def only(report: torchtriage.Report, code: str):
    found = report.filter(code=code)
    assert len(found) == 1, [(f.code, f.step, f.message) for f in report.findings]
    others = [f.code for f in report.findings if f.code in CODES and f.code != code]
    assert others == [], others
    return found[0]


def drift(report: torchtriage.Report) -> list[tuple[str, str]]:
    """The report's schedule-drift findings (code, message): [] on a correct program."""
    return [(f.code, f.message) for f in report.findings if f.code in CODES]


# ---------------------------------------------------------------------------- extra steps
@pytest.mark.filterwarnings("ignore:Detected call of")
def test_noam_lambda_stepped_per_batch_and_again_per_epoch():
    model, data = mlp(), batches()
    opt = torch.optim.Adam(model.parameters(), lr=1.0)
    sched = lrs.LambdaLR(opt, lambda s: 16 ** -.5 * min((s + 1) ** -.5, (s + 1) * 40 ** -1.5))

    def train_epoch():
        sched.step()  # <- extra per epoch
        for xb, yb in data:
            step(model, opt, xb, yb)
            sched.step()  # <- per batch

    def train():
        for _ in range(8):
            train_epoch()

    f = only(watched(model, opt, train), "dynamics.scheduler_extra_steps")
    assert (f.severity, f.op, f.line, f.step) == (Severity.WARNING, "LambdaLR", line("extra per epoch"), 6)
    assert f.message == (f"LambdaLR is stepped at every optimizer step (line {line('per batch')}) and again here "
                         "between two optimizer steps, 7 times: 56 scheduler steps for 48 optimizer steps, the "
                         "schedule runs 15% ahead")
    assert f.evidence["calls_between_optimizer_steps"] == 7 and f.evidence["last_epoch"] == 56
    assert f.evidence["harm"] == "the schedule runs 7 steps (15%) ahead of the optimizer"


def test_cosine_over_the_run_stepped_per_batch_and_again_after_each_epoch():
    model, data = mlp(), batches()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = lrs.CosineAnnealingLR(opt, T_max=5 * len(data))

    def train():
        for _ in range(5):
            for xb, yb in data:
                step(model, opt, xb, yb)
                sched.step()
            sched.step()  # <- also per epoch

    f = only(watched(model, opt, train), "dynamics.scheduler_extra_steps")
    assert (f.op, f.line, f.evidence["calls_between_optimizer_steps"]) == ("CosineAnnealingLR",
                                                                           line("also per epoch"), 5)
    assert f.evidence["optimizer_steps"] == 30 and f.evidence["scheduler_steps"] == 35


# ---------------------------------------------------------------------------- overridden
def test_warmup_writes_initial_lr_over_multisteplr_after_the_warmup():
    model, data = mlp(), batches(8)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0)
    sched = lrs.MultiStepLR(opt, milestones=[30, 60], gamma=0.1)
    warmup = 10

    def train():
        it = 0
        while it < 80:
            for xb, yb in data:
                it += 1
                step(model, opt, xb, yb)
                sched.step()
                scale = it / warmup if it < warmup else 1.0
                for g in opt.param_groups:
                    g["lr"] = g["initial_lr"] * scale  # <- warm-up writes initial_lr after it ends

    f = only(watched(model, opt, train), "dynamics.scheduler_overridden")
    assert (f.severity, f.op, f.step) == (Severity.WARNING, "MultiStepLR", 30)
    assert f.message == ("the learning rate MultiStepLR set was overwritten before the optimizer used it: 2 of its "
                         "changes were undone (first at step 30: it set 0.0002, the optimizer stepped with 0.002), "
                         "none applied since")
    assert f.evidence["changes_undone"] == 2 and f.evidence["lr_used_by_optimizer"] == "0.002"


def test_steplr_per_epoch_undone_by_a_reset_at_each_epoch_start():
    model, data = mlp(), batches(4)
    base = 0.05
    opt = torch.optim.SGD(model.parameters(), lr=base, momentum=0.9)
    sched = lrs.StepLR(opt, step_size=2, gamma=0.5)

    def train():
        for _ in range(8):
            for g in opt.param_groups:
                g["lr"] = base  # <- reset each epoch
            for xb, yb in data:
                step(model, opt, xb, yb)
            sched.step()

    f = only(watched(model, opt, train), "dynamics.scheduler_overridden")
    assert f.op == "StepLR" and f.evidence["changes_undone"] == 3
    assert (f.evidence["lr_set_by_scheduler"], f.evidence["lr_used_by_optimizer"]) == ("0.025", "0.05")


# ---------------------------------------------------------------------------- not resumed
def _resume(make_sched, per_epoch: bool, restore: bool, epochs: tuple[int, int] = (3, 6), n: int = 4):
    data = batches(n)
    state: dict = {}

    def run(model, opt, sched, start, stop):
        for _ in range(start, stop):
            for xb, yb in data:
                step(model, opt, xb, yb)
                if not per_epoch:
                    sched.step()  # <- per step
            if per_epoch:
                sched.step()  # <- per epoch

    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def train():
        sched = make_sched(opt)
        run(model, opt, sched, 0, epochs[0])
        state.update(model=model.state_dict(), opt=opt.state_dict(), sched=sched.state_dict())
        model2 = mlp(1)
        opt2 = torch.optim.Adam(model2.parameters(), lr=3e-3)
        sched2 = make_sched(opt2)
        model2.load_state_dict(state["model"])
        opt2.load_state_dict(state["opt"])
        if restore:
            sched2.load_state_dict(state["sched"])
        run(model2, opt2, sched2, epochs[0], epochs[1])

    return watched(model, opt, train, discover=True)  # the resumed optimizer is found as it steps


def test_steplr_per_epoch_not_restored_on_resume():
    f = only(_resume(lambda o: lrs.StepLR(o, step_size=4, gamma=0.1), True, False), "dynamics.scheduler_not_resumed")
    assert (f.severity, f.op, f.line) == (Severity.WARNING, "StepLR", line("per epoch"))
    assert f.message == ("StepLR restarted on resume: its optimizer's state had already counted 12 steps, but the "
                         "scheduler began at last_epoch 0 where its cadence (0.25 steps per optimizer step) puts it "
                         "at about 3")
    assert f.evidence["harm"] == "the schedule restarted 3 scheduler steps behind the optimizer it drives"


def test_lambda_warmup_per_step_not_restored_on_resume():
    def make(o):
        return lrs.LambdaLR(o, lambda s: min(1.0, (s + 1) / 5) * max(0.0, 1 - s / 40))
    f = only(_resume(make, False, False), "dynamics.scheduler_not_resumed")
    assert (f.op, f.line) == ("LambdaLR", line("per step"))
    assert (f.evidence["optimizer_state_steps_before_this_run"], f.evidence["expected_last_epoch"]) == (12, 12)


def test_onecycle_not_restored_on_resume():
    def make(o):
        return lrs.OneCycleLR(o, max_lr=1e-2, total_steps=40)
    f = only(_resume(make, False, False), "dynamics.scheduler_not_resumed")
    assert f.op == "OneCycleLR" and f.evidence["scheduler_last_epoch_at_first_step"] == 0


# ---------------------------------------------------------------------------- weight decay by rank
class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.dense = nn.Linear(16, 16)
        self.LayerNorm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.LayerNorm(F.gelu(self.dense(self.embed(ids)))).mean(1))


def _bert_groups(model: nn.Module, inverted: bool) -> list[dict]:
    no_decay = ["bias", "LayerNorm.weight"]
    decay, nodecay = [], []
    for n, p in model.named_parameters():
        if any(nd in n for nd in no_decay):
            (decay if inverted else nodecay).append(p)
        else:
            (nodecay if inverted else decay).append(p)
    return [{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}]


def _train_block(inverted: bool) -> torchtriage.Report:
    torch.manual_seed(0)
    model = Block()
    opt = torch.optim.AdamW(_bert_groups(model, inverted), lr=1e-3)
    ids, y = torch.randint(0, 32, (8, 5)), torch.randint(0, 2, (8,))

    def train():
        for _ in range(3):
            loss = F.cross_entropy(model(ids), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return watched(model, opt, train)


def test_no_decay_groups_inverted():
    f = only(_train_block(True), "dynamics.weight_decay_inverted")
    assert (f.severity, f.op, f.step) == (Severity.WARNING, "AdamW", 0)
    assert f.message == ("weight decay 0.1 lands only on 4 1-D tensors (50 elements: biases, norm scales) while all "
                         "3 weight matrices (800 elements, 94.1%) are in a weight_decay=0 group")
    assert f.parameter == "dense.bias, LayerNorm.weight, LayerNorm.bias"
    assert f.evidence["undecayed_examples"] == ["embed.weight", "dense.weight", "head.weight"]


def test_no_decay_groups_done_right_are_quiet():
    assert drift(_train_block(False)) == []
# ---------------------------------------------------------------------------- clean look-alikes
def _loop(make_sched, epochs: int = 6, per_epoch: bool = False, plateau: bool = False, n: int = 5,
          warmup: int = 0, lr: float = 0.05):
    model, data = mlp(), batches(n)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    sched = make_sched(opt)

    def train():
        it = 0
        for _ in range(epochs):
            for xb, yb in data:
                it += 1
                if it <= warmup:
                    for g in opt.param_groups:
                        g["lr"] = lr * it / warmup
                step(model, opt, xb, yb)
                if not per_epoch and it > warmup:
                    sched.step()
            if per_epoch:
                sched.step(1.0) if plateau else sched.step()

    return watched(model, opt, train)


@pytest.mark.parametrize("make, per_epoch", [
    (lambda o: lrs.OneCycleLR(o, max_lr=0.1, total_steps=30), False),
    (lambda o: lrs.CosineAnnealingLR(o, T_max=30), False),
    (lambda o: lrs.StepLR(o, step_size=2, gamma=0.5), True),
    (lambda o: lrs.MultiStepLR(o, milestones=[2, 4], gamma=0.1), True),
    (lambda o: lrs.CosineAnnealingLR(o, T_max=6), True),
    (lambda o: lrs.CosineAnnealingWarmRestarts(o, T_0=5), False),  # restarts on purpose, per batch
    (lambda o: lrs.LambdaLR(o, lambda s: min(1.0, (s + 1) / 5) * max(0.0, 1 - s / 30)), False),
    (lambda o: lrs.SequentialLR(o, [lrs.LinearLR(o, 0.1, total_iters=5), lrs.CosineAnnealingLR(o, 25)],
                                milestones=[5]), False),
])
def test_schedules_at_one_cadence_with_matching_horizons_are_quiet(make, per_epoch):
    assert drift(_loop(make, per_epoch=per_epoch)) == []
def test_reduce_on_plateau_per_epoch_is_quiet():
    assert drift(_loop(lambda o: lrs.ReduceLROnPlateau(o, patience=0), per_epoch=True, plateau=True)) == []
def test_manual_warmup_that_hands_over_to_the_scheduler_is_quiet():
    assert drift(_loop(lambda o: lrs.CosineAnnealingLR(o, T_max=22), warmup=8)) == []
def test_warmup_scaling_the_schedulers_value_then_leaving_it_is_quiet():
    model, data = mlp(), batches(5)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = lrs.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / 30)))  # per batch, from step 0

    def train():
        for it in range(1, 31):
            xb, yb = data[it % 5]
            step(model, opt, xb, yb)
            sched.step()
            if it < 12:
                for g in opt.param_groups:
                    g["lr"] = sched.get_last_lr()[0] * it / 12

    assert drift(watched(model, opt, train)) == []
def test_two_chainable_schedulers_on_one_optimizer_are_quiet():
    model, data = mlp(), batches(5)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    a, b = lrs.ExponentialLR(opt, gamma=0.99), lrs.StepLR(opt, step_size=4, gamma=0.5)

    def train():
        for _ in range(6):
            for xb, yb in data:
                step(model, opt, xb, yb)
                a.step()
                b.step()

    assert drift(watched(model, opt, train)) == []
@pytest.mark.parametrize("make, per_epoch", [
    (lambda o: lrs.StepLR(o, step_size=4, gamma=0.1), True),
    (lambda o: lrs.LambdaLR(o, lambda s: min(1.0, (s + 1) / 5) * max(0.0, 1 - s / 40)), False),
])
def test_resume_with_the_scheduler_restored_is_quiet(make, per_epoch):
    assert drift(_resume(make, per_epoch, True)) == []
def test_a_fresh_optimizer_and_scheduler_for_fine_tuning_are_quiet():
    data = batches(4)
    model = mlp()

    def train():
        for stage in range(2):
            opt = torch.optim.Adam(model.parameters(), lr=1e-3 / (stage + 1))
            sched = lrs.StepLR(opt, step_size=2, gamma=0.5)
            for _ in range(4):
                for xb, yb in data:
                    step(model, opt, xb, yb)
                sched.step()

    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        train()
    assert drift(s.report) == []
# ---------------------------------------------------------------------------- a periodic horizon in epochs
def _cosine_warmup(opt, warmup: int, horizon: int):
    def factor(s):
        if s < warmup:
            return (s + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (s - warmup) / (horizon - warmup)))
    return lrs.LambdaLR(opt, factor)


def _epochs_loop(horizon_of, epochs: int = 6, n: int = 40):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n * 8, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = _cosine_warmup(opt, 1, horizon_of(epochs, len(loader)))

    def train():
        for _ in range(epochs):
            for xb, yb in loader:
                step(model, opt, xb, yb)
                sched.step()  # <- per iteration

    return watched(model, opt, train)


def test_lambda_cosine_with_its_horizon_in_epochs_stepped_per_batch_wraps():
    f = only(_epochs_loop(lambda epochs, batches: epochs), "dynamics.epoch_scheduler_per_batch")
    assert (f.severity, f.op, f.line) == (Severity.WARNING, "LambdaLR", line("per iteration"))
    assert f.message == ("LambdaLR is stepped at every optimizer step (every batch): its lr fell to ~0 within 6 steps, "
                         "the run's 6 epochs, and climbed back to its peak 0.01 24 times")
    assert f.evidence["harm"] == "the lr fell to ~0 and climbed back to its peak 24 times"


def test_lambda_cosine_with_its_horizon_in_steps_is_quiet():
    assert drift(_epochs_loop(lambda epochs, batches: epochs * batches)) == []
def test_a_periodic_lambda_without_a_loader_wraps():
    model, data = mlp(), batches(5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = _cosine_warmup(opt, 1, 10)  # max_steps=max_epoch, stepped per iteration

    def train():
        for _ in range(10):
            for xb, yb in data:
                step(model, opt, xb, yb)
                sched.step()

    f = only(watched(model, opt, train), "dynamics.epoch_scheduler_per_batch")
    assert f.message == ("LambdaLR is stepped at every optimizer step (every batch): its lr fell to ~0 within 10 "
                         "steps and climbed back to its peak 0.01 2 times")


def test_warm_restarts_written_as_a_lambda_are_quiet():
    model, data = mlp(), batches(5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = lrs.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * (s % 10) / 10)))  # SGDR by hand

    def train():
        for _ in range(10):
            for xb, yb in data:
                step(model, opt, xb, yb)
                sched.step()

    assert drift(watched(model, opt, train)) == []
# ---------------------------------------------------------------------------- a warm-up that restarts
def _manual_warmup(global_step: bool):
    model, data = mlp(), batches(5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    warmup, iters, base, start = 75, 25, 3e-4, 1e-6

    def train():
        for epoch in range(5):
            for i in range(iters):
                total = epoch * iters + i
                cur = total if global_step else i  # <- warm-up step
                if total < warmup:
                    lr = start + (base - start) * cur / warmup
                else:
                    lr = base * 0.5 * (1 + math.cos(math.pi * (total - warmup) / (5 * iters - warmup)))
                for g in opt.param_groups:
                    g["lr"] = lr
                xb, yb = data[i % 5]
                step(model, opt, xb, yb)

    return watched(model, opt, train)


def test_warmup_from_the_step_within_the_epoch_restarts_every_epoch():
    f = only(_manual_warmup(False), "dynamics.warmup_restarts")
    assert (f.severity, f.step) == (Severity.WARNING, 25)
    assert f.message == ("the lr ramped up from 1e-06 to 9.668e-05 over 24 steps and dropped back to its start at step "
                         "25, 2 times (steps [25, 50]): the warm-up restarts instead of reaching its target")


def test_warmup_from_the_global_step_is_quiet():
    assert drift(_manual_warmup(True)) == []
def test_cosine_t_max_in_epochs_per_batch_stays_a_warning_while_the_loss_falls():
    model, data = mlp(), batches(10)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = lrs.CosineAnnealingLR(opt, 8)  # T_max = num_epochs

    def train():
        for _ in range(8):
            for xb, yb in data:
                step(model, opt, xb, yb)
                sched.step()  # <- per batch, T_max in epochs

    report = watched(model, opt, train)
    f = only(report, "dynamics.epoch_scheduler_per_batch")
    assert (f.severity, f.line, f.step) == (Severity.WARNING, line("per batch, T_max in epochs"), 8)
    assert f.evidence["harm"] == "the lr reached its minimum at step 8 and climbed back towards its initial value"
    assert "run_kept_learning" not in f.evidence  # not held: its harm is the lr it measured


@pytest.mark.parametrize("factor", [lambda s: 1.0, lambda s: 0.5])
def test_a_constant_schedule_restarted_on_resume_is_no_warning(factor):
    """A constant LambdaLR (a config's "constant" schedule) gives its optimizer the same lr at
    any position: restarting it on resume changes no lr the run uses."""
    report = _resume(lambda o: lrs.LambdaLR(o, factor), False, False)
    loud = [f for f in report.filter(code="dynamics.scheduler_not_resumed") if f.severity != Severity.INFO]
    assert loud == [], [(f.code, f.severity, f.evidence) for f in loud]
    infos = report.filter(code="dynamics.scheduler_not_resumed")
    assert [f.evidence.get("same_lr_at_both_positions") for f in infos] in ([], [True])


def test_a_warmup_that_ended_before_the_checkpoint_restarted_on_resume_warns():
    """A short linear warm-up, then flat: the resumed run should be past it, the restarted one
    warms up again (a lower lr for its first steps)."""
    f = only(_resume(lambda o: lrs.LambdaLR(o, lambda s: min(1.0, (s + 1) / 4)), False, False),
             "dynamics.scheduler_not_resumed")
    assert f.severity == Severity.WARNING and "same_lr_at_both_positions" not in f.evidence
