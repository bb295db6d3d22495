"""Session 15: a scheduler never stepped in a loop without a DataLoader (the user's loops tell the
steps due), optimizer steps at lr 0 before a warm-up's first positive lr, and a name-based module
freeze that misses a bare parameter its own test selects. Each with programs written several
ways, and the look-alikes a correct program writes."""

from __future__ import annotations

import functools
import pathlib
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Category, Severity

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def mlp(d_in: int = 6, d_out: int = 1) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d_in, 16), nn.Tanh(), nn.Linear(16, d_out))


def batches(n: int, d_in: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = torch.randn(8, d_in, generator=g)
        yield x, x.sum(1, keepdim=True)


def codes(report: torchtriage.Report, code: str) -> list:
    return report.filter(code=code)


NEVER = "dynamics.scheduler_never_stepped"
ZERO = "dynamics.warmup_steps_at_lr_zero"
BARE = "gradient.freeze_missed_bare_parameter"


# ---------------------------------------------------------------- never stepped, no DataLoader
def test_per_step_lambda_never_stepped_in_a_single_loop_over_a_batch_source():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 1.0 if it < 20 else 0.5)  # <- lambda A
        source = batches(40)
        for _it in range(40):
            x, y = next(source)
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    assert sched.last_epoch == 0
    [f] = codes(s.report, NEVER)
    assert (f.severity, f.line, f.op, f.category) == (Severity.WARNING, line("lambda A"), "LambdaLR", Category.SILENT)
    ev = f.evidence
    assert (ev["loop_iterations"], ev["optimizer_steps"], ev["scheduler_steps_to_first_change"],
            ev["lr_whole_run"], ev["lr_after_first_change"], ev["lr_scheduled_at_last_step"]) == \
        (40, 40, 20, ["0.001"], ["0.0005"], ["0.0005"])
    assert "never stepped" in f.message and "40 optimizer steps" in f.message


def _epoch_trainer(model, opt, epochs, per_epoch, sched_step=None):
    for epoch in range(epochs):
        for x, y in batches(per_epoch, seed=epoch):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
        if sched_step is not None:
            sched_step()


def test_epoch_scheduler_never_stepped_in_a_function_trainer_counts_epochs_not_steps():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.8)  # <- exp B
        _epoch_trainer(model, opt, epochs=4, per_epoch=5)
    [f] = codes(s.report, NEVER)
    assert (f.line, f.evidence["loop_iterations"], f.evidence["optimizer_steps"],
            f.evidence["scheduler_steps_to_first_change"]) == (line("exp B"), 4, 20, 1)
    assert "4 iterations of the training loop" in f.message


class CosineTrainer:
    def __init__(self, model, steps):
        self.model = model
        self.opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        self.lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=steps)  # <- cos C
        self.steps = steps

    def training_step(self, x, y):
        self.opt.zero_grad()
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss

    def fit(self):
        step = 0
        source = batches(self.steps)
        while step < self.steps:
            self.training_step(*next(source))
            step += 1


def test_cosine_scheduler_built_in_a_class_trainer_and_never_stepped():
    model = mlp()
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        trainer = CosineTrainer(model, steps=30)
        s.watch_optimizer(trainer.opt)
        trainer.fit()
    [f] = codes(s.report, NEVER)
    assert (f.line, f.op, f.evidence["optimizer_steps"]) == (line("cos C"), "CosineAnnealingLR", 30)


def test_never_stepped_look_alikes_are_quiet():
    runs = []
    for case in ("per_epoch_stepped", "one_epoch", "plateau", "period_not_due", "lr_by_hand"):
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            if case == "per_epoch_stepped":
                sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
                _epoch_trainer(model, opt, epochs=3, per_epoch=4, sched_step=sched.step)
            elif case == "one_epoch":  # an epoch schedule stepped after the only epoch: no call was due
                torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
                _epoch_trainer(model, opt, epochs=1, per_epoch=8)
            elif case == "plateau":  # its steps need a metric; it never reduced
                plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=100)
                _epoch_trainer(model, opt, epochs=3, per_epoch=4, sched_step=functools.partial(plateau.step, 1.0))
            elif case == "period_not_due":  # the code steps it every 1000 iterations; the run has 30
                scheduler = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
                source = batches(30)
                for it in range(30):
                    x, y = next(source)
                    opt.zero_grad()
                    F.mse_loss(model(x), y).backward()
                    opt.step()
                    if (it + 1) % 1000 == 0:
                        scheduler.step()
            else:  # a scheduler made, the lr driven by hand
                torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
                source = batches(20)
                for it in range(20):
                    for g in opt.param_groups:
                        g["lr"] = 0.05 * (1 - it / 20)
                    x, y = next(source)
                    opt.zero_grad()
                    F.mse_loss(model(x), y).backward()
                    opt.step()
        runs.append((case, [f.code for f in codes(s.report, NEVER)]))
    assert runs == [(c, []) for c in ("per_epoch_stepped", "one_epoch", "plateau", "period_not_due", "lr_by_hand")]


