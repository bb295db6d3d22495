"""W&B through the framework callbacks (issue 18 §2), read back from offline runs: Lightning's
`TriageCallback(wandb=True)` beside a `WandbLogger`, and HF's `TriageTrainerCallback(wandb=True)`
beside the Trainer's own `report_to=["wandb"]`. In both, torchtriage writes into the framework's
run (one run, not a second one), on its own step axis, beside the framework's own metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

LIGHTNING = textwrap.dedent('''
    import torch, torch.nn as nn
    import lightning as L
    from lightning.pytorch.loggers import WandbLogger
    from torchtriage.integrations.lightning import TriageCallback


    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y.squeeze(1))  # (4, 1) vs (4,): broadcasts to (4, 4)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)


    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g))
    torch.manual_seed(0)
    cb = TriageCallback(wandb=True, report=False)
    trainer = L.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=WandbLogger(project="tt", offline=True),
                        log_every_n_steps=1, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[cb])
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
''')

HF = textwrap.dedent('''
    import torch
    import transformers
    from torchtriage.integrations.hf import TriageTrainerCallback


    class Tokens(torch.utils.data.Dataset):
        def __init__(self):
            self.ids = torch.randint(0, 64, (8, 8), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}


    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(output_dir="out", max_steps=3, per_device_train_batch_size=4,
                                          learning_rate=1e-3, lr_scheduler_type="linear", report_to=["wandb"],
                                          logging_steps=1, save_strategy="no", use_cpu=True, disable_tqdm=True)
    cb = TriageTrainerCallback(wandb=True, report=False)
    transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb]).train()
''')


def _offline(tmp_path, code):
    pytest.importorskip("wandb")
    from _wandb_offline import read_run

    (tmp_path / "train.py").write_text(code, encoding="utf-8")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_DIR=str(tmp_path), WANDB_SILENT="true",
               WANDB_PROJECT="tt-test", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # read_run asserts there is exactly one run: the callback wrote into the framework's
    history, summary = read_run(str(tmp_path))
    ours = {r["torchtriage/step"]: r for r in history if "torchtriage/loss" in r}
    return proc, history, summary, ours


def _findings_table(tmp_path, summary):
    table = summary["torchtriage/findings"]
    run_dir = next((tmp_path / "wandb").glob("offline-run-*"))
    return json.loads((run_dir / "files" / table["path"]).read_text(encoding="utf-8"))["data"]


def test_lightning_callback_writes_into_the_wandb_loggers_run(tmp_path):
    pytest.importorskip("lightning")
    _, history, summary, ours = _offline(tmp_path, LIGHTNING)
    lightning_loss = {r["trainer/global_step"]: r["train_loss"] for r in history if "train_loss" in r}
    assert sorted(ours) == sorted(lightning_loss) == [0, 1, 2]
    # the same losses Lightning logged, step for step; the lr the optimizer held; a gradient norm
    assert [ours[s]["torchtriage/loss"] for s in range(3)] == pytest.approx([lightning_loss[s] for s in range(3)])
    assert all(ours[s]["torchtriage/lr"] == pytest.approx(0.05) and ours[s]["torchtriage/grad_norm"] > 0
               for s in range(3))
    assert [(r["torchtriage/step"], r["torchtriage/anomaly"]) for r in history if "torchtriage/anomaly" in r] == [
        (0, 1)]
    assert summary["torchtriage/ok"] is False
    assert summary["torchtriage/report"].startswith("== torchtriage report ==\n-- Primary --\n✗ [silent] prediction "
                                                    "[4, 1] and target [4] broadcast to [4, 4] in mse_loss")
    [row] = _findings_table(tmp_path, summary)
    assert row[:5] == [0, "error", "silent", "silent.loss_broadcast", "loss"]
    assert row[6] == f"{tmp_path / 'train.py'}:15"


def test_hf_callback_writes_into_the_trainers_wandb_run(tmp_path):
    pytest.importorskip("transformers")
    _, history, summary, ours = _offline(tmp_path, HF)
    # the Trainer logs after its optimizer step: its global step s + 1 is torchtriage's step s
    hf = {r["train/global_step"] - 1: r for r in history if "train/loss" in r}
    assert sorted(ours) == sorted(hf) == [0, 1, 2]
    assert [ours[s]["torchtriage/loss"] for s in range(3)] == pytest.approx([hf[s]["train/loss"] for s in range(3)])
    # the Trainer makes two parameter groups (with and without weight decay): one lr series each
    assert [ours[s]["torchtriage/lr/optimizer0/group0"] for s in range(3)] == pytest.approx(
        [hf[s]["train/learning_rate"] for s in range(3)])
    assert [ours[s]["torchtriage/lr/optimizer0/group1"] for s in range(3)] == pytest.approx([1e-3, 2e-3 / 3, 1e-3 / 3])
    # the norm of what the optimizer applied: after the Trainer's clipping to max_grad_norm=1
    assert all(hf[s]["train/grad_norm"] > 1 and ours[s]["torchtriage/grad_norm"] == pytest.approx(1.0, abs=1e-4)
               for s in range(3))
    assert not any("torchtriage/anomaly" in r for r in history)
    assert summary["torchtriage/ok"] is True
    assert summary["torchtriage/report"] == ("== torchtriage report ==\n"
                                             "No finding: nothing looked wrong in what torchtriage watched.")
    assert _findings_table(tmp_path, summary) == []


def test_hf_callback_writes_tensorboard_event_files(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from test_integrations import _gpt2, _train

    transformers, model = _gpt2()
    from torchtriage.integrations.hf import TriageTrainerCallback

    cb = TriageTrainerCallback(tensorboard=tmp_path / "tb", report=False)
    _train(transformers, model, cb, tmp_path, steps=3)
    ea = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    assert [e.step for e in ea.Scalars("torchtriage/loss")] == [0, 1, 2]
    assert [e.value for e in ea.Scalars("torchtriage/loss")] == pytest.approx(cb.report.series["loss"])
    assert [e.value for e in ea.Scalars("torchtriage/grad_norm")] == pytest.approx(cb.report.series["grad_norm"])
    # the Trainer's linear schedule from 5e-5, read after each optimizer step (two parameter groups)
    assert [e.value for e in ea.Scalars("torchtriage/lr/optimizer0/group0")] == pytest.approx(
        [5e-5, 5e-5 * 2 / 3, 5e-5 / 3])
    assert "torchtriage/anomaly" not in ea.Tags()["scalars"]
    (report,) = [e.tensor_proto.string_val[0].decode() for e in ea.Tensors("torchtriage/report/text_summary")]
    assert "No finding" in report
