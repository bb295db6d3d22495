"""`import torchtriage` must not import optional dependencies (rich, lightning, transformers,
pandas) nor the HTML renderer or the integrations: they load only when asked for."""

from __future__ import annotations

import json
import subprocess
import sys

OPTIONAL = ("rich", "lightning", "pytorch_lightning", "transformers", "accelerate", "pandas", "tensorboard",
            "wandb", "IPython", "torch.utils.tensorboard")
LAZY = ("torchtriage.integrations", "torchtriage._render._html", "torchtriage.report._page")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_import_torchtriage_leaves_optional_dependencies_out():
    loaded = _modules_after("import torchtriage, torchtriage.report\ntorchtriage.Report().__str__()")
    assert [m for m in OPTIONAL + LAZY if m in loaded] == []


def test_render_html_loads_only_the_renderer():
    loaded = _modules_after("import torchtriage.report as r\nr.render_html(r.load_json.__globals__['Report']())")
    assert "torchtriage._render._html" in loaded
    assert [m for m in OPTIONAL if m in loaded] == []


def test_the_pytest_plugin_does_not_import_torch():
    # pytest loads the plugin in every run of an environment where torchtriage is installed.
    code = "import sys, torchtriage, torchtriage._pytest_plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_session_without_dashboards_imports_neither_tensorboard_nor_wandb():
    loaded = _modules_after("import torch, torchtriage\nm = torch.nn.Linear(2, 1)\n"
                            "with torchtriage.watch(m, report=False):\n    m(torch.ones(1, 2)).sum().backward()\n"
                            "str(torchtriage.Report())")
    assert [m for m in OPTIONAL + ("torchtriage._dashboard", "torchtriage._notebook") if m in loaded] == []

