"""The import graph of src/torchtriage has no cycle, and ARCHITECTURE.md's layer picture is the
one the code draws.

The graph comes from `tools/layers.py` (its docstring states what counts as an edge). Lazy
imports inside functions count: a function-level import that only hides a cycle from Python's
import order is still a cycle of dependencies, so it fails here too.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("torchtriage_layers_tool", ROOT / "tools" / "layers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_import_cycle():
    tool = _tool()
    found = tool.cycles(tool.import_graph())
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_cycle_between_packages():
    tool = _tool()
    levels = tool.layers(tool.unit_graph(tool.import_graph()))  # raises on a cycle
    assert levels["torchtriage._errors"] == 0


def test_architecture_layer_picture_is_current():
    tool = _tool()
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert tool.BEGIN in text, "ARCHITECTURE.md has no generated layer section: python tools/layers.py --write"
    assert tool.replace_section(text, tool.picture()) == text, (
        "ARCHITECTURE.md's layer picture is stale: python tools/layers.py --write")


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / "torchtriage"
    for name, body in files.items():
        p = src / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(body))
    return src


def test_a_lazy_import_still_closes_a_cycle(tmp_path):
    tool = _tool()
    src = _package(tmp_path, {
        "__init__.py": "",
        "_a.py": "from ._b import g\n",
        "_b.py": "def g():\n    from ._a import f\n",
    })
    assert tool.cycles(tool.import_graph(src)) == [["torchtriage._a", "torchtriage._b"]]


def test_type_checking_imports_do_not_count(tmp_path):
    tool = _tool()
    src = _package(tmp_path, {
        "__init__.py": "",
        "_a.py": "from ._b import g\n",
        "_b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._a import f\n",
    })
    assert tool.cycles(tool.import_graph(src)) == []


def test_from_package_import_sibling_depends_on_the_package(tmp_path):
    # `pkg/__init__` re-exports from `_x`, and `_x` reads `from . import _y` off the package
    # object: a cycle through the package's namespace. `from ._y import name` is not.
    tool = _tool()
    files = {
        "__init__.py": "",
        "pkg/__init__.py": "from ._x import f as f\n",
        "pkg/_x.py": "from . import _y\n",
        "pkg/_y.py": "",
    }
    assert tool.cycles(tool.import_graph(_package(tmp_path / "a", files))) == [
        ["torchtriage.pkg", "torchtriage.pkg._x"]]
    files["pkg/_x.py"] = "from ._y import h\n"
    assert tool.cycles(tool.import_graph(_package(tmp_path / "b", files))) == []


def test_importing_a_submodule_imports_its_package_first(tmp_path):
    tool = _tool()
    src = _package(tmp_path, {
        "__init__.py": "",
        "_model.py": "def show():\n    from .render._text import draw\n",
        "render/__init__.py": "from ._load import load as load\n",
        "render/_text.py": "",
        "render/_load.py": "from .._model import show\n",
    })
    assert tool.cycles(tool.import_graph(src)) == [
        ["torchtriage._model", "torchtriage.render", "torchtriage.render._load"]]
