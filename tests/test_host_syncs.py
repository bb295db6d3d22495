"""Host-sync audit: on CUDA every read of a device value by the host (`.item()`, `.tolist()`,
`bool(t)`, `float(t)`, `.cpu()`, `torch.equal`, a boolean-mask index, ...) waits for all queued
kernels. torchtriage promises at most one such read per optimizer step in steady state.

On a CPU machine nothing syncs, so the calls that *would* sync are counted instead, by a
`TorchFunctionMode` pushed outside the session. A call counts when the first frame above it that
is neither torch's nor a mode's `__torch_function__` lies in `src/torchtriage/` (a torchtriage
wrapper that only passes a call through to torch, e.g. around `GradScaler.step`, does not own
the scaler's own syncs).

Warm-up: the gradients check analyses the first `gradients_window` steps (default 2; longer
while some optimizer has not stepped yet), the silent checks the first `silent_warmup` steps
(default 3), the first `silent_collapse_steps` losses (default 20) and an exp walk every
`silent_exp_every` steps (default 64). All of them queue their numbers on the device and the
numbers ride the non-finite sentinel's one read at `optimizer.step()`'s pre-hook
(`_nonfinite/_sentinel.py:_read`). That read is the one sync: once per optimizer step (a GAN's
two optimizers: two per iteration; the sentinel must read before each update so that
`skip_step` can still skip it). Steps 0-2 are the warm-up; the tests also hold them to one read.
"""

from __future__ import annotations

import collections
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from tests._syncs import SyncCounter

import torchtriage
from torchtriage import Severity
from torchtriage._deferred import DeferredFlags, read_scalars

WARMUP = 3  # max(gradients_window=2, silent_warmup=3)


