"""The repro commands end to end, in subprocesses: a NaN-producing script writes a bundle,
`replay` reproduces it, `shrink` finds the poisoned sample, `make-test` writes a test that
fails on the broken model and passes on the fixed one; `env`; bad input exits 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import run_cli
from torchtriage._cli import main

TESTS = str(Path(__file__).resolve().parent)


@pytest.fixture
def cli(monkeypatch, capsys):
    """`torchtriage ARGS` in this process (same code path as the command, no interpreter
    start-up): returns (exit code, stdout, stderr). Factory modules are forgotten after."""

    def call(*args, cwd):
        monkeypatch.chdir(cwd)
        before = set(sys.modules)
        try:
            code = main(list(args))
        finally:
            for name in set(sys.modules) - before:
                if name in ("mymodel", "small"):
                    del sys.modules[name]
            if str(cwd) in sys.path:
                sys.path.remove(str(cwd))
        out = capsys.readouterr()
        return code, out.out, out.err

    return call

FACTORY = """
import sys
sys.path.insert(0, {tests!r})
import torch
from zoo.repro import {model} as Model, NonFiniteOutputFlag


def make():
    torch.manual_seed(3)
    model = Model()
    return {{"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            "checks": [NonFiniteOutputFlag()]}}
"""

TRAIN = """
import sys
import torch
import torchtriage
from mymodel import make
from zoo.repro import zero_sample_batch

parts = make()
model, opt = parts["model"], parts["optimizer"]
with torchtriage.watch(model, opt, checks=parts["checks"] + ["repro"], bundle_dir=sys.argv[1],
                       on_anomaly="record", report=False):
    for step in range(3):
        x, y = zero_sample_batch(64, 37, seed=step)
        if step != 1:
            x[37] = 1.0
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""

CRASH = """
import sys
sys.path.insert(0, {tests!r})
import torch
from zoo.repro import RaisesOnNegativeSample

torch.manual_seed(0)
model = RaisesOnNegativeSample()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.rand(16, 8) + 0.1
    if step == 1:
        x[5] = -1.0
    loss = torch.nn.functional.mse_loss(model(x), torch.randn(16, 1))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _write_factory(folder: Path, model: str) -> None:
    (folder / "mymodel.py").write_text(FACTORY.format(tests=TESTS, model=model))


@pytest.fixture(scope="module")
def nan_bundle(tmp_path_factory):
    """A real script (python train.py BUNDLE) that produces NaN at step 1 writes a bundle."""
    d = tmp_path_factory.mktemp("nan")
    _write_factory(d, "ZeroNormDivides")
    (d / "train.py").write_text(TRAIN)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "train.py", "bundle"], cwd=d, capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"torchtriage: repro bundle written to {d / 'bundle'} (test.nonfinite_output at step 1" in p.stderr
    return d


def test_script_writes_bundle_and_replay_reproduces(nan_bundle, cli):
    code, out, err = cli("replay", "bundle", "--factory", "mymodel:make", cwd=nan_bundle)
    assert code == 1, err  # 1: the finding came back (git bisect: "bad")
    assert out.splitlines()[0] == "reproduced: numerical/test.nonfinite_output module='' op='forward'"
    assert "model output is not finite" in err  # the replay's report


def test_shrink_cli_finds_the_poisoned_sample(nan_bundle, cli):
    code, out, err = cli("shrink", "bundle", "--factory", "mymodel:make", "--out", "minimal", cwd=nan_bundle)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("shrink: replay 1: 64 sample(s)") and lines[0].endswith("-> reproduced")
    m = re.match(r"shrink: (\d+) replays; 1 of 64 sample\(s\) remain: \[37\]; sequence prefix: -; "
                 r"minimal bundle written to minimal$", lines[-1])
    assert m and int(m.group(1)) <= 13 and int(m.group(1)) == len(lines) - 1
    import torchtriage

    assert torchtriage.load_bundle(nan_bundle / "minimal").batch().args[0].shape == (1, 8)


def test_generated_test_fails_on_the_bug_and_passes_after_the_fix(nan_bundle, tmp_path, cli):
    work = tmp_path / "proj"
    work.mkdir()
    _write_factory(work, "ZeroNormDivides")
    code, out, err = cli("make-test", str(nan_bundle / "bundle"), "--factory", "mymodel:make", "--out", "regress",
                         cwd=work)
    assert code == 0, err
    test = work / "regress" / "test_test_nonfinite_output.py"
    assert out.splitlines()[-1] == ("make-test: wrote regress/test_test_nonfinite_output.py, regress/FIX.md "
                                         "and the minimal bundle regress/test_nonfinite_output_bundle")
    fix = (work / "regress" / "FIX.md").read_text()
    assert "# Fix record: numerical/test.nonfinite_output module='' op='forward'" in fix
    assert "- samples [37] of the original batch of 64; sequence prefix -" in fix
    for heading in ("## Symptom", "## Minimal input", "## Cause", "## Change", "## Results"):
        assert heading in fix

    def pytest_run():
        env = dict(os.environ, OMP_NUM_THREADS="1")
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                              cwd=work, capture_output=True, text=True, env=env, timeout=120)

    before = pytest_run()
    assert before.returncode == 1, before.stdout + before.stderr
    assert "AssertionError: reproduced: numerical/test.nonfinite_output" in before.stdout
    _write_factory(work, "ClampedNorm")  # the fix
    after = pytest_run()
    assert after.returncode == 0, after.stdout + after.stderr
    assert "1 passed" in after.stdout


def test_run_bundle_then_replay_and_shrink_through_the_script(tmp_path, cli):
    (tmp_path / "crash.py").write_text(CRASH.format(tests=TESTS))
    p = run_cli("run", "--bundle", "b", "crash.py", cwd=tmp_path)
    assert p.returncode == 1
    assert "ValueError: negative sample reached the model" in p.stderr
    assert "repro bundle written to" in p.stderr and "(ValueError at step 1" in p.stderr
    call = torch.nn.Module.__call__
    code, out, err = cli("replay", "b", cwd=tmp_path)  # the recorded script rebuilds the model
    assert torch.nn.Module.__call__ is call  # the replay's interception is removed
    assert code == 1, err
    assert out.splitlines()[0] == "reproduced: ValueError: negative sample reached the model"
    code, out, err = cli("shrink", "b", cwd=tmp_path)
    assert code == 0, err
    assert "1 of 16 sample(s) remain: [5]" in out.splitlines()[-1]


def test_env_command_prints_the_block(monkeypatch, cli, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    code, stdout, _ = cli("env", cwd=tmp_path)
    assert code == 0
    out = stdout.splitlines()
    assert out[0].startswith("torchtriage ")
    assert f"torch       {torch.__version__}" in out
    assert any(line.startswith("CUDA        ") for line in out)
    assert any(line.startswith("devices     ") and "cpu (" in line for line in out)
    assert "CUDA_VISIBLE_DEVICES=3" in stdout
    assert f"  torch=={torch.__version__}" in out


def test_bad_input_is_one_line_and_exit_2(nan_bundle, tmp_path, cli):
    code, _, err = cli("replay", str(tmp_path / "nope"), "--factory", "mymodel:make", cwd=nan_bundle)
    assert (code, err) == (2, f"torchtriage: error: bundle {tmp_path / 'nope'}: not found\n")
    code, _, err = cli("replay", "bundle", "--factory", "mymodel", cwd=nan_bundle)
    assert (code, err) == (2, "torchtriage: error: --factory 'mymodel': expected MODULE:FUNCTION, "
                                           "e.g. mymodels:make_model\n")
    small = tmp_path / "small.py"
    small.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        from zoo.repro import ZeroNormDivides

        def make():
            return ZeroNormDivides(features=4)
        """))
    code, _, err = cli("replay", str(nan_bundle / "bundle"), "--factory", "small:make", cwd=tmp_path)
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("torchtriage: error: the model does not match the bundle's state (model "
                               "ZeroNormDivides, bundle recorded ZeroNormDivides): shape differs: fc.weight")


