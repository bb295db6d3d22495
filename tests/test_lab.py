"""`torchtriage lab`: four common faults, diagnosed by torchtriage's own checks."""

from __future__ import annotations

import importlib
import json

import torch

import torchtriage
from conftest import run_cli


def _has(name: str) -> bool:
    return hasattr(importlib.import_module("torchtriage"), name)


def test_lab_prints_what_the_checks_found():
    proc = run_cli("lab")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == ("torchtriage lab: four common faults (a broadcast loss, a cut graph, an exp overflow, a "
                        "writer in both splits), run in memory and diagnosed by torchtriage's checks")
    assert lines[1] == "  broadcast: shape (3, 3), MSE=1.333333 against aligned MSE=0.000000   [silent.loss_broadcast]"
    assert lines[2].startswith("  cut graph (item() rebuilt as a tensor): backward broken: True; "
                               "kept-graph gradient=4.0   [")
    assert lines[2].endswith("[autograd]") != _has("diagnose_gradients")
    assert lines[3] == ("  exp overflow: direct exp all finite: False; stable softmax sum=1.000000   "
                        "[silent.exp_overflow]")
    if _has("check_splits"):
        assert lines[4].startswith("  writer in both splits: writers shared by train and test: ['writer-a']   [")
    else:
        assert lines[4] == "  splits: missing: the check check_splits is not part of this build"
    found = 4 if _has("check_splits") else 3
    assert lines[5].startswith(f"{found}/4 faults diagnosed")


def test_lab_values_come_from_the_checks():
    from torchtriage._cli import lab

    broadcast, item, exp, splits = lab.run_lab()
    # the values are the checks' evidence, not constants of the lab
    independent = torchtriage.check_loss_broadcast(torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([1.0, 2.0, 3.0]))
    drop = lambda ev: {k: v for k, v in ev.items() if k != "source_line"}  # noqa: E731
    assert drop(broadcast.findings[0]["evidence"]) == drop(independent.primary.to_dict()["evidence"])
    assert broadcast.values == {"shape": (3, 3), "wrong": "1.333333", "right": "0.000000"}
    assert item.values == {"broken": True, "grad": "4.0"}
    assert exp.values == {"finite": False, "total": "1.000000"}
    assert splits.status == ("found" if _has("check_splits") else "missing")


def test_lab_json_and_chinese():
    proc = run_cli("lab", "--json")
    data = json.loads(proc.stdout)
    assert [d["status"] for d in data][:3] == ["found", "found", "found"]
    assert data[0]["findings"][0]["code"] == "silent.loss_broadcast"
    zh = run_cli("--lang", "zh", "lab")
    assert "广播：形状 (3, 3)，MSE=1.333333，对齐后 MSE=0.000000" in zh.stdout
