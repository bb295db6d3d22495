"""TensorBoard and W&B (issue 18): the run's loss, gradient norm and lr per step, an anomaly
marker at the failing step, and the findings as text, read back from what was written (the
TensorBoard event files through tensorboard's own reader; a W&B offline run's log)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import EXAMPLES, ROOT, run_cli

NAN_SCRIPT = str(EXAMPLES / "nan_in_forward.py")


def _events(logdir):
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    ea = ea_mod.EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def _texts(ea, tag):
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in ea.Tensors(tag)]


def test_run_tensorboard_writes_health_scalars_marker_and_findings(tmp_path):
    pytest.importorskip("tensorboard")
    proc = run_cli("run", "--tensorboard", str(tmp_path / "tb"), NAN_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    ea = _events(tmp_path / "tb")
    assert sorted(ea.Tags()["scalars"]) == ["torchtriage/anomaly", "torchtriage/grad_norm", "torchtriage/loss",
                                            "torchtriage/lr"]
    loss = ea.Scalars("torchtriage/loss")
    assert [e.step for e in loss] == [0, 1, 2, 3, 4]
    assert all(e.value != e.value for e in loss)  # NaN from step 0 on: the script's loss is NaN
    assert [(e.step, e.value) for e in ea.Scalars("torchtriage/lr")] == [(s, pytest.approx(0.01)) for s in range(5)]
    assert [(e.step, e.value) for e in ea.Scalars("torchtriage/anomaly")] == [(0, 1.0)]
    findings = _texts(ea, "torchtriage/findings/text_summary")
    assert len(findings) == 1 and findings[0][0] == 0
    assert "-Inf first produced by aten::log in module encoder.2" in findings[0][1]
    (step, report), = _texts(ea, "torchtriage/report/text_summary")
    assert step == 5 and "== torchtriage report ==" in report and "1 error(s)" in report


def test_watch_tensorboard_clean_run_has_curves_and_no_marker(tmp_path):
    pytest.importorskip("tensorboard")
    import torch
    import torch.nn as nn

    import torchtriage

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with torchtriage.watch(model, opt, report=False, tensorboard=tmp_path / "tb") as session:
        for _ in range(3):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    assert session.report.ok
    ea = _events(tmp_path / "tb")
    assert "torchtriage/anomaly" not in ea.Tags()["scalars"]
    losses = [e.value for e in ea.Scalars("torchtriage/loss")]
    assert losses == pytest.approx(session.report.series["loss"])
    grads = [e.value for e in ea.Scalars("torchtriage/grad_norm")]
    assert grads == pytest.approx(session.report.series["grad_norm"]) and len(grads) == 3
    # lr as the optimizer held it at the end of each step (the scheduler steps after it)
    assert [e.value for e in ea.Scalars("torchtriage/lr")] == pytest.approx([0.1, 0.05, 0.025])
    (step, report), = _texts(ea, "torchtriage/report/text_summary")
    assert (step, report) == (3, "    == torchtriage report ==\n"
                                 "    No finding: nothing looked wrong in what torchtriage watched.")


def test_bad_dashboard_options_are_one_clear_error(tmp_path):
    import torchtriage
    from torchtriage import ConfigError

    with pytest.raises(ConfigError, match=r"^tensorboard=3: expected a log folder \(str or os.PathLike\) or a "
                                          r"torch.utils.tensorboard.SummaryWriter$"):
        torchtriage.watch(tensorboard=3)
    with pytest.raises(ConfigError, match=r"^wandb='yes': expected True \(the active run, or a new one\) or a "
                                          r"wandb run object$"):
        torchtriage.watch(wandb="yes")


WANDB_SCRIPT = textwrap.dedent('''
    import torch, torch.nn as nn
    import torchtriage

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16)
    with torchtriage.watch(model, opt, report=False, wandb=True) as s:
        for _ in range(4):
            loss = nn.functional.mse_loss(model(x), y)  # (16, 1) vs (16,): broadcasts to (16, 16)
            opt.zero_grad()
            loss.backward()
            opt.step()
    print(s.report.series["loss"])
''')


def test_wandb_offline_run_holds_the_series_and_the_findings(tmp_path):
    pytest.importorskip("wandb")
    from _wandb_offline import read_run

    script = tmp_path / "train.py"
    script.write_text(WANDB_SCRIPT, encoding="utf-8")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_DIR=str(tmp_path), WANDB_SILENT="true",
               WANDB_PROJECT="tt-test", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    losses = [float(v) for v in proc.stdout.strip().strip("[]").split(",")]
    history, summary = read_run(str(tmp_path))
    steps = [row for row in history if "torchtriage/loss" in row]
    assert [row["torchtriage/step"] for row in steps] == [0, 1, 2, 3]
    assert [row["torchtriage/loss"] for row in steps] == pytest.approx(losses)
    assert all(row["torchtriage/lr"] == pytest.approx(0.1) and row["torchtriage/grad_norm"] > 0 for row in steps)
    assert ([(r["torchtriage/step"], r["torchtriage/anomaly"]) for r in history if "torchtriage/anomaly" in r]
            == [(0, 1)])
    assert summary["torchtriage/ok"] is False
    assert summary["torchtriage/report"].startswith("== torchtriage report ==\n-- Primary --\n✗ [silent] prediction "
                                                    "[16, 1] and target [16] broadcast to [16, 16] in mse_loss")
    table = summary["torchtriage/findings"]
    assert (table["_type"], table["nrows"], table["ncols"]) == ("table-file", 1, 8)
    import json

    run_dir = next((tmp_path / "wandb").glob("offline-run-*"))
    rows = json.loads((run_dir / "files" / table["path"]).read_text(encoding="utf-8"))
    assert rows["columns"][:4] == ["step", "severity", "category", "code"]
    assert rows["data"][0][:4] == [0, "error", "silent", "silent.loss_broadcast"]


USER_STEPS_SCRIPT = textwrap.dedent('''
    import torch, torch.nn as nn
    import wandb
    import torchtriage

    run = wandb.init(project="tt-test")
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with torchtriage.watch(model, opt, report=False, wandb=True):
        for i in range(4):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            wandb.log({"my/loss": loss.item()}, step=10 * i)  # the user's own step numbers
            wandb.log({"my/every_step": i})  # and a log that commits
    wandb.log({"my/after": 1.0}, step=100)
    run.finish()
''')


def test_wandb_leaves_the_users_own_step_numbers_alone(tmp_path):
    """W&B drops a row whose explicit step is below the run's current step: torchtriage's values
    join the user's rows instead of committing rows that would move the step past the user's."""
    pytest.importorskip("wandb")
    from _wandb_offline import read_run

    (tmp_path / "train.py").write_text(USER_STEPS_SCRIPT, encoding="utf-8")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_DIR=str(tmp_path), WANDB_SILENT="true",
               OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    history, summary = read_run(str(tmp_path))
    assert [r["_step"] for r in history if "my/loss" in r] == [0, 10, 20, 30]  # none dropped
    assert [r["my/every_step"] for r in history if "my/every_step" in r] == [0, 1, 2, 3]
    assert [r["_step"] for r in history if "my/after" in r] == [100]
    ours = [r for r in history if "torchtriage/loss" in r]
    assert [r["torchtriage/step"] for r in ours] == [0, 1, 2, 3]
    assert [r["torchtriage/loss"] for r in ours] == pytest.approx([r["my/loss"] for r in history if "my/loss" in r])
    assert summary["torchtriage/ok"] is True


def test_tensorboard_marks_the_step_of_a_dynamics_finding(tmp_path):
    """The anomaly marker is at the step of each warning, the dynamics checks' too: here a StepLR
    stepped per batch (tests/test_dynamics.py), with the lr curve that shows it."""
    pytest.importorskip("tensorboard")
    import torchtriage
    from zoo import dynamics as z

    models, opts, train = z.loop_epoch_scheduler_stepped_per_batch()
    with torchtriage.watch(models, opts, on_anomaly="record", report=False, tensorboard=tmp_path / "tb") as s:
        train()
    [f] = s.report.filter(code="dynamics.epoch_scheduler_per_batch")
    ea = _events(tmp_path / "tb")
    assert [(e.step, e.value) for e in ea.Scalars("torchtriage/anomaly")] == [(f.step, 1.0)] == [(20, 1.0)]
    lr = [e.value for e in ea.Scalars("torchtriage/lr")]
    assert lr[0] == pytest.approx(0.1) and lr[25] == pytest.approx(0.001) and len(lr) == 64
    [(_, text)] = _texts(ea, "torchtriage/findings/text_summary")
    assert "StepLR is stepped at every optimizer step" in text
