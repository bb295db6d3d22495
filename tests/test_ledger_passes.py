"""The data ledger's evaluation passes (issue 25): each pass over an evaluation loader sees each
of its samples once. Scripts in `tests/zoo/ledger`, written as users write them; each bug
asserts the exact finding (code, severity, loader, counts, line marked `# HERE`)."""

from __future__ import annotations

import json

import pytest
import torch

from test_ledger import ZOO, here, run_script

PASS_CODES = {"data.eval_duplicates", "data.eval_lost"}


def test_an_evaluation_loader_with_drop_last_leaves_samples_out(tmp_path):
    # (session 12) the same 8 rows, the tail of the split, are missing from both passes: a warning
    report, _ = run_script("bug_eval_drop_last.py", tmp_path)
    [f] = [f for f in report.findings if f.code in PASS_CODES]
    assert (f.code, f.severity.value, f.line) == ("data.eval_lost", "warning", here("bug_eval_drop_last.py"))
    assert (f.evidence["passes"], f.evidence["never_evaluated"]) == (2, 8)
    assert f.evidence["never_evaluated_rows"] == [192, 199]
    assert (f.evidence["loader"], f.evidence["samples"], f.evidence["delivered"], f.evidence["lost"]) == \
        ("val_loader", 200, 192, 8)
    assert f.message == ("evaluation loader 'val_loader' (" + f.evidence["loader_at"] + ") leaves the same 8 of "
                         "its 200 samples (4.0%, rows 192..199) out of every one of its 2 pass(es): the metric is "
                         "computed on 192 samples chosen by their position, not on the split it names")


def test_evaluation_passes_that_see_each_sample_once_are_quiet(tmp_path):
    report, _ = run_script("clean_eval_passes.py", tmp_path)
    assert [f.code for f in report.findings if f.code in PASS_CODES] == []


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is needed")
def test_ddp_validation_padded_by_the_distributed_sampler(tmp_path):
    from _torchrun import torchrun

    out = tmp_path / "report.json"
    res = torchrun(["-m", "torchtriage", "run", "--json", str(out), str(ZOO / "ddp_eval_padded.py")],
                   cwd=tmp_path, timeout=120, env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / "run")})
    assert res.returncode == 0, res.stderr
    report = json.loads(out.read_text())
    [f] = [f for f in report["findings"] if f["code"] in PASS_CODES]
    assert (f["code"], f["severity"], f["line"]) == ("data.eval_duplicates", "warning", here("ddp_eval_padded.py"))
    ev = f["evidence"]
    assert (ev["ranks"], ev["samples"], ev["delivered"], ev["distinct"], ev["duplicated"], ev["example_repeated"]) == \
        (2, 21, 22, 21, 1, 0)
    assert "DistributedSampler pads" in f["cause"]
    assert "ledger_passes" not in report["meta"]


# ---------------------------------------------------------------- samples without an index
def test_a_generator_of_batches_over_overlapping_ranges(tmp_path):
    report, _ = run_script("bug_generator_overlap.py", tmp_path)
    [f] = [f for f in report.findings if f.code == "data.split_overlap"]
    assert (f.severity.value, f.line) == ("error", here("bug_generator_overlap.py"))
    assert (f.evidence["count"], f.evidence["evaluation_samples"], f.evidence["matched"]) == (200, 400, "content")


def test_iterable_datasets_with_workers_out_of_order_over_overlapping_ranges(tmp_path):
    report, _ = run_script("bug_iterable_overlap.py", tmp_path)
    [f] = [f for f in report.findings if f.code == "data.split_overlap"]
    assert (f.severity.value, f.line) == ("error", here("bug_iterable_overlap.py"))
    assert (f.evidence["evaluation_loader"], f.evidence["training_loader"]) == ("val_loader", "train_loader")
    assert (f.evidence["count"], f.evidence["evaluation_samples"], f.evidence["matched"]) == (100, 200, "content")


def test_disjoint_generators_a_train_accuracy_pass_and_an_agent_are_quiet(tmp_path):
    report, _ = run_script("clean_generator.py", tmp_path)
    assert [f.code for f in report.findings if f.code.startswith("data.")] == []
