"""What only a CUDA machine can verify about torchtriage (the CPU tests cover the logic).

    python benchmarks/gpu_check.py          # exits 0 with "SKIP: no CUDA" on a CPU machine

Checks, each printed PASS / FAIL with its figures (exit status 1 when any fails):
  1. sentinel     a NaN born in a CUDA model's forward: stage, module, op and the user's line.
  2. bitwise      20 training steps with dropout (CUDA RNG), with and without `watch()`: losses
                  and parameters bitwise identical (replays restore the CUDA RNG).
  3. replay_rng   a NaN step's replay (which reruns dropout) leaves the CUDA RNG where it was.
  4. grad_scaler  float16 autocast + GradScaler(device="cuda") with an overflowing initial scale:
                  the skipped steps are `numerical.amp_skipped_step` infos, nothing worse.
  5. syncs        `torch.cuda.set_sync_debug_mode("warn")` around steady-state steps: at most one
                  synchronizing call per optimizer step, made by torchtriage's one read.
  6. devices      model parallel (cuda:0 + cuda:1 when there are two GPUs, else cuda:0 + CPU):
                  the flags of several devices are read; a NaN on the second device is found.
  7. bundle       a bundle written from CUDA tensors loads back and replays on the model's device.
  8. compile      a torch.compile'd CUDA model with a NaN: still found (skipped if compile fails).
  9. overhead     step time of a small transformer LM under all default checks vs baseline.
 10. late_read    `watch(..., late_read=True)`: no synchronizing call at all in steady-state steps
                  (the flags go non_blocking into pinned memory behind an event, read a step
                  later), a NaN batch at step 3 is named at step 3, and the step time of the
                  small LM with the read in place vs one step late.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import traceback
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

RESULTS: list[tuple[str, bool, str]] = []


def check(name):
    def wrap(fn):
        def run():
            try:
                ok, info = fn()
            except Exception:
                ok, info = False, traceback.format_exc(limit=4)
            RESULTS.append((name, ok, info))
            print(f"{'PASS' if ok else 'FAIL'}  {name:12s} {info}", flush=True)
        return run
    return wrap


def watch(*a, **k):
    import torchtriage

    return torchtriage.watch(*a, on_anomaly="record", report=False, **k)


class LogNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        h = self.drop(torch.relu(self.fc1(x)))
        return self.fc2(torch.log(h - 0.5))  # negative inputs: NaN born here (aten::log)


class DropNet(nn.Module):
    def __init__(self, device="cuda"):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 64), nn.GELU(),
                                 nn.Dropout(0.3), nn.Linear(64, 8)).to(device)

    def forward(self, x):
        return self.net(x)


@check("sentinel")
def sentinel():
    torch.manual_seed(0)
    model = LogNet().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 16, device="cuda"), torch.randint(0, 4, (8,), device="cuda")
    with watch(model, opt) as s:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    f = s.report.primary
    ok = f is not None and f.code.startswith("numerical.") and f.op and "log" in f.op and f.line is not None
    return ok, f"{f.code if f else None} stage={f.stage if f else None} module={f.module if f else None!r} " \
               f"op={f.op if f else None} line={f.line if f else None}"


def _train(steps, instrument, nan_at=None):
    torch.manual_seed(1)
    torch.cuda.manual_seed_all(1)
    model = DropNet()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device="cuda").manual_seed(2)
    losses = []
    ctx = watch(model, opt) if instrument else _Null()
    with ctx:
        for i in range(steps):
            x = torch.randn(16, 32, device="cuda", generator=g)
            if i == nan_at:
                x[0, 0] = float("nan")
            loss = F.mse_loss(model(x), torch.zeros(16, 8, device="cuda"))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
    return torch.stack(losses), [p.detach().clone() for p in model.parameters()], torch.cuda.get_rng_state()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@check("bitwise")
def bitwise():
    a_loss, a_params, a_rng = _train(20, False)
    b_loss, b_params, b_rng = _train(20, True)
    same = torch.equal(a_loss, b_loss) and all(torch.equal(p, q) for p, q in zip(a_params, b_params))
    rng_same = torch.equal(a_rng, b_rng)
    return same and rng_same, f"losses+params identical={same} cuda_rng identical={rng_same}"


@check("replay_rng")
def replay_rng():
    # A NaN at step 3 makes the sentinel replay the step (dropout draws CUDA random numbers);
    # afterwards the CUDA RNG must be where the run without torchtriage has it.
    _, _, a_rng = _train(6, False, nan_at=3)
    _, _, b_rng = _train(6, True, nan_at=3)
    return torch.equal(a_rng, b_rng), f"cuda_rng identical after a replay={torch.equal(a_rng, b_rng)}"


@check("grad_scaler")
def grad_scaler():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**40)
    x, y = torch.randn(16, 32, device="cuda"), torch.randn(16, 8, device="cuda")
    with watch(model, opt) as s:
        for _ in range(12):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    codes = {f.code: f.severity.value for f in s.report.findings}
    bad = [c for c, sev in codes.items() if sev != "info"]
    return "numerical.amp_skipped_step" in codes and not bad, f"findings={codes} scale={scaler.get_scale():.3g}"


@check("syncs")
def syncs():
    torch.manual_seed(0)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from overhead import TinyLM

    model = TinyLM(vocab=1000, d=128, layers=2, heads=4, seq=64).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = torch.randint(0, 1000, (8, 64), device="cuda"), torch.randint(0, 1000, (8, 64), device="cuda")

    def step():
        loss = F.cross_entropy(model(x).reshape(-1, 1000), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    steps = 10
    with watch(model, opt):
        for _ in range(4):  # warm-up: the gradients / silent checks' first steps
            step()
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for _ in range(steps):
                    step()
            finally:
                torch.cuda.set_sync_debug_mode(0)
    n = sum("synchroniz" in str(w.message).lower() for w in caught)
    return n <= steps, f"{n} synchronizing calls in {steps} steady-state steps (allowed: {steps})"


@check("devices")
def devices():
    two = torch.cuda.device_count() >= 2
    d0, d1 = ("cuda:0", "cuda:1") if two else ("cuda:0", "cpu")

    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(16, 32).to(d0)
            self.b = nn.Linear(32, 4).to(d1)

        def forward(self, x, poison=False):
            h = torch.relu(self.a(x.to(d0))).to(d1)
            if poison:
                h = torch.sqrt(h - 1e3)
            return self.b(h)

    torch.manual_seed(0)
    model = Split()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 4, device=d1)
    with watch(model, opt) as s:
        for i in range(5):
            loss = F.mse_loss(model(x, poison=(i == 4)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    f = s.report.primary
    ok = f is not None and f.step == 4 and "grad_norm" in s.series and len(s.series["grad_norm"]) >= 4
    return ok, f"{d0}+{d1}: {f.code if f else None} step={f.step if f else None} op={f.op if f else None}"


@check("bundle")
def bundle():
    import torchtriage

    torch.manual_seed(0)
    model = LogNet().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 16, device="cuda"), torch.randint(0, 4, (8,), device="cuda")
    with tempfile.TemporaryDirectory() as d:
        with watch(model, opt, bundle_dir=d):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        b = torchtriage.load_bundle(d)
        saved = b.meta.get("model", {}).get("device")
        batch = b.batch(next(model.parameters()).device)
        on_device = all(t.device.type == "cuda" for t in batch.args if isinstance(t, torch.Tensor))
        result = torchtriage.replay(b, model, opt)
    return saved == "cuda:0" and on_device and result.reproduced, \
        f"recorded on {saved}, batch back on cuda={on_device}, reproduced={result.reproduced}"


@check("compile")
def compiled():
    torch.manual_seed(0)
    model = LogNet().cuda()
    try:
        cmodel = torch.compile(model)
        cmodel(torch.randn(8, 16, device="cuda"))
    except Exception as e:  # no compiler toolchain here: not torchtriage's to verify
        return True, f"skipped: torch.compile unavailable ({type(e).__name__})"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 16, device="cuda"), torch.randint(0, 4, (8,), device="cuda")
    with watch(cmodel, opt) as s:
        loss = F.cross_entropy(cmodel(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    f = s.report.primary
    return f is not None and f.code.startswith("numerical."), \
        f"{f.code if f else None} module={f.module if f else None!r} op={f.op if f else None}"


@check("overhead")
def overhead():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from overhead import instrument, make, step

    setups = {m: make("transformer", "cuda") for m in ("baseline", "all_checks")}
    times = {m: [] for m in setups}
    for m, (model, opt, batch, loss_fn) in setups.items():
        with instrument(m, model, opt):
            for _ in range(5):
                step(model, opt, batch, loss_fn)
    for _ in range(3):
        for m, (model, opt, batch, loss_fn) in setups.items():
            with instrument(m, model, opt):
                for _ in range(4):
                    step(model, opt, batch, loss_fn)
                for _ in range(10):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    step(model, opt, batch, loss_fn)
                    torch.cuda.synchronize()
                    times[m].append(time.perf_counter() - t0)
    base, full = statistics.median(times["baseline"]), statistics.median(times["all_checks"])
    return True, f"transformer LM step {base * 1e3:.2f} ms, all checks {full * 1e3:.2f} ms, ratio {full / base:.3f}"


@check("late_read")
def late_read():
    torch.manual_seed(0)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from overhead import TinyLM

    model = TinyLM(vocab=1000, d=128, layers=2, heads=4, seq=64).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = torch.randint(0, 1000, (8, 64), device="cuda"), torch.randint(0, 1000, (8, 64), device="cuda")

    def step():
        loss = F.cross_entropy(model(x).reshape(-1, 1000), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    steps = 10
    times = {}
    for late in (False, True):
        with watch(model, opt, checks=["nonfinite"], late_read=late):
            for _ in range(4):
                step()
            torch.cuda.synchronize()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        step()
                    torch.cuda.synchronize()
                    times[late] = (time.perf_counter() - t0) / steps
                finally:
                    torch.cuda.set_sync_debug_mode(0)
        if late:
            n = sum("synchroniz" in str(w.message).lower() for w in caught)
    # a NaN batch at step 3, found at step 4's read and named at step 3
    net = DropNet()
    o = torch.optim.SGD(net.parameters(), lr=0.01)
    with watch(net, o, checks=["nonfinite"], late_read=True) as s:
        for i in range(6):
            xb = torch.randn(8, 32, device="cuda")
            if i == 3:
                xb[0, 0] = float("nan")
            loss = net(xb).sum()
            o.zero_grad()
            loss.backward()
            o.step()
    f = s.report.primary
    named = f is not None and (f.code, f.stage.value, f.step) == ("numerical.nonfinite_read_late", "data", 3)
    return n == 0 and named, (f"{n} synchronizing calls in {steps} steps; finding {f.code if f else None} "
                              f"step {f.step if f else None}; step {times[False] * 1e3:.2f} ms read in place, "
                              f"{times[True] * 1e3:.2f} ms read one step late")


@check("leakage")
def leakage():
    """The runtime leakage check on CUDA: a split of a CPU dataset whose batches move to the GPU,
    redrawn each epoch (held-out rows trained on), with no synchronizing call in the steps."""
    from torch.utils.data import DataLoader, TensorDataset, random_split

    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,)))
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    syncing = 0
    with watch(model, opt) as s:
        for _epoch in range(3):
            train, test = random_split(ds, [0.75, 0.25])
            batches = [(x.cuda(), y.cuda()) for x, y in DataLoader(train, batch_size=64)]
            torch.cuda.synchronize()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    for x, y in batches:
                        loss = F.cross_entropy(model(x), y)
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
                finally:
                    torch.cuda.set_sync_debug_mode(0)
            syncing += sum("synchroniz" in str(w.message).lower() for w in caught)
    codes = sorted(f.code for f in s.report.findings)
    steps = 3 * len(batches)
    ok = codes == ["data.heldout_trained", "data.split_redrawn"] and syncing <= steps
    return ok, f"findings {codes}; {syncing} synchronizing calls in {steps} steps (allowed: {steps})"


def main() -> int:
    if not torch.cuda.is_available():
        print("SKIP: no CUDA")
        return 0
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}")
    for fn in (sentinel, bitwise, replay_rng, grad_scaler, syncs, devices, bundle, compiled, overhead, late_read,
               leakage):
        fn()
    failed = [name for name, ok, _ in RESULTS if not ok]
    print("FAILED: " + ", ".join(failed) if failed else "ALL PASSED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
