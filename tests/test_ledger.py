"""The data ledger (issue 25): every sample followed per loader, epoch and rank. Each script in
`tests/zoo/ledger` is written as users write it and run under a discovering session (what
`torchtriage run` does) or the CLI; each bug asserts the exact finding (code, severity, loader,
count, line marked `# HERE`); each clean script asserts that nothing is a warning or error."""

from __future__ import annotations

import json
import runpy
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import torchtriage
from conftest import run_cli
from torchtriage import Session

ZOO = Path(__file__).parent / "zoo" / "ledger"


def here(name: str) -> int:
    lines = (ZOO / name).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith("# HERE"))


def run_script(name: str, tmp_path: Path, checks=("data_ledger",), source: str | None = None):
    path = ZOO / name
    if source is not None:
        path = tmp_path / name
        path.write_text(source)
    argv = sys.argv
    sys.argv = [str(path), str(tmp_path)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", torchtriage.TriageInternalWarning)
            with Session(discover=True, on_anomaly="record", report=False,
                         checks=list(checks) if checks else "default") as s:
                ns = runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = argv
    return s.report, ns


def ledger_findings(report):
    return [f for f in report.findings if f.code.startswith("data.") and f.code in CODES]


CODES = {"data.coverage_lost", "data.order_repeated", "data.split_overlap", "data.ranks_overlap",
         "data.group_overlap"}


def alarms(report):
    return [(f.code, f.severity.value, f.message) for f in report.findings if f.severity.value in ("warning", "error")]


# ---------------------------------------------------------------- coverage
def test_batches_skipped_by_a_continue_are_lost_coverage(tmp_path):
    report, _ = run_script("bug_skip_continue.py", tmp_path)
    [f] = ledger_findings(report)
    assert (f.code, f.severity.value, f.line) == ("data.coverage_lost", "warning", here("bug_skip_continue.py"))
    assert f.evidence["loader"] == "train_loader"
    assert (f.evidence["samples"], f.evidence["lost_samples"], f.evidence["epochs"]) == (768, 192, 3)
    assert f.evidence["lost_batches_first_epoch"] == [3, 7, 11, 15] and f.evidence["batches_per_epoch"] == 16
    assert f.message == ("192 of 768 samples (25.0%) that loader 'train_loader' delivered in 3 complete epoch(s) "
                         "never reached a backward pass (4 of 16 batches in the first such epoch)")
    assert f.cause.startswith("the loop skips batches before their loss is backpropagated (if i % 4 == 3:  # HERE)")


def test_batches_skipped_by_a_label_condition_with_workers_and_a_custom_sampler(tmp_path):
    report, _ = run_script("bug_skip_by_label.py", tmp_path)
    [f] = ledger_findings(report)
    assert (f.code, f.severity.value, f.line) == ("data.coverage_lost", "warning", here("bug_skip_by_label.py"))
    assert (f.evidence["samples"], f.evidence["lost_samples"]) == (640, 512)
    assert f.evidence["lost_batches_first_epoch"] == list(range(4, 20))
    assert f.evidence["example_indices"][:2] == [64, 65]  # the first rows of batch 4: negatives only
    assert f.evidence["skips"] == [f"continue at line {here('bug_skip_by_label.py')}: if yb.sum() == 0:  # HERE"]


def test_lost_coverage_is_counted_with_out_of_order_workers(tmp_path):
    source = (ZOO / "bug_skip_continue.py").read_text().replace(
        "batch_size=16, shuffle=True)", "batch_size=16, shuffle=True, num_workers=2, in_order=False)")
    report, _ = run_script("bug_skip_continue.py", tmp_path, source=source)
    [f] = ledger_findings(report)
    assert (f.code, f.severity.value, f.line) == ("data.coverage_lost", "warning", here("bug_skip_continue.py"))
    assert (f.evidence["samples"], f.evidence["lost_samples"]) == (768, 192)
    assert f.evidence["example_indices"] == []  # out of order: the indices cannot be told


def test_correct_loops_that_drop_accumulate_or_stop_early_stay_quiet(tmp_path):
    report, _ = run_script("clean_loops.py", tmp_path)
    assert alarms(report) == []
    # the final partial batch skipped by size is what drop_last does: an info, with its line
    [f] = ledger_findings(report)
    assert (f.code, f.severity.value, f.evidence["loader"]) == ("data.coverage_lost", "info", "by_size")
    assert (f.evidence["samples"], f.evidence["lost_samples"]) == (400, 16)


FUNCTIONAL_EVAL_WITH_GRAD = """
import torch, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, Xt = torch.randn(512, 8), torch.randn(256, 8)
y, yt = (X[:, 0] > 0).long(), (Xt[:, 0] > 0).long()
params = {"w": (0.1 * torch.randn(2, 8)).requires_grad_(), "b": torch.zeros(2, requires_grad=True)}
f = lambda x: F.linear(x, params["w"], params["b"])      # a functional model: no nn.Module, no eval()
opt = torch.optim.SGD(list(params.values()), lr=0.1)
train_loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
test_loader = DataLoader(TensorDataset(Xt, yt), batch_size=64)
for epoch in range(3):
    for xb, yb in train_loader:
        def closure():
            loss = F.cross_entropy(f(xb), yb)
            loss.backward()
            return loss
        opt.zero_grad()
        opt.step(closure)
    correct = sum((f(xb).argmax(1) == yb).sum().item() for xb, yb in test_loader)   # grad on, no backward
    print(epoch, correct / len(Xt))
"""


def test_an_evaluation_pass_with_gradients_on_is_not_lost_coverage(tmp_path):
    # Each test pass ends as the next training epoch begins: the next epoch's first backward is
    # not the test pass's last batch's.
    report, _ = run_script("functional_eval.py", tmp_path, source=FUNCTIONAL_EVAL_WITH_GRAD)
    assert ledger_findings(report) == []


# ---------------------------------------------------------------- order
def test_distributed_sampler_without_set_epoch_repeats_the_order(tmp_path):
    report, _ = run_script("bug_sampler_set_epoch.py", tmp_path)
    [f] = ledger_findings(report)
    assert (f.code, f.severity.value, f.line) == ("data.order_repeated", "warning", here("bug_sampler_set_epoch.py"))
    assert f.evidence["epochs_repeated"] == [1, 2] and f.evidence["sampler_epoch"] == [0]
    assert f.evidence["sampler"] == "DistributedSampler" and f.evidence["samples_per_epoch"] == 64
    assert "set_epoch() was never called (its epoch stayed 0)" in f.cause
    assert f.next_check.startswith("call sampler.set_epoch(epoch)")


def test_set_epoch_each_epoch_is_quiet(tmp_path):
    report, _ = run_script("clean_sampler_set_epoch.py", tmp_path)
    assert ledger_findings(report) == []


def test_a_loader_rebuilt_with_a_seeded_generator_each_epoch(tmp_path):
    report, _ = run_script("bug_seeded_loader_each_epoch.py", tmp_path)
    [f] = ledger_findings(report)
    name = "bug_seeded_loader_each_epoch.py"
    assert (f.code, f.severity.value, f.line) == ("data.order_repeated", "warning", here(name))
    assert f.evidence["epochs_repeated"] == [1, 2, 3] and f.evidence["sampler"] == "RandomSampler"
    assert "re-seeded with the same seed" in f.cause


# ---------------------------------------------------------------- splits
def _split(report, name):
    [f] = ledger_findings(report)
    assert (f.code, f.line) == ("data.split_overlap", here(name))
    return f


def test_numpy_index_arrays_that_overlap(tmp_path):
    report, ns = run_script("bug_numpy_index_overlap.py", tmp_path)
    f = _split(report, "bug_numpy_index_overlap.py")
    shared = set(ns["train_idx"].tolist()) & set(ns["val_idx"].tolist())
    assert f.severity.value == "error" and f.evidence["matched"] == "index"
    assert (f.evidence["count"], f.evidence["evaluation_samples"]) == (len(shared), 120) == (40, 120)
    assert f.evidence["example"] in shared
    assert (f.evidence["evaluation_loader"], f.evidence["training_loader"]) == ("val_loader", "train_loader")
    assert f.message.startswith("40 of 120 samples (33.3%) that loader 'val_loader'")


def test_pandas_masks_that_overlap(tmp_path):
    report, ns = run_script("bug_pandas_mask.py", tmp_path)
    f = _split(report, "bug_pandas_mask.py")
    assert f.severity.value == "error" and f.evidence["matched"] == "content"
    assert (f.evidence["count"], f.evidence["evaluation_samples"]) == (40, 120)
    assert (f.evidence["evaluation_loader"], f.evidence["training_loader"]) == ("valid_dl", "train_dl")


def test_slices_of_one_image_array_that_overlap(tmp_path):
    report, _ = run_script("bug_slices.py", tmp_path)
    f = _split(report, "bug_slices.py")
    assert f.severity.value == "error" and f.evidence["matched"] == "content"
    assert (f.evidence["count"], f.evidence["evaluation_samples"]) == (50, 150)


def test_a_second_dataset_read_from_the_same_file(tmp_path):
    report, _ = run_script("bug_second_dataset_same_file.py", tmp_path)
    f = _split(report, "bug_second_dataset_same_file.py")
    assert f.severity.value == "error" and f.evidence["matched"] == "content"
    assert (f.evidence["count"], f.evidence["evaluation_samples"]) == (240, 300)


def test_a_custom_sampler_over_indices_that_include_training_rows(tmp_path):
    report, ns = run_script("bug_custom_sampler_overlap.py", tmp_path)
    f = _split(report, "bug_custom_sampler_overlap.py")
    shared = set(ns["val_ids"]) & set(ns["train_ids"])
    assert f.severity.value == "error" and f.evidence["matched"] == "index"
    assert (f.evidence["count"], f.evidence["evaluation_samples"]) == (len(shared), len(ns["val_ids"]))
    assert f.evidence["example"] in shared


def test_a_validation_loader_that_reads_the_test_set(tmp_path):
    report, _ = run_script("bug_val_is_test.py", tmp_path)
    f = _split(report, "bug_val_is_test.py")
    assert f.severity.value == "warning"
    assert (f.evidence["validation_loader"], f.evidence["test_loader"]) == ("val_loader", "test_loader")
    assert (f.evidence["count"], f.evidence["test_samples"]) == (80, 80)


def test_validation_and_test_pairs_that_share_an_entity_profile_stay_quiet(tmp_path):
    """Disjoint pairs (a cell line and a drug) whose first field, the cell line's profile, repeats
    across the pairs: content equal within a split says nothing about a sample shared."""
    report, _ = run_script("clean_val_test_pairs.py", tmp_path)
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


def test_correct_splits_and_a_train_accuracy_pass_stay_quiet(tmp_path):
    report, _ = run_script("clean_splits.py", tmp_path)
    assert ledger_findings(report) == []


def test_with_every_default_check_the_overlap_is_an_error_once(tmp_path):
    report, _ = run_script("bug_numpy_index_overlap.py", tmp_path, checks=())
    errors = [f for f in report.findings if f.category.value == "data" and f.severity.value == "error"]
    assert len(errors) == 1, errors


# ---------------------------------------------------------------- frontends
def test_run_cli_reports_lost_coverage(tmp_path):
    out = tmp_path / "report.json"
    res = run_cli("run", "--json", str(out), str(ZOO / "bug_skip_continue.py"), cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    found = [f for f in json.loads(out.read_text())["findings"] if f["code"] == "data.coverage_lost"]
    assert [(f["severity"], f["line"], f["evidence"]["lost_samples"]) for f in found] == \
        [("warning", here("bug_skip_continue.py"), 192)]


def test_watch_follows_loaders_made_before_it_and_a_generator_is_left_alone():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def batches():  # a loader written by hand: not a DataLoader, not followed
        for _ in range(4):
            yield torch.randn(8, 4), torch.randn(8, 1)

    with torchtriage.watch(model, opt, report=False, on_anomaly="record", checks=["data_ledger"]) as s:
        for _ in range(2):
            for i, (x, y) in enumerate(loader):
                if i >= 4:
                    continue
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            for x, y in batches():
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    [f] = [f for f in s.report.findings if f.code == "data.coverage_lost"]
    assert (f.severity.value, f.evidence["lost_samples"], f.evidence["samples"]) == ("warning", 64, 128)


def test_hooks_are_removed_on_exit_and_on_exceptions():
    from torch.utils.data import dataloader

    before = {n: dataloader._BaseDataLoaderIter.__dict__[n] for n in ("__init__", "_next_index", "__next__")}
    made = DataLoader.__dict__["__init__"]
    with pytest.raises(ZeroDivisionError):
        with Session(checks=["data_ledger"], report=False):
            for _ in DataLoader(TensorDataset(torch.zeros(4, 2)), batch_size=2):
                raise ZeroDivisionError
    assert {n: dataloader._BaseDataLoaderIter.__dict__[n] for n in before} == before
    assert DataLoader.__dict__["__init__"] is made


# ---------------------------------------------------------------- ranks
@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is needed")
def test_ddp_ranks_that_train_on_the_same_samples(tmp_path):
    from _torchrun import torchrun

    out = tmp_path / "report.json"
    res = torchrun(["-m", "torchtriage", "run", "--json", str(out), str(ZOO / "ddp_no_sampler.py")],
                   cwd=tmp_path, timeout=120, env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / "run")})
    assert res.returncode == 0, res.stderr
    report = json.loads(out.read_text())
    [f] = [f for f in report["findings"] if f["code"] == "data.ranks_overlap"]
    assert (f["severity"], f["line"]) == ("warning", here("ddp_no_sampler.py"))
    assert f["evidence"]["ranks"] == [0, 1] and f["evidence"]["overlap"] == f["evidence"]["epoch_samples"] == 96
    assert f["evidence"]["sampler"] == "RandomSampler" and f["evidence"]["ddp"] is True
    assert "ledger" not in report["meta"]
    assert not list(tmp_path.glob("run*/*")), "the run directory is left behind"


