"""An average's denominator is the count of what the loop summed (`_ledger/_denominator.py`,
session 9). Scripts in `tests/zoo/ledger`, written as users write them; each bug asserts the exact
finding (code, severity, line marked `# HERE`, the counts and the factor)."""

from __future__ import annotations

from test_ledger import alarms, here, run_script


def _found(report):
    return [f for f in report.findings if f.code == "data.mean_denominator"]


def test_a_short_validation_divided_by_its_maximum_length(tmp_path):
    report, _ = run_script("bug_short_validation_denominator.py", tmp_path)
    [f] = _found(report)
    assert (f.severity.value, f.line) == ("warning", here("bug_short_validation_denominator.py"))
    ev = f.evidence
    assert (ev["denominator"], ev["denominator_value"], ev["pass_batches"], ev["pass_samples"]) == \
        ("short_length", 20, 5, 40)
    assert (ev["closest_count"], ev["factor"]) == ("batches", 0.25)
    assert f.message == ("a sum over the pass is divided by short_length = 20, but the pass delivered 5 batches "
                         "of 40 samples: the mean is 0.25 times the mean over the batches summed")


def test_a_sampled_part_divided_by_the_whole_dataset(tmp_path):
    report, _ = run_script("bug_subset_sum_over_dataset.py", tmp_path)
    [f] = _found(report)
    assert (f.severity.value, f.line) == ("warning", here("bug_subset_sum_over_dataset.py"))
    ev = f.evidence
    assert (ev["denominator"], ev["denominator_value"], ev["pass_samples"], ev["factor"]) == \
        ("len(val_loader.dataset)", 500, 100, 0.2)


def test_denominators_that_count_what_was_summed_are_quiet(tmp_path):
    report, _ = run_script("clean_denominators.py", tmp_path)
    assert _found(report) == []
    assert alarms(report) == []


def test_a_phase_loop_dividing_each_total_by_its_own_loader_is_quiet(tmp_path):
    """`for x, y in loaders[phase]` runs a training and a validation pass; after both, each total is
    divided by its own loader's length: another loader's count is that pass's mean."""
    report, _ = run_script("clean_phase_loop_denominators.py", tmp_path)
    assert _found(report) == []
    assert alarms(report) == []
