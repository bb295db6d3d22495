"""What one optimizer step is made of: every micro-batch enters its update with the same weight
(`dynamics.clip_partial_accumulation`), every batch a loop loads reaches a step
(`data.coverage_lost`, ledger key `after_loop`), an averaged copy moves once per step
(`silent.ema_updated_between_steps`). Bugs written the way users write them (plain loops,
functions, trainer classes), with the exact finding; the correct look-alikes stay quiet."""

from __future__ import annotations

import copy
import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel
from torch.utils.data import DataLoader, TensorDataset

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def mlp(seed: int = 0, width: int = 16) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 1))


def regression(n: int = 256, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return x, x.sum(1, keepdim=True) * 3


def found(report, code: str) -> list:
    return [f for f in report.findings if f.code == code]


# ---------------------------------------------------------------- dynamics.clip_partial_accumulation
def test_clip_after_every_micro_batch_shrinks_the_earlier_ones():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x, y = regression()
    accum = 4
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(32):
            loss = F.mse_loss(model(x[8 * i:8 * i + 8]), y[8 * i:8 * i + 8]) / accum
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)  # <- every backward
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    [f] = found(s.report, "dynamics.clip_partial_accumulation")
    assert (f.category.value, f.severity, f.line, f.op) == ("gradient", Severity.WARNING, line("every backward"),
                                                             "clip_grad_norm_")
    ev = f.evidence
    assert (ev["backward_calls_per_step"], ev["clips_between_backwards_per_step"], ev["max_norm"]) == (4, 3, 0.5)
    assert ev["steps_seen_like_this"] == 8
    w = ev["micro_batch_weights"]
    assert len(w) == 4 and w[-1] == 1.0 and w[0] < w[1] < w[2] < 1.0 and w[0] < 0.05
    assert "harm" in ev
    assert f.message.startswith("clip_grad_norm_ runs between the backward() calls of one optimizer step (3 clip(s) "
                                "on partial sums of 4 accumulated micro-batches)")


class MicroTrainer:
    """A trainer class: one method per micro-batch, the step taken by a flag (accelerate-like)."""

    def __init__(self, model, opt, accum):
        self.model, self.opt, self.accum, self.n = model, opt, accum, 0

    @property
    def sync(self):
        return self.n % self.accum == 0

    def micro_step(self, xb, yb):
        self.n += 1
        loss = F.mse_loss(self.model(xb), yb) / self.accum
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=1.0)  # <- unguarded
        if self.sync:
            self.opt.step()
            self.opt.zero_grad()