# ---------------------------------------------------------------- groups
def test_patients_of_a_dataframe_split_row_by_row(tmp_path):
    report, ns = run_script("bug_groups_dataframe.py", tmp_path)
    [f] = ledger_findings(report)
    shared = set(ns["train_df"].patient_id) & set(ns["val_df"].patient_id)
    assert (f.code, f.severity.value, f.line) == ("data.group_overlap", "warning", here("bug_groups_dataframe.py"))
    assert f.evidence["key"] == "patient_id" and f.evidence["samples_per_group"] == 8.0
    assert f.evidence["shared_groups"] == len(shared)
    assert f.evidence["evaluation_groups"] == ns["val_df"].patient_id.nunique()
    assert set(f.evidence["examples"]) <= shared
    assert "names a group and each value is shared by 8.0 samples" in f.evidence["why_a_group"]


def test_speakers_of_dict_samples_split_by_utterance(tmp_path):
    report, ns = run_script("bug_groups_dict_batch.py", tmp_path)
    [f] = ledger_findings(report)
    assert (f.code, f.severity.value, f.line) == ("data.group_overlap", "warning", here("bug_groups_dict_batch.py"))
    items = ns["data"].items
    val = {items[i]["speaker"] for i in ns["val_set"].indices}
    train = {items[i]["speaker"] for i in ns["train_set"].indices}
    assert f.evidence["key"] == "speaker"
    assert (f.evidence["shared_groups"], f.evidence["evaluation_groups"]) == (len(val & train), len(val))


def test_a_split_by_group_is_quiet(tmp_path):
    report, _ = run_script("clean_groups.py", tmp_path)
    assert ledger_findings(report) == []


def test_lightning_training_step_that_returns_none_for_some_batches():
    # Lightning skips the backward of a training_step that returns None; its loop counts the
    # batches and never exhausts the sampler.
    L = pytest.importorskip("lightning")
    from torchtriage.integrations.lightning import TriageCallback

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch, i):
            if i % 3 == 2:
                return None
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    X = torch.randn(112, 4)
    y = X.sum(1, keepdim=True)
    cb = TriageCallback(on_anomaly="record", checks=["data_ledger"])
    trainer = L.Trainer(max_epochs=3, callbacks=[cb], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), DataLoader(TensorDataset(X[:96], y[:96]), batch_size=8, shuffle=True),
                    DataLoader(TensorDataset(X[96:], y[96:]), batch_size=8))
    [f] = [f for f in cb.report.findings if f.code in CODES]
    assert (f.code, f.severity.value) == ("data.coverage_lost", "warning")
    assert (f.evidence["samples"], f.evidence["lost_samples"]) == (288, 96)
    assert f.evidence["lost_batches_first_epoch"] == [2, 5, 8, 11]