# ---------------------------------------------------------------- steps at lr 0
def warmup_from_zero(n):
    return lambda step: min(1.0, step / n)


class PPOActor:
    def __init__(self, model):
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, warmup_from_zero(3))

    def update(self, minibatches, epochs=2):
        for _ in range(epochs):
            for x, y in minibatches:
                self.opt.zero_grad()
                F.mse_loss(self.model(x), y).backward()
                self.opt.step()
        self.sched.step()  # <- ppo sched


def test_a_warmup_from_zero_stepped_per_update_wastes_the_first_update():
    model = mlp()
    actor = PPOActor(model)
    with torchtriage.watch(model, actor.opt, on_anomaly="record", report=False) as s:
        for u in range(5):
            actor.update(list(batches(2, seed=u)))
    [f] = codes(s.report, ZERO)
    ev = f.evidence
    assert (f.severity, f.line, f.op) == (Severity.WARNING, line("ppo sched"), "LambdaLR")
    assert (ev["steps_at_lr_0"], ev["optimizer_steps"], ev["first_step_at_positive_lr"], ev["first_positive_lr"],
            ev["max_abs_change_over_lr_0_steps"], ev["scheduler_calls_before_positive_lr"]) == \
        (4, 20, 4, "0.003333", 0.0, 1)
    assert f.message == ("the first 4 optimizer steps of Adam ran at learning rate 0 (20.0% of its 20 steps): "
                         "they moved no parameter; the lr first became 0.003333 at step 4 (LambdaLR)")


def test_a_per_epoch_warmup_from_zero_wastes_the_first_epoch():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(48, 6)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: min(1.0, e / 4))
        for _ in range(4):
            for xb, yb in data:
                opt.zero_grad()
                F.mse_loss(model(xb), yb).backward()
                opt.step()
            sched.step()  # <- epoch sched
    [f] = codes(s.report, ZERO)
    assert (f.severity, f.line, f.evidence["steps_at_lr_0"], f.evidence["optimizer_steps"],
            f.evidence["first_positive_lr"]) == (Severity.WARNING, line("epoch sched"), 6, 24, "0.025")
    assert f.message.startswith("the first 6 optimizer steps of SGD ran at learning rate 0")


def _hand_warmup(model, opt, epochs, per_epoch, base):
    for epoch in range(epochs):
        for g in opt.param_groups:
            g["lr"] = base * min(1.0, epoch / 2)
        for x, y in batches(per_epoch, seed=epoch):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()


def test_a_hand_written_warmup_from_zero_points_at_the_optimizer():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # <- hand opt
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        _hand_warmup(model, opt, epochs=3, per_epoch=5, base=1e-3)
    [f] = codes(s.report, ZERO)
    assert (f.severity, f.evidence["steps_at_lr_0"], f.evidence["scheduler"]) == (Severity.WARNING, 5, None)
    assert f.line == line("hand opt")


def test_lr_zero_look_alikes():
    runs = []
    for case in ("hf_linear_warmup", "warmup_from_one_step", "never_zero"):
        model = mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            if case == "hf_linear_warmup":  # transformers' schedule: lr 0 at step 0, stepped every step
                lam = lambda step: min(step / 5, max(0.0, (40 - step) / 35))  # noqa: E731
            elif case == "warmup_from_one_step":
                lam = lambda step: min(1.0, (step + 1) / 5)  # noqa: E731
            else:
                lam = lambda step: 1.0  # noqa: E731
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
            for x, y in batches(30):
                opt.zero_grad()
                F.mse_loss(model(x), y).backward()
                opt.step()
                sched.step()
        runs.append((case, [(f.severity, f.evidence["steps_at_lr_0"]) for f in codes(s.report, ZERO)]))
    assert runs == [("hf_linear_warmup", []), ("warmup_from_one_step", []), ("never_zero", [])]


# ---------------------------------------------------------------- a freeze by module names
class TinyViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Linear(6, 8)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, 8))
        self.pos_embed = nn.Parameter(torch.zeros(1, 4, 8))
        self.blocks = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 1)

    def forward(self, x):  # x: (B, 3, 6)
        t = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), self.patch_embed(x)], 1) + self.pos_embed
        return self.head(self.blocks(t)[:, 0])


def _vit_steps(model, opt, n=6):
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        x = torch.randn(4, 3, 6, generator=g)
        opt.zero_grad()
        F.mse_loss(model(x), x.mean((1, 2))[:, None]).backward()
        opt.step()


def test_named_children_freeze_list_naming_a_class_token():
    torch.manual_seed(0)
    model = TinyViT()
    freeze = ["patch_embed", "blocks", "cls_token"]
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        for name, child in model.named_children():  # <- vit loop
            if name in freeze:
                for p in child.parameters():
                    p.requires_grad = False
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        s.watch_optimizer(opt)
        _vit_steps(model, opt)
    [f] = codes(s.report, BARE)
    assert (f.severity, f.category, f.parameter, f.line) == (Severity.WARNING, Category.GRADIENT, "cls_token",
                                                            line("vit loop"))
    ev = f.evidence
    assert (ev["elements"], ev["frozen_tensors"], ev["loop_iterates"], ev["updated_after_first_step"]) == \
        (8, 6, "named_children", True)


