"""Transparent and safe (issue 10): with torchtriage attached, every operation of the catalogue
(tests/zoo/transparency.py: copy, pickle, save, script, trace, export, compile, torch.func,
parametrizations, moves, the module's own API and hooks, data loading, anomaly mode, profiler)
has the same outcome as without it — the same result bitwise, or the same exception type and
message — under `watch` (global module hooks, and root hooks only), under `torchtriage run`,
mid-training, and after the session ended."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchtriage
from conftest import run_cli
from zoo import transparency as T

CATALOGUE = Path(T.__file__)


@pytest.fixture(scope="module")
def baseline():
    return T.run_catalogue()


def _differences(expected, got):
    return {name: (expected[name], got.get(name)) for name in expected if got.get(name) != expected[name]}


def _watching(**kw):
    return lambda w: torchtriage.watch(w.model, w.opt, on_anomaly="record", report=False, **kw)


def test_the_catalogue_covers_the_issue():
    assert len(T.CASES) >= 30
    assert {"deepcopy_model", "pickle_model", "torch_save_module", "jit_script", "jit_trace", "torch_export",
            "compile_eager", "func_transforms", "dataloader_spawn_worker", "profiler"} <= set(T.CASES)


def test_baseline_outcomes_are_the_expected_ones(baseline):
    # The catalogue means what it says: these work without torchtriage, these raise.
    raised = sorted(k for k, v in baseline.items() if v[0] == "raise")
    assert raised == ["detect_anomaly_nan", "load_state_dict_strict", "torch_load_module_weights_only"]
    assert (baseline["detect_anomaly_nan"][1:3]
            == ["RuntimeError", "Function 'MulBackward0' returned nan values in its 0th output."])


@pytest.mark.parametrize("checks", ["default", "nonfinite"], ids=["global_hooks", "root_hooks"])
def test_same_outcomes_under_watch_mid_training(baseline, checks):
    got = T.run_catalogue(_watching(checks=checks if checks == "default" else [checks]))
    assert not _differences(baseline, got)


def test_same_outcomes_after_the_session(baseline):
    got = T.run_catalogue(_watching(), after=True)
    assert not _differences(baseline, got)
    from torch.nn.modules import module as m

    # torch forgets the with_kwargs flag of a removed global hook; we remove it ourselves.
    assert not m._has_any_global_hook(), {k: v for k, v in vars(m).items() if k.startswith("_global_") and v}


def test_same_outcomes_under_run(tmp_path):
    env_cmd = [sys.executable, str(CATALOGUE)]
    plain = subprocess.run(env_cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert plain.returncode == 0, plain.stderr
    run = run_cli("run", "--json", str(tmp_path / "r.json"), str(CATALOGUE), cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    expected, got = json.loads(plain.stdout), json.loads(run.stdout)
    assert not _differences(expected, got)
    assert json.loads((tmp_path / "r.json").read_text())["findings"] == []


def test_the_issue_reproduction_under_watch():
    # The issue's four operations, three steps into a watched loop, on the watched model itself.
    import copy
    import io
    import pickle

    w = T.World()
    with torchtriage.watch(w.model, w.opt, checks=["nonfinite"], report=False) as s:
        for _ in range(3):
            w.step()
        assert s._global_module_hooks is False  # root hooks only: on the user's module
        assert len(w.model._forward_hooks) == 1
        c = copy.deepcopy(w.model)
        p = pickle.loads(pickle.dumps(w.model))
        assert b"torchtriage" not in pickle.dumps(w.model)  # loads where torchtriage is not installed
        torch.save(w.model, io.BytesIO())
        torch.jit.script(w.model)
        assert len(w.model._forward_hooks) == 1  # still watched
        assert (len(c._forward_hooks), len(p._forward_pre_hooks), len(c._forward_hooks_always_called)) == (0, 0, 0)
    assert "__reduce_ex__" not in vars(torch.nn.Module)


BEST_MODEL_SCRIPT = """\
import copy
import torch, torch.nn as nn, torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(64, 4), torch.randint(0, 2, (64,))
best, best_loss = None, float("inf")
for step in range(8):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if loss.item() < best_loss:
        best, best_loss = copy.deepcopy(model), loss.item()
    print(f"step {step} loss {loss.item():.6f}")
torch.save(best, "best.pt")
again = torch.load("best.pt", weights_only=False)
print("best", best_loss, torch.equal(again(x), best(x)))
"""


def test_deepcopy_best_model_script_same_output_under_run(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(BEST_MODEL_SCRIPT, encoding="utf-8")
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert plain.returncode == 0, plain.stderr
    run = run_cli("run", str(script), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == plain.stdout
    assert "No finding" in run.stderr, run.stderr


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="the inductor backend needs a C++ compiler on CPU")
def test_compile_inductor_same_outcome_under_watch_and_run(tmp_path):
    """torch.compile's default backend (a C++ compile: kept out of the catalogue's every-mode
    loop), a training step and an inference through it, mid-training."""
    names = ["compile_inductor"]
    T.run_catalogue(names=names)  # the first compile in a process imports modules that warn once
    expected = T.run_catalogue(names=names)
    assert expected["compile_inductor"][0] == "ok", expected
    assert not _differences(expected, T.run_catalogue(_watching(), names=names))
    plain = subprocess.run([sys.executable, str(CATALOGUE), *names], capture_output=True, text=True, cwd=tmp_path,
                           timeout=600)
    assert plain.returncode == 0, plain.stderr
    run = run_cli("run", "--json", str(tmp_path / "r.json"), str(CATALOGUE), *names, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    assert not _differences(json.loads(plain.stdout), json.loads(run.stdout))
    assert json.loads((tmp_path / "r.json").read_text())["findings"] == []


def test_a_checks_own_module_hooks_stay_out_of_copies(tmp_path):
    """The distributed check's stall-tracker hooks on a DDP model (local functions: they do not
    pickle) are left out of its copies, pickles and `torch.save`, as the root hooks are."""
    import copy
    import io
    import pickle

    import torch.distributed as dist

    from torchtriage._distributed._collectives import Tracker
    from torchtriage._distributed._ddp import DDPWatch

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 3))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        with torchtriage.watch(ddp, opt, checks=["nonfinite"], report=False):
            watch = DDPWatch(ddp, flags=None, tracker=Tracker())  # what the check attaches at world size >= 2
            ddp(torch.randn(2, 4)).sum().backward()
            hooks = (len(ddp._forward_pre_hooks), len(ddp._forward_hooks))
            copies = [pickle.loads(pickle.dumps(ddp)), copy.deepcopy(ddp)]
            buf = io.BytesIO()
            torch.save(ddp, buf)
            buf.seek(0)
            copies.append(torch.load(buf, weights_only=False))
            watch.remove()
        assert hooks == (2, 2)  # the root hooks and the tracker's
        assert [(len(c._forward_pre_hooks), len(c._forward_hooks)) for c in copies] == [(0, 0)] * 3
    finally:
        dist.destroy_process_group()