def _overhead_module():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "overhead.py"
    spec = importlib.util.spec_from_file_location("_tt_overhead", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- realistic loops
def lm():
    bench = _overhead_module()
    model = bench.TinyLM(vocab=50, d=32, layers=2, heads=2, seq=16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randint(0, 50, (4, 16)), torch.randint(0, 50, (4, 16))

    def step(forward):
        out = forward(model, x)
        loss = F.cross_entropy(out.reshape(-1, 50), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return [model], [opt], step


def cnn():
    model = _overhead_module().SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))

    def step(forward):
        loss = nn.CrossEntropyLoss()(forward(model, x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [model], [opt], step


def gan():
    G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
    D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g = torch.optim.Adam(G.parameters(), 2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), 2e-4, betas=(0.5, 0.999))
    real = torch.randn(8, 8)

    def step(forward):
        fake = forward(G, torch.randn(8, 4))
        loss_d = (F.binary_cross_entropy_with_logits(forward(D, real), torch.ones(8, 1))
                  + F.binary_cross_entropy_with_logits(forward(D, fake.detach()), torch.zeros(8, 1)))
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
        loss_g = F.binary_cross_entropy_with_logits(forward(D, fake), torch.ones(8, 1))
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
    return [G, D], [opt_d, opt_g], step


def amp_bf16():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def step(forward):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(forward(model, x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [model], [opt], step


def grad_scaler():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def step(forward):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(forward(model, x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return [model], [opt], step


class GaussianHead(nn.Module):
    """Predicts a mean and a log-variance: the loss's exp() is what the silent exp walk reads."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, x):
        return self.net(x)


def grad_accumulation():
    model = GaussianHead()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xs, ys = [torch.randn(4, 16) for _ in range(4)], [torch.randn(4) for _ in range(4)]

    def step(forward):
        for x, y in zip(xs, ys):
            mean, logvar = forward(model, x).unbind(-1)
            loss = (0.5 * (logvar + (y - mean) ** 2 / logvar.exp())).mean() / 4
            loss.backward()
        opt.step()
        opt.zero_grad()
    return [model], [opt], step


def scheduled_with_eval():
    # issue 19: per-batch schedule, clipping, sampled per-layer numbers and evaluation passes
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=20)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    calls = [0]

    def step(forward):
        loss = F.cross_entropy(forward(model, x), y)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        calls[0] += 1
        if calls[0] % 3 == 0:
            model.eval()
            with torch.no_grad():
                (forward(model, x).argmax(dim=1) == y).float().mean()
            model.train()
    return [model], [opt], step


LOOPS = {"scheduled_with_eval": scheduled_with_eval, "transformer_lm": lm, "cnn": cnn,
         "gan": gan, "amp_bf16": amp_bf16, "grad_scaler": grad_scaler,
         "grad_accumulation": grad_accumulation}


def _run(make, steps: int, **options):
    """Per step: torchtriage's syncs, and those made while a watched model's forward ran."""
    models, opts, step = make()
    per_step, in_forward = [], []
    counter = SyncCounter()

    def forward(model, x):
        n0 = len(counter.calls)
        out = model(x)
        in_forward.extend(counter.calls[n0:])
        return out

    with counter:
        with torchtriage.watch(models, opts, on_anomaly="record", report=False, **options) as s:
            for _ in range(steps):
                n0 = len(counter.calls)
                step(forward)
                per_step.append(counter.calls[n0:])
            n_end = len(counter.calls)
        at_exit = counter.calls[n_end:]
    return s, len(opts), per_step, in_forward, at_exit


def _is_sentinel_read(call) -> bool:
    return call[0] == "tolist" and "_nonfinite/_sentinel.py:_read" in call[1]


# Short periods so that the periodic reads (loss collapse, exp walk) fall inside the loop.
OPTIONS = {"silent_collapse_steps": 5, "silent_exp_every": 4, "dynamics_every": 4}


@pytest.mark.parametrize("loop", list(LOOPS))
def test_one_sync_per_optimizer_step(loop):
    torch.manual_seed(0)
    s, n_opt, per_step, in_forward, at_exit = _run(LOOPS[loop], 10, **OPTIONS)
    assert [f for f in s.report.findings if f.severity is not Severity.INFO] == []
    for i, calls in enumerate(per_step):
        # Warm-up steps (< WARMUP) too: the depth analyses' numbers ride the same read.
        assert len(calls) == n_opt, (loop, i, collections.Counter(calls))
        assert all(_is_sentinel_read(c) for c in calls), (loop, i, calls)
    assert in_forward == []  # no flag is read while the model runs
    # at exit: the sentinel's read of the last update's norms, and the step ledger's one read of
    # the run's update samples ("should move and did not" is judged once, at the end)
    sentinel = [c for c in at_exit if _is_sentinel_read(c)]
    judged = [c for c in at_exit if c[0] == "tolist" and "_ledger_step/_updates.py:end" in c[1]]
    assert len(sentinel) <= 1 and len(judged) <= 1 and len(sentinel) + len(judged) == len(at_exit), at_exit


def test_steady_state_reads_are_the_plain_read():
    # After the warm-up nothing rides along: the read is the sentinel's own stack().tolist().
    torch.manual_seed(0)
    _, _, per_step, _, _ = _run(lm, WARMUP + 2)
    for calls in per_step[WARMUP:]:
        assert [c[1][0] for c in calls] == ["_nonfinite/_sentinel.py:_read"]


def test_periodic_reads_ride_the_step_read():
    # The loss-collapse read (step silent_collapse_steps - 1) and the exp walk (every
    # silent_exp_every steps) used to read on their own at the step's end.
    torch.manual_seed(0)
    _, _, per_step, _, _ = _run(grad_accumulation, 9, silent_collapse_steps=6, silent_exp_every=8)
    for i in (5, 8):
        assert [c[1][:2] for c in per_step[i]] == [("_deferred.py:read_scalars", "_nonfinite/_sentinel.py:_read")]


def test_counter_sees_torchtriage_syncs_and_not_the_users():
    # The audit is not vacuous: a NaN step takes the report path, which reads the tensors it
    # summarizes; the user's own .item() is not counted.
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    with SyncCounter() as counter:
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            loss = F.mse_loss(model(x), torch.randn(8, 1))
            loss.item()
            opt.zero_grad()
            loss.backward()
            opt.step()
            clean = len(counter.calls)
            loss = F.mse_loss(model(x * float("nan")), torch.randn(8, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert clean == 1
    assert s.report.primary.code == "numerical.nonfinite_data"
    assert len(counter.calls) > clean + 1


def test_without_the_sentinel_silent_reads_once_at_step_end():
    torch.manual_seed(0)
    models, opts, step = lm()
    with SyncCounter() as counter:
        with torchtriage.watch(models, opts, checks=["silent"], on_anomaly="record", report=False):
            per_step = []
            for _ in range(WARMUP + 1):
                n0 = len(counter.calls)
                step(lambda m, x: m(x))
                per_step.append(counter.calls[n0:])
    assert [len(c) for c in per_step] == [1, 1, 1, 0]
    assert all(c[1][0] == "_deferred.py:read_scalars" for calls in per_step for c in calls)


# ---------------------------------------------------------------- the shared read
def test_read_scalars_mixed_shapes_and_dtypes():
    vals = read_scalars([torch.tensor(1.5), torch.tensor([True, False]), torch.tensor([3, 4]),
                         torch.tensor(float("inf"), dtype=torch.float16), torch.tensor(1e300, dtype=torch.float64)])
    assert vals == [1.5, 1.0, 0.0, 3.0, 4.0, float("inf"), 1e300]
    assert read_scalars([]) == []


def test_deferred_flags_filled_by_another_reader_are_not_read_again():
    flags = DeferredFlags()
    got = []
    flags.add([torch.tensor(2.0), torch.tensor([1.0, 3.0])], got.append)
    assert [t.tolist() for t in flags.pending()] == [2.0, [1.0, 3.0]]
    flags.fill([2.0, 1.0, 3.0])
    assert flags.pending() == []
    flags.add([torch.tensor(7)], got.append)  # queued after the read: resolve() reads it
    with SyncCounter() as counter:
        flags.resolve()
    assert got == [[2.0, 1.0, 3.0], [7.0]]
    assert [c[0] for c in counter.calls] == ["tolist"]
