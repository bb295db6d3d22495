"""`torchtriage.diff` (issue 28): each pair of `diff_programs.py` differs by one silent bug, and
the report names the first op where the runs part and the changed line; a refactor that only
changes the code's layout reports no divergence; two unrelated programs are "structurally
different"."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import diff_programs as P
import torchtriage
from torchtriage._diff._align import align
from torchtriage._diff._fingerprint import fingerprint, same_value
from torchtriage._diff._weights import map_state

SOURCE = Path(P.__file__).read_text().splitlines()


def changed_line(tag: str) -> int:
    return next(i for i, text in enumerate(SOURCE, 1) if f"# changed ({tag})" in text)


def first(report: torchtriage.Report) -> torchtriage.Finding:
    assert report.primary is not None, str(report)
    assert report.primary.code == "diff.diverged", str(report)
    return report.primary


def test_softmax_over_the_wrong_dimension():
    f = first(torchtriage.diff(P.softmax_step(-1), P.softmax_step(1), P.batch(), steps=2))
    assert (f.step, f.stage.value, f.op, f.line) == (0, "forward", "aten::_softmax", changed_line("softmax"))
    assert f.evidence["differs"] == "value"
    assert f.evidence["A arguments"] == "dim=-1, half_to_float=False"
    assert f.evidence["B arguments"] == "dim=1, half_to_float=False"
    assert f.message == ("the runs part at step 0 (forward): aten::_softmax in the step's own code gives other "
                         "values in B than in A (beyond the float32 tolerance)")


def test_missing_detach():
    f = first(torchtriage.diff(P.detach_step(True), P.detach_step(False), P.batch(), steps=2))
    assert (f.op, f.line, f.evidence["differs"]) == ("aten::detach", changed_line("detach"), "op")
    assert f.message == "the runs part at step 0 (loss): A runs aten::detach, B runs nothing there"
    assert f.evidence["A line"].endswith("target = teacher(x).detach() if detach else teacher(x)  # changed (detach)")


def test_reduction_mean_changed_to_sum():
    report = torchtriage.diff(P.reduction_step("mean"), P.reduction_step("sum"), P.batch(), steps=2)
    f = first(report)
    assert (f.op, f.line, f.stage.value) == ("aten::sum", changed_line("reduction"), "loss")
    assert f.message == "the runs part at step 0 (loss): A runs aten::mean, B runs aten::sum"
    params = report.filter(code="diff.params")[0]
    assert params.step == 0 and params.evidence["parameters"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_layer_order_swapped():
    f = first(torchtriage.diff(P.order_step(False), P.order_step(True), P.batch(), steps=2))
    assert (f.line, f.evidence["differs"], f.module) == (changed_line("order"), "op", "norm")
    assert f.message == "the runs part at step 0 (forward): A runs nothing there, B runs aten::native_layer_norm [norm]"


def test_dropout_left_on():
    f = first(torchtriage.diff(P.dropout_step(True), P.dropout_step(False), P.batch(), steps=2))
    assert f.evidence["mode"] == "A runs Sequential in eval mode, B in training mode"
    assert f.module == "1"  # backbone[1], the Dropout
    assert f.cause == "a module runs in eval mode in one run and in training mode in the other"


def test_mask_inverted():
    f = first(torchtriage.diff(P.mask_step(False), P.mask_step(True), P.batch(), steps=2))
    assert (f.op, f.line, f.evidence["differs"]) == ("aten::bitwise_not", changed_line("mask"), "op")


def test_target_shifted_by_one():
    f = first(torchtriage.diff(P.shift_step(True), P.shift_step(False), P.tokens(), steps=2))
    assert (f.op, f.line, f.evidence["differs"], f.stage.value) == ("aten::slice", changed_line("shift"), "value",
                                                                     "loss")
    assert f.evidence["A arguments"] == "dim=1, start=1, end=9223372036854775807"
    assert f.evidence["B arguments"] == "dim=1, start=0, end=-1"


def test_layout_only_refactor_reports_no_divergence():
    report = torchtriage.diff(P.layout_step(False), P.layout_step(True), P.batch(), steps=3)
    assert report.ok, str(report)
    assert [f.code for f in report] == ["diff.same", "diff.init"]
    init = report.filter(code="diff.init")[0]
    assert init.message == "B's initial weights were set from A's: 4 of 4 tensors, matched by order"
    assert report.series["loss A"] == pytest.approx(report.series["loss B"], rel=1e-6)


def test_unrelated_programs_are_structurally_different():
    report = torchtriage.diff(P.layout_step(False), P.conv_step(), P.batch(), steps=2)
    f = report.primary
    assert f is not None and f.code == "diff.structure", str(report)
    assert f.message.startswith("the programs are structurally different: only ")
    assert "A runs model(float32[4, 8]), B runs model(float32[4, 6, 8])" in f.message
    assert not report.filter(code="diff.diverged")


def test_the_same_program_twice_agrees_and_keeps_numerics():
    report = torchtriage.diff(P.softmax_step(-1), P.softmax_step(-1), P.batch(), steps=2)
    assert report.ok and report.findings[0].code == "diff.same"
    assert report.series["loss A"] == report.series["loss B"]  # bitwise: same ops, same weights


def test_fingerprint_tells_permutations_and_tolerates_regrouped_sums():
    x = torch.randn(5, 5)
    assert not same_value(fingerprint(x), fingerprint(x.t()), "torch.float32")
    y = torch.randn(1000)
    regrouped = (y.view(10, 100).sum(0) * 1.0).sum()
    assert same_value(fingerprint(y.sum()), fingerprint(regrouped), "torch.float32")
    assert not same_value(fingerprint(torch.tensor([1, 2])), fingerprint(torch.tensor([1, 3])), "torch.int64")


def test_parameters_map_by_name_then_shape_and_order():
    a = [("fc1.weight", [[16, 8]]), ("fc1.bias", [[16]])]
    assert map_state(a, a) == ([("fc1.weight", "fc1.weight"), ("fc1.bias", "fc1.bias")], "name")
    b = [("inp.weight", [[16, 8]]), ("inp.bias", [[16]])]
    assert map_state(a, b) == ([("fc1.weight", "inp.weight"), ("fc1.bias", "inp.bias")], "order")


def test_an_op_moved_between_independent_lines_is_no_difference():
    def ev(op, value):
        return {"s": 0, "g": "forward", "m": "", "o": op, "k": "op", "f": None, "a": "",
                "out": [[[2], "torch.float32", [value, value, abs(value), 0.0, 0.0, 0.0]]], "r": False}

    ra = {"ops": [ev("aten::exp", 1.0), ev("aten::sin", 2.0), ev("aten::add", 3.0)]}
    rb = {"ops": [ev("aten::sin", 2.0), ev("aten::exp", 1.0), ev("aten::add", 3.0)]}
    result = align(ra, rb)
    assert result.first is None and result.pairs == 3 and not result.structural


def test_a_step_function_that_trains_nothing_is_bad_input():
    with pytest.raises(ValueError, match="^step_fn_a ran no training step that torchtriage could see"):
        torchtriage.diff(lambda: None, lambda: None, steps=1)


def test_a_run_that_raises_where_the_other_goes_on():
    f = first(torchtriage.diff(P.metric_step(True), P.metric_step(False), P.batch(), steps=2))
    # (after step 0's update: the ops between two steps count for the next one)
    assert (f.step, f.line, f.evidence["differs"]) == (1, changed_line("metric"), "error")
    assert f.message.startswith("the runs part at step 1: B raises RuntimeError: mean(): could not infer output "
                                "dtype"), f.message
    assert f.message.endswith(", where A goes on")
