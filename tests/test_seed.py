"""The seed's six questions (chapter 19 Q1–Q6): the seed's own examples, then live objects."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

import torchtriage
from torchtriage import (
    audit_tensor_contract,
    classify_issue,
    debug_priority,
    diagnose_none_grad,
    first_nonfinite_step,
    locate_failure_zone,
)


# Q1 ---------------------------------------------------------------------------------
def test_q1_seed_example_and_clean():
    assert classify_issue(shape_ok=False, dtype_ok=True, device_ok=False, has_nonfinite=True, grad_ok=False) == [
        "shape", "device", "numerical", "gradient"]
    assert classify_issue(True, True, True, False, True) == []
    with pytest.raises(TypeError, match="classify_issue\\(\\) is missing the flag\\(s\\) grad_ok"):
        classify_issue(True, True, True, False)
    with pytest.raises(TypeError, match="unknown flag 'layout_ok'; accepted: shape_ok, dtype_ok"):
        classify_issue(True, True, True, False, True, layout_ok=False)


def test_q1_on_a_live_exception_and_a_report():
    try:
        nn.Linear(4, 2)(torch.zeros(3, 4, dtype=torch.float64))
    except RuntimeError as e:
        assert classify_issue(e) == ["dtype"]
    x = torch.randn(2, 4, 8).transpose(1, 2)
    report = torchtriage.audit_tensor(x, shape="B 4 C", contiguous=True)
    assert classify_issue(report) == ["shape", "layout"]


# Q2 ---------------------------------------------------------------------------------
SEED_EXPECTED = {"shape": (2, 8, 4), "dtype": "torch.float32", "device": "cpu", "contiguous": True}


def test_q2_seed_example_dict_and_live_tensor_agree():
    view = torch.randn(2, 4, 8).transpose(1, 2)
    actual = {"shape": tuple(view.shape), "dtype": str(view.dtype), "device": str(view.device),
              "contiguous": view.is_contiguous()}
    for given in (actual, view):
        report = audit_tensor_contract(given, SEED_EXPECTED)
        assert report["checks"] == {"shape_ok": True, "dtype_ok": True, "device_ok": True, "contiguous_ok": False}
        assert report["first_failure"] == "contiguous_ok"
        assert [k for k, v in report["checks"].items() if not v] == ["contiguous_ok"]


def test_q2_named_dims_and_first_failure_order():
    t = torch.zeros(2, 8, 4, dtype=torch.int64)
    r = audit_tensor_contract(t, {"shape": "B T 5", "dtype": torch.float32, "contiguous": True})
    assert r["checks"] == {"shape_ok": False, "dtype_ok": False, "contiguous_ok": True}
    assert r["first_failure"] == "shape_ok"
    assert audit_tensor_contract(t, {"shape": "B T C"})["dims"] == {"B": 2, "T": 8, "C": 4}
    with pytest.raises(torchtriage.ConfigError, match="contract fields stride are unknown"):
        audit_tensor_contract(t, {"stride": (1,)})
    with pytest.raises(TypeError, match="actual must be a tensor or a dict"):
        audit_tensor_contract([1, 2], SEED_EXPECTED)


# Q3 ---------------------------------------------------------------------------------
SEED_TRACE = [("loss", 1.0), ("activation", 0.9), ("gradient", 0.7), ("gradient", float("nan")), ("gradient", 0.2)]


def test_q3_seed_example_clean_and_type_error():
    f = first_nonfinite_step(SEED_TRACE)
    assert (f["index"], f["source"]) == (3, "gradient") and f["value"] != f["value"]
    assert first_nonfinite_step(SEED_TRACE[:3]) is None
    assert first_nonfinite_step([("a", float("-inf"))])["index"] == 0
    with pytest.raises(TypeError, match="records must be a list in execution order, got tuple"):
        first_nonfinite_step(tuple(SEED_TRACE))
    with pytest.raises(TypeError, match=re.escape("records[1] must be a (source, value) pair, got 3")):
        first_nonfinite_step([("a", 1.0), 3])
    with pytest.raises(TypeError, match=re.escape("records[0]: the value must be a number or a tensor, got str")):
        first_nonfinite_step([("a", "x")])


def test_q3_tensors_from_a_real_model():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    x = torch.randn(3, 4)
    h = model[0](x)
    h2 = torch.log(model[1](h))  # -inf where the ReLU gave 0
    records = [("input", x), ("linear", h), ("log", h2), ("labels", torch.tensor([1, 2]))]
    f = first_nonfinite_step(records)
    assert (f["index"], f["source"]) == (2, "log")
    assert f["evidence"].neginf == int(torch.isneginf(h2).sum()) > 0


# Q4 ---------------------------------------------------------------------------------
def test_q4_seed_cases_and_unknown_case():
    assert [diagnose_none_grad(c) for c in ("detach", "no_grad", "leaf", "unregistered")] == [
        "tensor disconnected from graph", "gradient tracking disabled", "leaf tensor not requiring grad",
        "parameter not registered in module"]
    with pytest.raises(ValueError, match=re.escape(
            "unknown gradient case 'nan'; known cases: detach, no_grad, leaf, unregistered, non_leaf, "
            "inference_mode, unreached")):
        diagnose_none_grad("nan")
    with pytest.raises(TypeError, match="takes a case name"):
        diagnose_none_grad(3)


def test_q4_live_tensors_from_the_seed_example():
    leaf = torch.tensor([1.0], requires_grad=True)
    detached = leaf.detach()
    with torch.no_grad():
        no_grad_value = leaf * 2
    non_leaf = leaf * 3
    non_leaf.sum().backward()
    with torch.inference_mode():
        inferred = leaf * 2
    assert diagnose_none_grad(detached) == "tensor disconnected from graph"
    assert diagnose_none_grad(no_grad_value) == "gradient tracking disabled"
    assert diagnose_none_grad(non_leaf).startswith("non-leaf tensor: its .grad is not kept "
                                                   "unless you call retain_grad()")
    assert diagnose_none_grad(inferred).startswith("created under torch.inference_mode()")
    assert diagnose_none_grad(leaf) == "grad is not None: it exists"

    class BrokenModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.raw_weight = torch.randn(2, 2, requires_grad=True)
            self.frozen = nn.Parameter(torch.ones(2), requires_grad=False)

    broken = BrokenModule()
    assert diagnose_none_grad(broken.raw_weight, module=broken) == "parameter not registered in module"
    assert diagnose_none_grad(broken.frozen) == "leaf tensor not requiring grad"
    assert diagnose_none_grad(broken.fc.weight).startswith("requires grad but no backward reached it")
    broken.fc(torch.zeros(1, 2)).sum().backward()
    assert diagnose_none_grad(broken.fc.weight).startswith("grad is not None but all zero")


# Q5 ---------------------------------------------------------------------------------
def test_q5_seed_example_clean_and_report():
    assert debug_priority(False, True, False, True, False) == {
        "primary": "shape", "rank": 1, "checked": ["shape"],
        "reason": "check the dimension contract of inputs and ops first"}
    assert debug_priority(True, True, True, True, False)["checked"] == ["shape", "dtype", "device", "numerical"]
    ok = debug_priority(shape_ok=True, dtype_ok=True, device_ok=True, has_nonfinite=False, grad_ok=True)
    assert ok == {"primary": "ok", "rank": None, "checked": ["shape", "dtype", "device", "numerical", "gradient"],
                  "reason": "no anomaly found so far"}
    x = torch.randn(2, 4, 8).transpose(1, 2)
    r = debug_priority(torchtriage.audit_tensor(x, contiguous=True))
    assert r == {"primary": "layout", "rank": 4, "checked": ["shape", "dtype", "device", "layout"],
                 "reason": "check layout and contiguity (view, channels_last)"}


def test_q5_in_chinese(monkeypatch):
    from torchtriage import _catalogue

    monkeypatch.setattr(_catalogue, "_lang", "zh")
    assert debug_priority(False, True, False, True, False)["reason"] == "先检查输入和算子的维度契约"
    assert diagnose_none_grad("detach") == "张量已从计算图断开"


# Q6 ---------------------------------------------------------------------------------
def test_q6_seed_examples_and_clean():
    cases = [
        ([{"stage": "loss", "finite": False}, {"stage": "activation", "finite": True},
          {"stage": "gradient", "finite": True}],
         {"zone": "loss", "step": 1, "next_check": "inspect_loss_inputs_and_numeric_range"}),
        ([{"stage": "loss", "finite": True}, {"stage": "activation", "finite": False},
          {"stage": "gradient", "finite": False}],
         {"zone": "activation", "step": 2, "next_check": "inspect_forward_activation"}),
        ([{"stage": "loss", "finite": True}, {"stage": "activation", "finite": True},
          {"stage": "gradient", "finite": False}],
         {"zone": "gradient", "step": 3, "next_check": "return_to_Q4_gradient_chain"}),
        ([{"stage": "loss", "finite": True}], {"zone": "ok", "step": None, "next_check": "continue_monitoring"}),
    ]
    for records, expected in cases:
        assert locate_failure_zone(records) == expected
    with pytest.raises(TypeError, match="records must be a list"):
        locate_failure_zone({"stage": "loss"})
    with pytest.raises(ValueError, match="unknown stage 'optimizer'; known stages: loss, activation, forward"):
        locate_failure_zone([{"stage": "optimizer", "finite": False}])


def test_q6_from_a_report_of_a_watched_run():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError):
        with torchtriage.watch(model, opt, checks=["triage"], on_anomaly="record", report=False) as s:
            for batch in (8, 8, 1):  # the last batch has one sample
                model(torch.randn(batch, 4)).sum().backward()
                opt.step()
    zone = locate_failure_zone(s.report)
    assert (zone["zone"], zone["step"]) == ("activation", 2)
    assert zone["next_check"].startswith("use drop_last=True in the DataLoader")
    assert (locate_failure_zone(torchtriage.Report())
            == {"zone": "ok", "step": None, "next_check": "continue_monitoring"})
