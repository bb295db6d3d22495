"""Overhead of torchtriage's non-finite sentinel vs the tools it replaces.

A 4-layer transformer LM (d=256, sequence 128, batch 16) and a small CNN, one training step each
(and, with `--workloads mlp`, a tiny MLP whose ~1 ms step magnifies fixed per-step costs; with
`--workloads gpt`, a small GPT: d=128, 4 layers, sequence 64, batch 8, AdamW):
baseline, the least a per-step NaN/Inf check does written into the loop by hand (`inline_min`:
the loss and each gradient's norm, one read; `inline_sentinel`: also the batch's and the output's
sums, the sentinel's own device work), torchtriage's sentinel alone
(`watch(checks=["nonfinite"])`), torchtriage with all its default checks (`watch()`: sentinel,
gradients, silent bugs, dynamics, exception triage, repro recorder, runtime leakage),
`torch.autograd.detect_anomaly`, and transformers' `DebugUnderflowOverflow` when it is installed.
Step times are interleaved in one process (round-robin over the modes, so a busy machine slows
all alike) and reported as the ratio of medians to the baseline, with the middle half of the
per-sample ratios (each against the baseline sample of the same round) as the spread. Each
entry into a mode is followed by untimed steps (see UNTIMED): the figures are the steady state.
Peak memory: CUDA max_memory_allocated when on CUDA; on CPU the peak RSS of a fresh subprocess
per mode (RSS peaks cannot be reset inside one process).
The first three steps after each entry are also timed on their own ("first 3"): the default
checks analyse a session's first steps in depth, and a run pays that once.

    python benchmarks/overhead.py [--steps N] [--rounds N] [--quick] [--device cpu|cuda] [--threads N]
                                  [--workloads transformer,cnn,mlp,gpt] [--modes baseline,sentinel,...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyLM(nn.Module):
    def __init__(self, vocab=1000, d=256, layers=4, heads=4, seq=128):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, ids):
        h = self.emb(ids) + self.pos[: ids.shape[1]]
        return self.head(self.blocks(h, mask=self.mask, is_causal=True))


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 8 * 8, 10))

    def forward(self, x):
        return self.net(x)


def make(workload: str, device: str):
    torch.manual_seed(0)
    if workload == "transformer":
        model = TinyLM().to(device)
        batch = (torch.randint(0, 1000, (16, 128), device=device), torch.randint(0, 1000, (16, 128), device=device))

        def loss_fn(out, y):
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    elif workload == "gpt":
        model = TinyLM(vocab=1000, d=128, layers=4, heads=4, seq=64).to(device)
        batch = (torch.randint(0, 1000, (8, 64), device=device), torch.randint(0, 1000, (8, 64), device=device))

        def loss_fn(out, y):
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    elif workload == "mlp":
        model = TinyMLP().to(device)
        batch = (torch.randn(256, 128, device=device), torch.randint(0, 10, (256,), device=device))

        def loss_fn(out, y):
            return F.cross_entropy(out, y)
    else:
        model = SmallCNN().to(device)
        batch = (torch.randn(64, 3, 32, 32, device=device), torch.randint(0, 10, (64,), device=device))

        def loss_fn(out, y):
            return F.cross_entropy(out, y)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, opt, batch, loss_fn


def step(model, opt, batch, loss_fn):
    x, y = batch
    loss = loss_fn(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def step_inline_min(model, opt, batch, loss_fn):
    """The least any per-step NaN/Inf check with gradient norms does, written into the loop by
    hand (no hooks, no framework): the loss and each gradient's norm, one host read before the
    update. The floor under the sentinel's steady-state cost on this workload."""
    x, y = batch
    loss = loss_fn(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
    torch.stack([loss.detach(), *torch._foreach_norm(grads)]).tolist()
    opt.step()
    return loss


def step_inline_sentinel(model, opt, batch, loss_fn):
    """`step_inline_min` plus the sums of the batch and of the output (the sentinel's data and
    forward flags): the sentinel's own device work per step, inlined."""
    x, y = batch
    out = model(x)
    flags = [x.sum(), out.detach().sum()]
    loss = loss_fn(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
    torch.stack([*flags, loss.detach(), *torch._foreach_norm(grads)]).tolist()
    opt.step()
    return loss


# Reference arms that change the step itself (the others wrap the same step in a tool).
STEPPERS = {"inline_min": step_inline_min, "inline_sentinel": step_inline_sentinel}


def modes():
    out = ["baseline", "inline_min", "inline_sentinel", "sentinel", "all_checks", "all_but_dynamics",
           "all_but_ledger", "all_but_data_ledger", "all_but_step_ledger", "detect_anomaly"]
    try:
        from transformers.debug_utils import DebugUnderflowOverflow  # noqa: F401
        out.append("hf_debug_underflow_overflow")
    except Exception:
        pass
    return out


@contextlib.contextmanager
def instrument(mode: str, model, opt):
    if mode in ("baseline", "baseline_copy", *STEPPERS):
        yield
    elif mode == "sentinel":
        import torchtriage

        with torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False):
            yield
    elif mode == "all_checks":
        import torchtriage

        with torchtriage.watch(model, opt, on_anomaly="record", report=False):  # the default checks
            yield
    elif mode == "all_but_ledger":  # what the two ledgers (issues 25, 26) add: all_checks against this
        import torchtriage
        from torchtriage._registry import DEFAULT_CHECKS

        checks = [c for c in DEFAULT_CHECKS if c not in ("data_ledger", "step_ledger")]
        with torchtriage.watch(model, opt, checks=checks, on_anomaly="record", report=False):
            yield
    elif mode in ("all_but_dynamics", "all_but_data_ledger", "all_but_step_ledger"):
        # what the dynamics (issue 19) / data ledger (25) / step ledger (26) check adds: all_checks against this
        import torchtriage
        from torchtriage._registry import DEFAULT_CHECKS

        left_out = mode.removeprefix("all_but_")  # (a check's registry name)
        checks = [c for c in DEFAULT_CHECKS if c != left_out]
        with torchtriage.watch(model, opt, checks=checks, on_anomaly="record", report=False):
            yield
    elif mode == "detect_anomaly":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autograd.detect_anomaly():
                yield
    else:
        from transformers.debug_utils import DebugUnderflowOverflow

        dbg = DebugUnderflowOverflow(model)
        try:
            yield
        finally:
            for m in model.modules():
                m._forward_hooks.clear()
            del dbg


# Every round enters a fresh session (and a fresh anomaly mode / HF debugger). The first steps
# after an entry are not what a training run feels: the default checks analyse the first steps
# of a session in depth (gradients: 1-2 steps, silent bugs: 3, then every step up to 20 and two
# in every 32 after that) and every tool sets itself up on its first step. A real run pays that
# once, so every mode, the baseline too, runs UNTIMED steps after each entry, and the figures
# are the steady state that the rest of a run sees (the timed steps, 32 on, hold one sampled
# pair of the silent checks per 32, as a long run does).
UNTIMED = 32
FIRST = 3  # of the untimed steps, the first ones are timed on their own (the "first 3" figure)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_workload(workload, device, steps, rounds, names, clock=time.perf_counter):
    setups = {m: make(workload, device) for m in names}
    times = {m: [] for m in names}
    first = {m: [] for m in names}  # the first FIRST steps after each entry, summed
    for m in names:  # warm-up (the checks' first-steps analyses run here, as in a real run)
        with instrument(m, *setups[m][:2]):
            for _ in range(5):
                STEPPERS.get(m, step)(*setups[m])
    for r in range(rounds):
        # rotate the order every round: no mode always runs right after another
        for m in names[r % len(names):] + names[:r % len(names)]:
            model, opt, batch, loss_fn = setups[m]
            step_fn = STEPPERS.get(m, step)
            with instrument(m, model, opt):
                sync(device)
                t0 = clock()
                for _ in range(FIRST):
                    step_fn(model, opt, batch, loss_fn)
                sync(device)
                first[m].append(clock() - t0)
                for _ in range(UNTIMED - FIRST):
                    step_fn(model, opt, batch, loss_fn)
                for _ in range(steps):
                    sync(device)
                    t0 = clock()
                    step_fn(model, opt, batch, loss_fn)
                    sync(device)
                    times[m].append(clock() - t0)
    # Spread: each sample's ratio to the baseline sample taken right beside it (same round), the
    # middle half of those ratios; it shows how much the busy machine moved the figures.
    spread = {}
    for m, v in times.items():
        paired = sorted(t / b for t, b in zip(v, times["baseline"]))
        q = statistics.quantiles(paired, n=4) if len(paired) >= 2 else [paired[0]] * 3
        spread[m] = (q[0], q[2])
    return ({m: statistics.median(v) for m, v in times.items()}, spread,
            {m: statistics.median(v) / FIRST for m, v in first.items()})


def peak_memory(workload, device, mode, steps, threads):
    if device == "cuda":
        model, opt, batch, loss_fn = make(workload, device)
        step(model, opt, batch, loss_fn)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        with instrument(mode, model, opt):
            for _ in range(steps):
                STEPPERS.get(mode, step)(model, opt, batch, loss_fn)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    cmd = [sys.executable, __file__, "--_memory", workload, mode, str(steps), "--threads", str(threads)]
    return float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    # (3 steps are enough for the peak: every step allocates the same)


def _memory_child(workload, mode, steps):
    model, opt, batch, loss_fn = make(workload, "cpu")
    with instrument(mode, model, opt):
        for _ in range(steps):
            STEPPERS.get(mode, step)(model, opt, batch, loss_fn)
    # VmHWM (peak RSS) of this process; ru_maxrss would include the parent's RSS from before exec
    with open("/proc/self/status") as fh:
        hwm = next((line.split()[1] for line in fh if line.startswith("VmHWM:")), None)
    print(int(hwm) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1, help="timed steps per mode per round")
    p.add_argument("--rounds", type=int, default=20, help="round-robin rounds")
    p.add_argument("--quick", action="store_true", help="1 step x 6 rounds, CNN and transformer")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="also write the figures as JSON")
    p.add_argument("--workloads", default="transformer,cnn", help="comma-separated: transformer, cnn, mlp, gpt")
    p.add_argument("--modes", help="comma-separated subset of the modes (baseline always runs)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--control", action="store_true",
                   help="also time a second, identical baseline (its ratio is the noise floor of the run)")
    p.add_argument("--clock", choices=("wall", "thread"), default="wall",
                   help="thread: CPU time of the stepping thread (CPU, --threads 1 only): time the machine "
                        "gave to other processes is not counted, for a shared machine")
    p.add_argument("--_memory", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a._memory:
        _memory_child(a._memory[0], a._memory[1], int(a._memory[2]))
        return 0
    if a.quick:
        a.steps, a.rounds = 1, 6
    if a.clock == "thread" and (a.threads != 1 or a.device != "cpu"):
        p.error(f"--clock thread needs --device cpu and --threads 1 (got --device {a.device} --threads {a.threads})")
    clock = time.thread_time if a.clock == "thread" else time.perf_counter
    names = modes()
    if a.modes:
        wanted = a.modes.split(",")
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            p.error(f"unknown or unavailable mode(s) {', '.join(unknown)}; accepted: {', '.join(names)}")
        names = ["baseline"] + [m for m in names if m in wanted and m != "baseline"]
    if a.control:
        names.insert(1, "baseline_copy")
    rows = []
    for workload in a.workloads.split(","):
        if workload not in ("transformer", "cnn", "mlp", "gpt"):
            p.error(f"unknown workload {workload!r}; accepted: transformer, cnn, mlp, gpt")
        med, spread, first = time_workload(workload, a.device, a.steps, a.rounds, names, clock)
        nan = float("nan")
        base_mem = nan if a.no_memory else peak_memory(workload, a.device, "baseline", 3, a.threads)
        for m in names:
            mem = (base_mem if m in ("baseline", "baseline_copy") or a.no_memory
                   else peak_memory(workload, a.device, m, 3, a.threads))
            rows.append({"workload": workload, "mode": m, "step_ms": med[m] * 1e3,
                         "time_ratio": med[m] / med["baseline"],
                         "first3_ms": first[m] * 1e3, "first3_ratio": first[m] / first["baseline"],
                         "paired_ratio_iqr": [round(x, 4) for x in spread[m]], "peak_mib": mem,
                         "mem_ratio": mem / base_mem if base_mem > 0 else float("nan")})
    mem_kind = "CUDA max allocated" if a.device == "cuda" else "process peak RSS"
    print(f"device={a.device} torch={torch.__version__} threads={a.threads} steps={a.steps}x{a.rounds} rounds "
          f"clock={a.clock}")
    print(f"| workload | mode | median step (ms) | time vs baseline | paired ratios, middle half | "
          f"first {FIRST} steps vs baseline | {mem_kind} (MiB) | memory vs baseline |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["paired_ratio_iqr"]
        print(f"| {r['workload']} | {r['mode']} | {r['step_ms']:.2f} | {r['time_ratio']:.3f}x | {lo:.3f}–{hi:.3f} | "
              f"{r['first3_ratio']:.3f}x | {r['peak_mib']:.1f} | {r['mem_ratio']:.2f}x |")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