def test_the_shipped_nan_example_end_to_end_with_the_default_script(tmp_path, cli):
    """`run --bundle` on examples/nan_in_forward.py, then replay / make-test from the CLI with
    the recorded script; the generated test fails now and passes once the example's log is fixed."""
    from conftest import EXAMPLES

    proj = tmp_path / "proj"
    proj.mkdir()
    script = proj / "nan_in_forward.py"
    script.write_text((EXAMPLES / "nan_in_forward.py").read_text())
    code, out, err = cli("run", "--bundle", "b", "nan_in_forward.py", cwd=proj)
    assert code == 0 and out.splitlines()[0] == "step 0: loss nan"
    assert f"torchtriage: repro bundle written to {proj / 'b'} (numerical.nonfinite_forward at step 0, " in err
    expected = "numerical/numerical.nonfinite_forward module='encoder.2' op='aten::log'"
    code, out, err = cli("replay", "b", cwd=proj)  # default --script: the recorded one
    assert (code, out.splitlines()[0]) == (1, f"reproduced: {expected}"), err
    # the script's model no longer fits the bundle: bad input (exit 2, one line), never "not reproduced"
    (proj / "wider.py").write_text(script.read_text().replace("nn.Linear(16, 1)", "nn.Linear(16, 2)"))
    code, out, err = cli("replay", "b", "--script", "wider.py", cwd=proj)
    assert (code, out, err) == (2, "", "torchtriage: error: the model does not match the bundle's state (model Net, "
                                       "bundle recorded Net): shape differs: head.weight bundle (1, 16) vs model "
                                       "(2, 16), head.bias bundle (1,) vs model (2,)\n")
    code, out, err = cli("make-test", "b", "--out", "regress", cwd=proj)
    assert code == 0, err
    assert out.splitlines()[-1] == ("make-test: wrote regress/test_numerical_nonfinite_forward.py, regress/FIX.md "
                                    "and the minimal bundle regress/numerical_nonfinite_forward_bundle")
    test = proj / "regress" / "test_numerical_nonfinite_forward.py"
    # the script is found relative to the test, so the test survives moving the project
    assert "SCRIPT = str((HERE / '../nan_in_forward.py').resolve())" in test.read_text()
    moved = tmp_path / "moved"
    proj.rename(moved)
    test = moved / "regress" / test.name
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def pytest_run():
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                              cwd=moved, capture_output=True, text=True, env=env, timeout=120)

    before = pytest_run()
    assert before.returncode == 1 and f"AssertionError: reproduced: {expected}" in before.stdout, before.stdout
    fixed = moved / "nan_in_forward.py"
    fixed.write_text(fixed.read_text().replace("return torch.log(x)", "return torch.log(x.clamp_min(1e-6))"))
    after = pytest_run()
    assert after.returncode == 0 and "1 passed" in after.stdout, after.stdout + after.stderr
    # bad bundles from the CLI: one line naming the file, exit 2
    bundle = moved / "b"
    with open(bundle / "batch.safetensors", "ab") as fh:
        fh.write(b"\x00")
    code, _, err = cli("replay", str(bundle), cwd=moved)
    assert code == 2 and err.startswith(f"torchtriage: error: bundle {bundle}: batch.safetensors does not match its "
                                        "SHA-256 checksum (") and len(err.splitlines()) == 1
    (bundle / "evil.pkl").write_bytes(b"\x80\x04K\x01.")
    code, _, err = cli("shrink", str(bundle), cwd=moved)
    assert (code, err) == (2, f"torchtriage: error: bundle {bundle}: evil.pkl looks like a pickle payload (by its name "
                              "or its structure); a torchtriage bundle never holds pickles, and opening one could run "
                              "code, so the bundle is refused\n")
