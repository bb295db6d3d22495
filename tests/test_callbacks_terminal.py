"""The framework callbacks behave like their frameworks (issue 18): the report is printed at
the end of `fit` / `train` when something was found and one line when nothing was, on rank
zero only; a crash inside the HF Trainer's loop is diagnosed in the terminal with the user's
line; the callbacks log to TensorBoard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import ROOT
from test_integrations import NonFiniteLoss, _fit, _lightning_module


def test_lightning_prints_the_report_at_the_end_of_fit(capfd):
    pytest.importorskip("lightning")
    from torchtriage.integrations.lightning import TriageCallback

    L, module = _lightning_module(nan_at_step=1)
    _fit(L, module, TriageCallback(checks=[NonFiniteLoss()]))
    err = capfd.readouterr().err
    assert "== torchtriage report ==\n-- Primary --\n✗ [numerical] loss is -inf\n" in err
    assert "1 error(s), 0 warning(s), 0 info(s) over 3 step(s)" in err


def test_lightning_prints_one_line_when_nothing_was_found(capfd):
    pytest.importorskip("lightning")
    from torchtriage.integrations.lightning import TriageCallback

    L, module = _lightning_module(nan_at_step=None)
    _fit(L, module, TriageCallback(checks=[NonFiniteLoss()]))
    err = capfd.readouterr().err
    assert "torchtriage: nothing found over 3 step(s)\n" in err
    assert "torchtriage report" not in err


def test_lightning_prints_and_writes_only_on_global_rank_zero(capfd, monkeypatch, tmp_path):
    pytest.importorskip("lightning")
    from torchtriage.integrations.lightning import TriageCallback

    L, module = _lightning_module(nan_at_step=1)
    monkeypatch.setattr(L.Trainer, "is_global_zero", property(lambda self: False))
    cb = TriageCallback(checks=[NonFiniteLoss()], json=tmp_path / "r.json")
    _fit(L, module, cb)
    assert cb.report.primary.code == "numerical.test_loss"  # the checks still ran on this rank
    assert "torchtriage" not in capfd.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_lightning_report_false_prints_nothing(capfd):
    pytest.importorskip("lightning")
    from torchtriage.integrations.lightning import TriageCallback

    L, module = _lightning_module(nan_at_step=1)
    _fit(L, module, TriageCallback(checks=[NonFiniteLoss()], report=False))
    assert "torchtriage" not in capfd.readouterr().err
    with pytest.raises(ValueError, match=r'^report=\'always\': expected "auto" \(print the report when something '
                                         r'was found, else one line\), True \(always\) or False \(never\)$'):
        TriageCallback(report="always")


def test_lightning_tensorboard_true_uses_the_trainers_logger(tmp_path):
    L = pytest.importorskip("lightning")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from torchtriage.integrations.lightning import TriageCallback

    _, module = _lightning_module(nan_at_step=None)
    logger = L.pytorch.loggers.TensorBoardLogger(str(tmp_path), name="tb", version=0)
    trainer = L.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=logger, enable_checkpointing=False,
                        log_every_n_steps=1,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[TriageCallback(tensorboard=True, report=False)])
    from test_integrations import _data

    trainer.fit(module, torch.utils.data.DataLoader(_data(), batch_size=4))
    ea = EventAccumulator(logger.log_dir)
    ea.Reload()
    assert [e.step for e in ea.Scalars("torchtriage/loss")] == [0, 1, 2]
    assert [e.value for e in ea.Scalars("torchtriage/lr")] == pytest.approx([0.01] * 3)


HF_CRASH = textwrap.dedent('''
    import torch, transformers
    from torchtriage.integrations.hf import TriageTrainerCallback


    class Reviews(torch.utils.data.Dataset):
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.ids = torch.randint(0, 64, (8, 8), generator=g)
            self.labels = [0, 1, 2, 1, 0, 2, 1, 0]  # three classes in the data

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": torch.tensor(self.labels[i])}


    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=2)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)  # two classes in the model
    args = transformers.TrainingArguments(output_dir="out", max_steps=2, per_device_train_batch_size=4,
                                          report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                                          disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Reviews(),
                                   callbacks=[TriageTrainerCallback(json="triage.json")])
    trainer.train()
''')


def test_hf_trainer_crash_prints_a_diagnosis_in_the_terminal(tmp_path):
    pytest.importorskip("transformers")
    script = tmp_path / "train.py"
    script.write_text(HF_CRASH, encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=240)
    assert proc.returncode == 1
    err = proc.stderr
    report, _, traceback = err.partition("Traceback (most recent call last):")
    lines = report[report.index("== torchtriage report =="):].splitlines()
    assert lines[:4] == [
        "== torchtriage report ==",
        "-- Primary --",
        "✗ [data] loss: target class 2 does not exist for 2 output classes (valid 0..1)",
        "    where: step=1  stage=loss  module=CrossEntropyLoss  op=torch._C._nn.cross_entropy_loss",
    ]
    assert lines[4] == "    your line: train.py:28    trainer.train()"
    assert "      exception: IndexError: Target 2 is out of bounds." in lines
    assert traceback.rstrip().endswith("IndexError: Target 2 is out of bounds.")
    saved = json.loads((tmp_path / "triage.json").read_text(encoding="utf-8"))
    assert saved["findings"][saved["primary"]]["code"] == "data.target_range"


def test_hf_clean_run_prints_one_line(tmp_path, capfd):
    from test_integrations import _gpt2, _train

    transformers, model = _gpt2()
    from torchtriage.integrations.hf import TriageTrainerCallback

    cb = TriageTrainerCallback(checks=[NonFiniteLoss()])
    _train(transformers, model, cb, tmp_path)
    assert "torchtriage: nothing found over 2 step(s)\n" in capfd.readouterr().err
    assert cb.report.findings == ()


def test_hf_prints_only_on_the_main_process(tmp_path, capfd, monkeypatch):
    from test_integrations import _gpt2, _train

    transformers, model = _gpt2()
    from torchtriage.integrations.hf import TriageTrainerCallback

    monkeypatch.setattr(transformers.Trainer, "is_world_process_zero", lambda self: False)
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("nan")
    cb = TriageTrainerCallback(checks=[NonFiniteLoss()], json=tmp_path / "r.json")
    _train(transformers, model, cb, tmp_path, steps=1)
    assert cb.report.primary.code == "numerical.test_loss"
    assert "torchtriage" not in capfd.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_lightning_crash_in_training_step_prints_the_diagnosis_with_the_users_line(capfd):
    L = pytest.importorskip("lightning")
    import torch.nn as nn

    from torchtriage.integrations.lightning import TriageCallback

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            x, _ = batch
            labels = torch.tensor([0, 1, 2, 1])  # three classes, two logits
            return nn.functional.cross_entropy(self.net(x), labels)  # the line under test

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    cb = TriageCallback()
    with pytest.raises(IndexError, match="^Target 2 is out of bounds.$"):
        _fit(L, Classifier(), cb)
    err = capfd.readouterr().err
    lines = err[err.index("== torchtriage report =="):].splitlines()
    assert lines[2] == "✗ [data] loss: target class 2 does not exist for 2 output classes (valid 0..1)"
    assert lines[4].endswith("return nn.functional.cross_entropy(self.net(x), labels)  # the line under test")
    assert lines[4].startswith("    your line: ") and "test_callbacks_terminal.py:" in lines[4]
    assert cb.report.primary.code == "data.target_range"


def test_inside_an_outer_session_the_callback_leaves_printing_to_its_owner(capfd):
    pytest.importorskip("lightning")
    from torchtriage._session import Session
    from torchtriage.integrations.lightning import TriageCallback

    L, module = _lightning_module(nan_at_step=None)
    with Session(discover=True, report=False) as outer:  # as under `torchtriage run`
        _fit(L, module, TriageCallback(checks=[NonFiniteLoss()]))
    assert "torchtriage" not in capfd.readouterr().err
    assert outer.report.meta["steps"] == 3
