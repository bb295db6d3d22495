"""Notebooks (issue 18), with a real kernel: `%load_ext torchtriage`, the `%%torchtriage` cell
magic running the cell under a discovering session and displaying the report below it (HTML
and a plain-text fallback), a crash in the cell diagnosed, and `Report._repr_html_`."""

from __future__ import annotations

import json
import re
import sys

import pytest

from conftest import ROOT

NAN_CELL = '''%%torchtriage
import torch
import torch.nn as nn


class LogFeatures(nn.Module):
    def forward(self, x):
        return torch.log(x)  # x can be 0 after the ReLU


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), LogFeatures(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    loss = nn.functional.mse_loss(model(torch.randn(32, 8)), torch.randn(32, 1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained", step + 1, "steps")'''

CRASH_CELL = '''%%torchtriage --lang en
import torch
import torch.nn as nn

clf = nn.Linear(4, 2)
opt = torch.optim.SGD(clf.parameters(), lr=0.1)
labels = torch.tensor([0, 1, 2, 1])  # three classes, two logits
loss = nn.functional.cross_entropy(clf(torch.randn(4, 4)), labels)'''

CLEAN_CELL = '''%%torchtriage
net = nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    nn.functional.mse_loss(net(torch.randn(4, 3)), torch.randn(4, 1)).backward()
    opt.step()'''


def _kernel(tmp_path, monkeypatch):
    """A kernelspec for this interpreter (the venv's python, our sources first on its path)."""
    spec = tmp_path / "jupyter" / "kernels" / "tt-python"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "torchtriage test kernel", "language": "python",
        "env": {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"},
    }), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return "tt-python"


def execute(cells, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    client = nbclient.NotebookClient(nb, kernel_name=_kernel(tmp_path, monkeypatch), timeout=120,
                                     startup_timeout=60, allow_errors=True,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    return nb


def _displays(cell):
    return [o for o in cell.outputs if o.output_type in ("display_data", "execute_result")]


def test_cell_magic_shows_the_report_below_the_cell(tmp_path, monkeypatch):
    # one kernel for every case (a kernel start is the slow part)
    nb = execute(["%load_ext torchtriage", NAN_CELL, CRASH_CELL, CLEAN_CELL,
                  "from torchtriage._notebook import last_report\nlast_report",
                  "%%torchtriage --on-anomaly explode\nx = 1"], tmp_path, monkeypatch)
    load, nan, crash, clean, last, bad = nb.cells
    assert load.outputs == []

    # the NaN cell: its own output, then the report (HTML and the text fallback)
    streams = [o.text for o in nan.outputs if o.output_type == "stream"]
    assert streams == ["trained 3 steps\n"]
    (shown,) = _displays(nan)
    assert set(shown.data) == {"text/html", "text/plain"}
    text = shown.data["text/plain"]
    assert text.startswith("== torchtriage report ==\n-- Primary --\n✗ [numerical] -Inf first produced by "
                           "aten::log in module 2 during the forward pass (step 0)\n")
    html = shown.data["text/html"]
    assert re.match(r'<div class="torchtriage-report" id="(tt[0-9a-f]{8}-report)" lang="en">'
                    r'<style>\n?#\1 table, ', html)
    assert '<section class="card error primary">' in html and "numerical.nonfinite_forward" in html
    assert "<script" not in html and "body {" not in html  # scoped: nothing restyles the notebook

    # the crashing cell: IPython's traceback, then the diagnosis
    (error,) = [o for o in crash.outputs if o.output_type == "error"]
    assert (error.ename, error.evalue) == ("IndexError", "Target 2 is out of bounds.")
    (shown,) = _displays(crash)
    lines = shown.data["text/plain"].splitlines()
    assert lines[2] == "✗ [data] loss: target class 2 does not exist for 2 output classes (valid 0..1)"
    assert lines[4].endswith("loss = nn.functional.cross_entropy(clf(torch.randn(4, 4)), labels)")

    # a clean cell: the empty report
    (shown,) = _displays(clean)
    assert shown.data["text/plain"] == ("== torchtriage report ==\n"
                                        "No finding: nothing looked wrong in what torchtriage watched.")
    assert '<section class="card ok">' in shown.data["text/html"]

    # a Report as a cell's value renders itself the same way
    (shown,) = _displays(last)
    assert shown.output_type == "execute_result" and shown.data["text/plain"] == (
        "== torchtriage report ==\nNo finding: nothing looked wrong in what torchtriage watched.")

    # a bad option: one clear error, the cell not run
    (error,) = [o for o in bad.outputs if o.output_type == "error"]
    assert error.ename == "ConfigError"
    assert error.evalue == ("%%torchtriage: argument --on-anomaly: invalid choice: 'explode' (choose from "
                            "'warn', 'raise', 'skip_step', 'record')")


def test_repr_html_is_a_scoped_fragment_with_unique_chart_ids():
    from zoo.reports import nan_report

    a, b = nan_report()._repr_html_(), nan_report()._repr_html_()
    assert a.count('<div class="torchtriage-report"') == 1 and a.endswith("</div>")
    ids_a = set(re.findall(r'id="([^"]+)"', a))
    ids_b = set(re.findall(r'id="([^"]+)"', b))
    assert ids_a and not ids_a & ids_b
    assert "<svg" in a and 'class="mark"' in a
