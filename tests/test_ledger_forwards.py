"""Coverage without a DataLoader (`_ledger/_unbackwarded.py`, session 9): training forwards whose
graph never reaches a backward. The bug asserts the exact finding (code, severity, the forward's
line marked `# HERE`, the counts); the clean script holds the look-alikes."""

from __future__ import annotations

from test_ledger import alarms, here, run_script


def test_small_batches_kept_for_accumulation_never_reach_a_backward(tmp_path):
    report, _ = run_script("bug_small_batches_not_backpropagated.py", tmp_path)
    [f] = [f for f in report.findings if f.code == "data.coverage_lost"]
    assert (f.severity.value, f.line) == ("warning", here("bug_small_batches_not_backpropagated.py"))
    ev = f.evidence
    assert (ev["forwards"], ev["never_backpropagated"], ev["rows"], ev["lost_rows"], ev["share"]) == \
        (147, 62, 9408, 3968, 0.4218)
    assert ev["undecided_after_last_backward"] == 3  # after the last backward: the run stopped
    assert f.message == ("3968 of 9408 rows (42.2%) given to the training forward at " + f.file + ":" + str(f.line)
                         + " never reached a backward pass: 62 of its 147 forwards built a graph that no backward "
                         "went through")


def test_summed_losses_and_measurements_are_quiet(tmp_path):
    report, _ = run_script("clean_forwards_backpropagated.py", tmp_path)
    assert [f for f in report.findings if f.code == "data.coverage_lost"] == []
    assert alarms(report) == []
