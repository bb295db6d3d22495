"""A weighted sampler's weights are per sample (`_ledger/_weights.py`, session 9). Scripts in
`tests/zoo/ledger`, written as users write them; the bug asserts the exact finding (code,
severity, the sampler's line marked `# HERE`, the counts)."""

from __future__ import annotations

from test_ledger import alarms, here, run_script


def test_a_sampler_given_one_weight_per_class_draws_two_samples(tmp_path):
    report, _ = run_script("bug_sampler_class_weights.py", tmp_path)
    [f] = [f for f in report.findings if f.code == "data.sampler_weights_length"]
    assert (f.severity.value, f.line) == ("warning", here("bug_sampler_class_weights.py"))
    ev = f.evidence
    assert (ev["weights_length"], ev["dataset_size"], ev["draws"], ev["epochs"]) == (2, 600, 1800, 3)
    assert (ev["distinct_drawn"], ev["never_drawn"], ev["unreachable"]) == (2, 598, 598)
    assert f.message == ("the WeightedRandomSampler of training loader 'train_loader' (" + ev["loader_at"] + ") "
                         "holds 2 weights for a dataset of 600 samples: over 1800 draws it reached 2 distinct "
                         "samples, 598 never drawn (99.7% of the dataset cannot be drawn at all)")
    assert "one weight per class" in f.cause


def test_per_sample_weights_are_quiet(tmp_path):
    report, _ = run_script("clean_sampler_sample_weights.py", tmp_path)
    assert [f for f in report.findings if f.code == "data.sampler_weights_length"] == []
    assert alarms(report) == []


def test_every_tensor_of_a_loader_batch_is_the_loaders(tmp_path):
    """A batch of two sequences feeds two forwards; the second is no hand-fed input, so the
    training batches measured under no_grad (train vs val loss, reported side by side) are not
    compared by token windows with the training forwards (session 9: a DPO false alarm)."""
    report, _ = run_script("clean_pair_batches_eval_on_train.py", tmp_path)
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []
    assert alarms(report) == []