def set_frozen(block):
    for p in block.parameters():
        p.requires_grad_(False)


def freeze_by_pattern(model, patterns):
    for name, module in model.named_modules():  # <- helper loop
        if name and any(p in name for p in patterns):
            set_frozen(module)


class GatedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16))
        self.gate = nn.Parameter(torch.ones(16))
        self.decoder = nn.Linear(16, 1)

    def forward(self, x):
        return self.decoder(self.encoder(x) * self.gate)


def test_a_freeze_helper_that_returned_is_judged_with_the_arguments_its_caller_passed():
    torch.manual_seed(0)
    model = GatedNet()
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        freeze_by_pattern(model, ["encoder", "gate"])
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
        s.watch_optimizer(opt)
        for x, y in batches(6):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    [f] = codes(s.report, BARE)
    assert (f.severity, f.parameter, f.line, f.evidence["elements"]) == (Severity.WARNING, "gate",
                                                                        line("helper loop"), 16)


class QueryDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.queries = nn.Parameter(torch.randn(2, 8) * 0.1)

    def forward(self, h):
        for layer in self.layers:
            h = h + torch.tanh(layer(h + self.queries.mean(0)))
        return h


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(6, 8)
        self.decoder = QueryDecoder()
        self.out = nn.Linear(8, 1)

    def forward(self, x):
        return self.out(self.decoder(self.stem(x)))


class FineTuner:
    def __init__(self, frozen_pattern):
        torch.manual_seed(0)
        self.model = Detector()
        self.frozen_pattern = frozen_pattern

    def train(self, session):
        for name, module in self.model.named_modules():
            if re.match(self.frozen_pattern, name):  # <- tuner test
                for p in module.parameters():
                    p.requires_grad = False
        opt = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        session.watch_optimizer(opt)
        for x, y in batches(6):
            opt.zero_grad()
            F.mse_loss(self.model(x), y).backward()
            opt.step()


def test_a_class_trainer_pattern_misses_queries_on_a_submodule():
    tuner = FineTuner(r"stem|decoder\.(layers|queries)")
    with torchtriage.watch(tuner.model, on_anomaly="record", report=False) as s:
        tuner.train(s)
    [f] = codes(s.report, BARE)
    assert (f.severity, f.parameter, f.module) == (Severity.WARNING, "decoder.queries", "QueryDecoder (decoder)")
    assert "line " + str(line("tuner test")) in f.message


def _watched(session, opt):
    session.watch_optimizer(opt)
    return opt


def test_freeze_look_alikes_are_quiet():
    runs = []
    # prompt tuning: the backbone frozen through its parameters, a bare prompt trained on purpose
    torch.manual_seed(0)
    vit = TinyViT()
    with torchtriage.watch(vit, on_anomaly="record", report=False) as s:
        for p in [*vit.patch_embed.parameters(), *vit.blocks.parameters(), *vit.head.parameters()]:
            p.requires_grad = False
        _vit_steps(vit, _watched(s, torch.optim.Adam([vit.cls_token, vit.pos_embed], lr=1e-2)))
    runs.append(("prompt", [(f.code, f.severity) for f in codes(s.report, BARE)]))
    # LoRA written with named_parameters: nothing to miss
    torch.manual_seed(0)
    vit = TinyViT()
    with torchtriage.watch(vit, on_anomaly="record", report=False) as s:
        for n, p in vit.named_parameters():
            if not n.startswith("head"):
                p.requires_grad = False
        _vit_steps(vit, _watched(s, torch.optim.Adam([p for p in vit.parameters() if p.requires_grad], lr=1e-2)))
    runs.append(("by_parameter", [(f.code, f.severity) for f in codes(s.report, BARE)]))
    # a module pattern that does not name the bare parameter: it was not asked to be frozen
    tuner = FineTuner(r"stem|decoder\.layers")
    with torchtriage.watch(tuner.model, on_anomaly="record", report=False) as s:
        tuner.train(s)
    runs.append(("not_named", [(f.code, f.severity) for f in codes(s.report, BARE)]))
    # everything but the head frozen by exclusion: a bare prompt kept trainable may be the intent
    torch.manual_seed(0)
    vit = TinyViT()
    with torchtriage.watch(vit, on_anomaly="record", report=False) as s:
        for name, child in vit.named_children():
            if name != "head":
                for p in child.parameters():
                    p.requires_grad = False
        _vit_steps(vit, _watched(s, torch.optim.Adam(vit.parameters(), lr=1e-2)))
    runs.append(("exclusion", sorted((f.parameter, f.severity) for f in codes(s.report, BARE))))
    assert runs == [("prompt", []), ("by_parameter", []), ("not_named", []),
                    ("exclusion", [("cls_token", Severity.INFO), ("pos_embed", Severity.INFO)])]
