"""Each split's label encoding (`_ledger/_encoding.py`) and samples repeated across DataLoader
workers (`_ledger/_workers.py`). The scripts in `tests/zoo/encoding` are written as users write
them and run under a discovering session (what `torchtriage run` does); each bug asserts the
exact finding (code, severity, line marked `# HERE`, evidence), each clean script no alarm."""

from __future__ import annotations

import runpy
import sys
import warnings
from pathlib import Path

import torchtriage
from torchtriage import Session

ZOO = Path(__file__).parent / "zoo" / "encoding"


def here(name: str) -> int:
    lines = (ZOO / name).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith("# HERE"))


def run(name: str, tmp_path: Path, checks=("data_ledger",)):
    argv = sys.argv
    sys.argv = [str(ZOO / name), str(tmp_path)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", torchtriage.TriageInternalWarning)
            with Session(discover=True, on_anomaly="record", report=False,
                         checks=list(checks) if checks else "default") as s:
                runpy.run_path(str(ZOO / name), run_name="__main__")
    finally:
        sys.argv = argv
    return s.report


def alarms(report):
    return [(f.code, f.severity.value, f.line) for f in report.findings if f.severity.value in ("warning", "error")]


def one(report, code):
    found = [f for f in report.findings if f.code == code]
    assert len(found) == 1, [(f.code, f.severity.value, f.message) for f in report.findings]
    return found[0]


def test_a_validation_folder_without_a_class_shifts_the_later_labels(tmp_path):
    name = "folder_val_missing_class.py"
    f = one(run(name, tmp_path), "data.label_encoding_mismatch")
    assert (f.severity.value, f.line, f.file) == ("error", here(name), str(ZOO / name))
    ev = f.evidence
    assert ev["attribute"] == "class_to_idx"
    assert ev["shifted_classes"] == {"fox": {"training": 2, "evaluation": 1}}
    assert ev["missing_from_evaluation"] == ["dog"]
    assert (ev["wrong_labels"], ev["evaluation_samples"], ev["checked_by"]) == (6, 12, "imgs (path, index)")
    assert ev["example"]["class"] == "fox" and ev["example"]["training_class_of_label"] == "dog"
    assert "'dog'" in f.cause


def test_a_label2id_built_per_split_from_its_own_labels(tmp_path):
    name = "text_label2id_per_split.py"
    report = run(name, tmp_path, checks=None)  # every default check: the one alarm is this one
    f = one(report, "data.label_encoding_mismatch")
    assert (f.severity.value, f.line) == ("warning", here(name))  # labels read through the map itself
    ev = f.evidence
    assert ev["attribute"] == "label2id" and ev["unknown_to_training"] == ["neutral"]
    assert ev["shifted_classes"] == {"positive": {"training": 1, "evaluation": 2}}
    assert (ev["wrong_labels"], ev["evaluation_samples"], ev["checked_by"]) == (6, 18, "targets")
    assert [a for a in alarms(report) if a[0] != "data.label_encoding_mismatch"] == []


def test_shared_or_remapped_class_indices_stay_quiet(tmp_path):
    report = run("clean_folder_shared_classes.py", tmp_path, checks=None)
    assert alarms(report) == []
    assert not [f for f in report.findings if f.code == "data.label_encoding_mismatch"]


def test_workers_that_copy_the_datasets_generator_repeat_each_others_samples(tmp_path):
    name = "workers_generator_in_dataset.py"
    f = one(run(name, tmp_path), "data.workers_repeat")
    assert (f.severity.value, f.line) == ("warning", here(name))
    ev = f.evidence
    assert (ev["workers"], ev["batches_compared"], ev["samples_compared"]) == (2, 12, 96)
    assert ev["repeated_samples"] == 48  # the second worker's batches copy the first's
    assert ev["generators"] == ["dataset.rs (numpy.RandomState)"]
    assert ev["example"]["same_as_worker"] != ev["example"]["worker"]
    assert "RandomState" in f.cause and "worker_init_fn" in f.next_check


def test_an_iterable_stream_that_every_worker_iterates_in_full(tmp_path):
    name = "workers_iterable_not_sharded.py"
    f = one(run(name, tmp_path), "data.workers_repeat")
    assert (f.severity.value, f.line) == ("warning", here(name))
    assert (f.evidence["workers"], f.evidence["repeated_samples"], f.evidence["samples_compared"]) == (2, 64, 128)
    assert f.evidence["generators"] == [] and "IterableDataset" in f.cause


def test_workers_seeded_apart_stay_quiet(tmp_path):
    report = run("clean_workers_seeded.py", tmp_path, checks=None)
    assert alarms(report) == []
    assert not [f for f in report.findings if f.code == "data.workers_repeat"]


def test_a_validation_subset_of_the_augmented_dataset_evaluates_random_views(tmp_path):
    name = "eval_subset_of_augmented.py"
    f = one(run(name, tmp_path), "data.eval_inputs_random")
    assert (f.severity.value, f.line) == ("warning", here(name))
    ev = f.evidence
    assert ev["samples_compared"] == 30 and ev["samples_changed"] == 30 and ev["loader"] == "val_loader"
    assert "transform" in f.cause


def test_an_evaluation_dataset_of_its_own_that_draws_pairs_at_random_is_an_info(tmp_path):
    """No training loader reads it: nothing says the random draws harm the metric (an info)."""
    name = "eval_random_pairs_own_dataset.py"
    f = one(run(name, tmp_path), "data.eval_inputs_random")
    assert (f.severity.value, f.line) == ("info", here(name))
    assert f.evidence["dataset_shared_with_training"] is False and f.evidence["samples_changed"] >= 16


def test_deterministic_evaluation_and_random_token_masking_stay_quiet(tmp_path):
    report = run("clean_eval_deterministic.py", tmp_path, checks=None)
    assert not [f for f in report.findings if f.code == "data.eval_inputs_random"]
    assert alarms(report) == []


def test_a_validation_split_flipped_at_random_measures_the_same_values_an_info(tmp_path):
    """Mirrored or not, each test image holds the same pixel values in every pass: no other views
    of the data, nothing says the metric is noise (an info, not a warning)."""
    name = "eval_subset_flipped_only.py"
    f = one(run(name, tmp_path), "data.eval_inputs_random")
    assert (f.severity.value, f.line) == ("info", here(name))
    ev = f.evidence
    assert ev["dataset_shared_with_training"] is True and ev["samples_with_other_values"] == 0
    assert ev["samples_changed"] >= 8