def test_trainer_class_clipping_outside_its_sync_branch():
    model = mlp(1, 32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = regression(192, 1)
    trainer = MicroTrainer(model, opt, accum=3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(0, 192, 16):
            trainer.micro_step(x[i:i + 16], y[i:i + 16] * 10)
    [f] = found(s.report, "dynamics.clip_partial_accumulation")
    assert (f.severity, f.line) == (Severity.WARNING, line("unguarded"))
    assert (f.evidence["backward_calls_per_step"], f.evidence["clips_between_backwards_per_step"]) == (3, 2)
    assert f.evidence["steps_seen_like_this"] == 4


def accumulate_fn(model, opt, batches, k, clip_every):
    """A function-based loop over a DataLoader; clipping from a helper on a generator of params."""
    def clip(m):
        return torch.nn.utils.clip_grad_norm_((p for p in m.parameters() if p.requires_grad), 0.1)  # <- helper

    for i, (xb, yb) in enumerate(batches):
        F.mse_loss(model(xb), yb).div(k).backward()
        if clip_every or (i + 1) % k == 0:
            clip(model)
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad(set_to_none=False)


def test_function_loop_clipping_through_a_helper():
    model = mlp(2)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    x, y = regression(160, 2)
    loader = DataLoader(TensorDataset(x, y), batch_size=10)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        accumulate_fn(model, opt, loader, 2, clip_every=True)
    [f] = found(s.report, "dynamics.clip_partial_accumulation")
    assert (f.severity, f.line, f.evidence["micro_batch_weights"][-1]) == (Severity.WARNING, line("helper"), 1.0)
    assert f.evidence["clips_between_backwards_per_step"] == 1


def test_partial_clip_that_never_bites_is_an_info():
    model = mlp(2)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    x, y = regression(160, 2)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(0, 160, 10):
            F.mse_loss(model(x[i:i + 10]), y[i:i + 10]).div(2).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
            if i % 20:
                opt.step()
                opt.zero_grad()
    [f] = found(s.report, "dynamics.clip_partial_accumulation")
    assert f.severity == Severity.INFO and f.evidence["micro_batch_weights"] == [1.0, 1.0] and "harm" not in f.evidence


def test_clipping_once_after_the_last_micro_batch_is_quiet():
    model = mlp(2)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    x, y = regression(160, 2)
    loader = DataLoader(TensorDataset(x, y), batch_size=10)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        accumulate_fn(model, opt, loader, 2, clip_every=False)
    assert found(s.report, "dynamics.clip_partial_accumulation") == []


def test_two_models_one_optimizer_each_clipped_after_its_own_backward_is_quiet():
    enc, head = mlp(3), mlp(4)
    opt = torch.optim.Adam([*enc.parameters(), *head.parameters()], lr=1e-3)
    x, y = regression(128, 3)
    with torchtriage.watch([enc, head], opt, on_anomaly="record", report=False) as s:
        for i in range(0, 128, 16):
            F.mse_loss(enc(x[i:i + 16]), y[i:i + 16]).backward()
            torch.nn.utils.clip_grad_norm_(enc.parameters(), 0.1)  # complete: head's loss never reaches enc
            F.mse_loss(head(x[i:i + 16]), -y[i:i + 16]).backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 0.1)
            opt.step()
            opt.zero_grad()
    assert found(s.report, "dynamics.clip_partial_accumulation") == []


def test_gan_clipping_each_optimizer_before_its_own_step_is_quiet():
    g_net, d_net = mlp(5), nn.Sequential(nn.Linear(1, 16), nn.ReLU(), nn.Linear(16, 1))
    g_opt = torch.optim.Adam(g_net.parameters(), lr=1e-3)
    d_opt = torch.optim.Adam(d_net.parameters(), lr=1e-3)
    x, y = regression(128, 5)
    with torchtriage.watch([g_net, d_net], [g_opt, d_opt], on_anomaly="record", report=False) as s:
        for i in range(0, 128, 16):
            fake = g_net(x[i:i + 16])
            d_loss = F.softplus(-d_net(y[i:i + 16])).mean() + F.softplus(d_net(fake.detach())).mean()
            d_opt.zero_grad()
            d_loss.backward()
            torch.nn.utils.clip_grad_norm_(d_net.parameters(), 0.05)
            d_opt.step()
            g_loss = F.softplus(-d_net(fake)).mean()
            g_opt.zero_grad()
            g_loss.backward()
            torch.nn.utils.clip_grad_norm_(g_net.parameters(), 0.05)
            g_opt.step()
    assert found(s.report, "dynamics.clip_partial_accumulation") == []


def test_dp_sgd_clipping_each_micro_batch_gradient_is_quiet():
    """DP-SGD: each micro-batch's gradient is clipped alone, summed in a buffer, the grads reset
    (by zero_grad, or in place) before the next micro-batch's backward."""
    model = mlp(11)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x, y = regression(256, 11)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(0, 256, 32):
            acc = [torch.zeros_like(p) for p in model.parameters()]
            for j in range(i, i + 32, 4):
                if j % 8:
                    opt.zero_grad(set_to_none=False)
                else:
                    for p in model.parameters():
                        if p.grad is not None:
                            p.grad.zero_()
                F.mse_loss(model(x[j:j + 4]), y[j:j + 4]).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                for a, p in zip(acc, model.parameters()):
                    a.add_(p.grad)
            for a, p in zip(acc, model.parameters()):
                p.grad = a / 8 + 0.01 * torch.randn_like(a)
            opt.step()
    assert found(s.report, "dynamics.clip_partial_accumulation") == []


# ---------------------------------------------------------------- data.coverage_lost (after_loop)
def classification(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def classifier(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def test_step_dedented_out_of_the_batch_loop():
    model = classifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(classification(100, 0), batch_size=16, shuffle=True)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _epoch in range(3):
            for xb, yb in loader:
                xb, yb = xb.float(), yb
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()  # <- dedented
    [f] = found(s.report, "data.coverage_lost")
    assert (f.category.value, f.severity, f.line) == ("data", Severity.WARNING, line("dedented"))
    ev = f.evidence
    assert (ev["passes"], ev["batches_loaded"], ev["samples_loaded"]) == (3, 21, 300)
    assert (ev["samples_that_reached_a_step"], ev["optimizer_steps_after_the_loop"]) == (12, 3)
    assert ev["first_pass"] == {"batches": 7, "samples": 100, "last_batch": 4, "steps": 1}
    assert ev["loader"] == "loader" and ev["loop_at"].endswith(f":{line('dedented') - 4}")
    assert f.message.startswith("the batch loop over loader only loads its batches: in 3 passes")


def local_train(model, loader, opt, epochs):
    """A federated client's local update (function style, dict batches, the input reshaped)."""
    model.train()
    for _ in range(epochs):
        for batch in loader:
            inputs, labels = batch["x"].view(-1, 2, 4), batch["y"]
        opt.zero_grad()
        F.nll_loss(F.log_softmax(model(inputs.flatten(1)), 1), labels).backward()
        opt.step()  # <- client
    return model


class DictSet(torch.utils.data.Dataset):
    def __init__(self, base):
        self.base = base

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        x, y = self.base[i]
        return {"x": x, "y": y}


def test_federated_clients_stepping_once_per_local_epoch():
    clients = [classifier(k) for k in range(3)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in clients]
    loaders = [DataLoader(DictSet(classification(40 + 20 * k, k)), batch_size=8) for k in range(3)]
    with torchtriage.watch(clients, opts, on_anomaly="record", report=False) as s:
        for _round in range(2):
            for m, loader, opt in zip(clients, loaders, opts):
                local_train(m, loader, opt, epochs=2)
    [f] = found(s.report, "data.coverage_lost")
    assert (f.severity, f.line) == (Severity.WARNING, line("client"))
    ev = f.evidence
    assert ev["passes"] == 12 and ev["samples_loaded"] == 2 * 2 * (40 + 60 + 80)
    assert ev["samples_that_reached_a_step"] == 2 * 2 * (8 + 4 + 8)  # the last batches of 40, 60, 80


class EpochTrainer:
    """A trainer class: a scheduler per epoch, the step dedented with it."""

    def __init__(self, model, loader):
        self.model, self.loader = model, loader
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        self.sched = torch.optim.lr_scheduler.ExponentialLR(self.opt, 0.9)

    def train_epoch(self):
        self.model.train()
        for _step, (x, y) in enumerate(self.loader):
            x, y = x.to("cpu"), y.to("cpu")
        self.opt.zero_grad()
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.step()  # <- trainer
        self.sched.step()


def test_trainer_class_epoch_with_the_step_after_its_loop():
    model = classifier(3)
    trainer = EpochTrainer(model, DataLoader(classification(128, 3), batch_size=32, shuffle=True))
    with torchtriage.watch(model, trainer.opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            trainer.train_epoch()
    [f] = found(s.report, "data.coverage_lost")
    assert (f.severity, f.line) == (Severity.WARNING, line("trainer"))
    ev = f.evidence
    assert (ev["passes"], ev["samples_loaded"], ev["samples_that_reached_a_step"]) == (4, 512, 128)


def test_correct_loop_and_batches_collected_then_trained_are_quiet():
    model = classifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(classification(96, 1), batch_size=16, shuffle=True)
    stats = DataLoader(classification(64, 2), batch_size=32)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _epoch in range(2):
            mean = torch.zeros(8)
            for xb, _ in stats:  # a statistics pass: no step after it reads its last batch
                mean += xb.sum(0)
            kept = []
            for xb, yb in loader:  # batches collected, then each trained on
                kept.append((xb, yb))
            for xb, yb in kept:
                opt.zero_grad()
                F.cross_entropy(model(xb - mean / 64), yb).backward()
                opt.step()
            for xb, yb in loader:  # the plain loop
                opt.zero_grad()
                F.cross_entropy(model(xb), yb).backward()
                opt.step()
            with torch.no_grad():
                for xb, _ in loader:
                    model(xb)
    assert found(s.report, "data.coverage_lost") == []


# ---------------------------------------------------------------- silent.ema_updated_between_steps
class EMA(nn.Module):
    """A module EMA with a step counter and an every-k update (ema_pytorch-like)."""

    def __init__(self, model, beta=0.99, update_every=2):
        super().__init__()
        self.online = [model]
        self.ema_model = copy.deepcopy(model).requires_grad_(False)
        self.beta, self.update_every = beta, update_every
        self.register_buffer("step", torch.tensor(0))

    @torch.no_grad()
    def update(self):
        self.step += 1
        if int(self.step) % self.update_every:
            return
        for e, p in zip(self.ema_model.parameters(), self.online[0].parameters()):
            e.lerp_(p, 1 - self.beta)


def micro_batches(model, opt, x, y, accum, after_micro, after_step):
    for i in range(0, len(x), 8):
        (F.mse_loss(model(x[i:i + 8]), y[i:i + 8]) / accum).backward()
        if (i // 8 + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
            after_step()
        after_micro()  # <- micro call


def test_module_ema_updated_after_every_micro_batch():
    model = mlp(6)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ema = EMA(model)
    x, y = regression(512, 6)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        micro_batches(model, opt, x, y, 4, lambda: ema.update(), lambda: None)
    [f] = found(s.report, "silent.ema_updated_between_steps")
    assert (f.category.value, f.severity, f.line, f.op) == ("silent", Severity.WARNING, line("micro call"),
                                                             "EMA.update")
    ev = f.evidence
    assert ev["calls"] >= 56 and ev["optimizer_steps"] >= 14  # counted from the first update seen (step 1)
    assert 3.7 <= ev["calls_per_step"] <= 4.2 and ev["calls_without_a_step_since_the_last"] >= 0.7 * ev["calls"]
    assert ev["copy"].startswith("ema.ema_model.")
    assert "harm" in ev


def ema_update(ema_params, params, decay):
    with torch.no_grad():
        for e, p in zip(ema_params, params):
            e.mul_(decay).add_(p.detach(), alpha=1 - decay)


def test_function_ema_in_an_accumulating_plain_loop():
    model = mlp(7)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    shadow = [p.detach().clone() for p in model.parameters()]
    x, y = regression(384, 7)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(0, 384, 8):
            (F.mse_loss(model(x[i:i + 8]), y[i:i + 8]) / 2).backward()
            if (i // 8) % 2 == 1:
                opt.step()
                opt.zero_grad()
            ema_update(shadow, model.parameters(), 0.95)  # <- ema fn
    [f] = found(s.report, "silent.ema_updated_between_steps")
    assert (f.severity, f.line, f.op) == (Severity.WARNING, line("ema fn"), "ema_update")
    assert 1.9 <= f.evidence["calls_per_step"] <= 2.1


def test_swa_averaged_model_updated_per_micro_batch():
    model = mlp(8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    swa = AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    x, y = regression(384, 8)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(0, 384, 8):
            (F.mse_loss(model(x[i:i + 8]), y[i:i + 8]) / 3).backward()
            if (i // 8) % 3 == 2:
                opt.step()
                opt.zero_grad()
            swa.update_parameters(model)  # <- swa
    [f] = found(s.report, "silent.ema_updated_between_steps")
    assert (f.severity, f.line, f.op) == (Severity.WARNING, line("swa"), "AveragedModel.update_parameters")


def test_ema_updated_once_per_step_or_every_k_steps_is_quiet():
    model = mlp(9)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ema, slow = EMA(model), EMA(model, update_every=1)
    swa = AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    shadow = [p.detach().clone() for p in model.parameters()]
    x, y = regression(512, 9)
    steps = [0]

    def after_step():
        steps[0] += 1
        ema.update()
        swa.update_parameters(model)
        ema_update(shadow, model.parameters(), 0.9)
        if steps[0] % 3 == 0:
            slow.update()

    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        micro_batches(model, opt, x, y, 4, lambda: None, after_step)
    assert found(s.report, "silent.ema_updated_between_steps") == []


def test_inline_ema_written_in_the_micro_batch_loop():
    model = mlp(10)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    teacher = copy.deepcopy(model)
    x, y = regression(512, 10)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(0, 512, 8):
            (F.mse_loss(model(x[i:i + 8]), y[i:i + 8]) / 4).backward()
            if (i // 8) % 4 == 3:
                opt.step()
                opt.zero_grad()
            with torch.no_grad():
                for t, p in zip(teacher.parameters(), model.parameters()):
                    t.mul_(0.99).add_(p, alpha=0.01)  # <- inline
    [f] = found(s.report, "silent.ema_updated_between_steps")
    assert (f.severity, f.line, f.op) == (Severity.WARNING, line("inline"), "inline")
    ev = f.evidence
    assert 3.5 <= ev["calls_per_step"] <= 4.5 and ev["calls_without_a_step_since_the_last"] >= 0.7 * ev["calls"]


def test_inline_ema_after_each_step_is_quiet():
    model = mlp(10)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    teacher = copy.deepcopy(model)
    x, y = regression(512, 10)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(0, 512, 8):
            (F.mse_loss(model(x[i:i + 8]), y[i:i + 8]) / 4).backward()
            if (i // 8) % 4 == 3:
                opt.step()
                opt.zero_grad()
                with torch.no_grad():
                    for t, p in zip(teacher.parameters(), model.parameters()):
                        t.mul_(0.99).add_(p, alpha=0.01)
    assert found(s.report, "silent.ema_updated_between_steps") == []
