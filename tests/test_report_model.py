"""Finding / Report: JSON contract, ordering, evidence serialisation."""

from __future__ import annotations

import json

import pytest
import torch

from torchtriage import Finding, Report, summarize
from torchtriage.report import render_json, render_text

REQUIRED = {"category", "severity", "stage", "step", "module", "op", "parameter", "file", "line",
            "message", "cause", "next_check", "evidence"}


def _nan_tensor():
    return torch.tensor([[1.0, float("nan")], [float("inf"), -float("inf")]])


def test_json_contract_fields_and_roundtrip():
    f = Finding("numerical", "numerical.forward_producer", "log produced -Inf", stage="forward", step=3,
                module="encoder.2", op="aten::log", file="/x/train.py", line=12,
                cause="log of 0", next_check="clamp the input", evidence={"output": summarize(_nan_tensor())})
    data = json.loads(render_json(Report([f])))
    assert data["schema"] == "torchtriage.report/1"
    assert data["primary"] == 0
    (d,) = data["findings"]
    assert set(d) >= REQUIRED
    assert d["evidence"]["output"] == {
        "shape": [2, 2], "dtype": "torch.float32", "device": "cpu", "contiguous": True, "numel": 4,
        "nan": 1, "posinf": 1, "neginf": 1, "min": 1.0, "max": 1.0, "requires_grad": False, "stride": [2, 1]}
    back = Report.from_dict(data)
    assert back.findings[0].module == "encoder.2" and back.findings[0].step == 3


def test_summary_line_is_verifiable_by_hand():
    assert str(summarize(_nan_tensor())) == "float32[2, 2] cpu NaN=1 +Inf=1 -Inf=1 finite min=1 max=1"
    assert str(summarize(torch.arange(6).view(2, 3).t())) == "int64[3, 2] cpu non-contiguous finite min=0 max=5"


def test_empty_report_says_so_and_has_no_primary():
    r = Report()
    assert r.primary is None and r.ok and not r
    assert "No finding" in render_text(r)
    assert json.loads(render_json(r))["findings"] == []


def test_bad_enum_values_name_the_accepted_ones():
    with pytest.raises(ValueError, match=r"Finding.stage='fwd' is not valid; accepted: 'data', 'forward'"):
        Finding("numerical", "x", "y", stage="fwd")
    with pytest.raises(ValueError, match=r"report schema 'other/9' is not supported"):
        Report.from_dict({"schema": "other/9"})
