"""The model tree of the HTML report: each watched model's modules as nested, foldable lists
(`<details>`, no JS), with the modules that findings name marked.

Input is `report.meta["models"]`: {label: {module path: class name}}, paths as
`model.named_modules()` names them ("" is the root). A module a finding names (for a
non-finite value: the producer) is marked red; a module listed in a finding's evidence
"propagated_by" (it received the value and passed it on) is marked orange. Marks carry a
text tag too, so the tree reads the same without colour.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from .._catalogue import msg
from .._finding import Finding, Severity

MAX_NODES = 3000  # per model; beyond it only the marked modules and their ancestors are drawn
OPEN_ALL_BELOW = 60  # small models are shown fully unfolded


def _parent(path: str) -> str | None:
    if path == "":
        return None
    return path.rsplit(".", 1)[0] if "." in path else ""


def marks(findings: Iterable[Finding], label: str, paths: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """path -> (css class, tag text) for the modules of model `label` that findings name."""
    out: dict[str, tuple[str, str]] = {}
    for f in findings:
        if f.severity is Severity.INFO:
            continue
        ev = f.evidence if isinstance(f.evidence, Mapping) else {}
        model = ev.get("model")
        if isinstance(model, str) and model != label:
            continue
        propagated = ev.get("propagated_by")
        if isinstance(propagated, (list, tuple)):
            for p in propagated:
                if isinstance(p, str) and p in paths and p not in out:
                    out[p] = ("propagated", msg("html.tag_propagated"))
    for f in findings:
        if f.severity is Severity.INFO or f.module is None or f.module not in paths:
            continue
        model = f.evidence.get("model") if isinstance(f.evidence, Mapping) else None
        if isinstance(model, str) and model != label:
            continue
        old = out.get(f.module)
        if old is None or old[0] == "propagated":
            out[f.module] = ("named", f"{msg('html.tag_finding')}: {f.code}")
    return out


def render_tree(label: str, paths: Mapping[str, Any], findings: Iterable[Finding]) -> str:
    """One model as a nested list; returns "" for an empty layout."""
    paths = {str(k): str(v) for k, v in paths.items()}
    if not paths:
        return ""
    if "" not in paths:
        paths = {"": "", **paths}
    marked = marks(list(findings), label, paths)
    # Ancestors of marked modules are unfolded so that every mark is visible on load.
    on_path: set[str] = set()
    for p in marked:
        q: str | None = p
        while q is not None:
            on_path.add(q)
            q = _parent(q)
    keep = set(paths) if len(paths) <= MAX_NODES else on_path | {p for p in paths if _parent(p) == ""}
    children: dict[str, list[str]] = {}
    for p in paths:
        parent = _parent(p)
        if parent is not None and p in keep:
            # A path whose parent is missing (a partial layout) hangs off its nearest ancestor.
            while parent not in paths and parent is not None:
                parent = _parent(parent)
            children.setdefault(parent or "", []).append(p)
    open_all = len(paths) <= OPEN_ALL_BELOW

    def node(p: str, depth: int) -> str:
        name = label if p == "" else p[len(_parent(p) or "") + (1 if _parent(p) else 0):]
        cls, tag = marked.get(p, ("", ""))
        head = (f'<span class="mod{" " + cls if cls else ""}" title="{escape(p or label)}">{escape(name)}</span>'
                f' <span class="cls">{escape(paths[p])}</span>')
        if tag:
            head += f' <span class="tag {cls}">{escape(tag)}</span>'
        kids = children.get(p, [])
        if not kids:
            return f"<li>{head}</li>"
        opened = " open" if open_all or depth == 0 or p in on_path else ""
        inner = "".join(node(k, depth + 1) for k in kids)
        return f"<li><details{opened}><summary>{head}</summary><ul>{inner}</ul></details></li>"

    html = f'<ul class="tree">{node("", 0)}</ul>'
    if len(keep) < len(paths):
        html += f'<p class="note">{escape(msg("html.tree_truncated", shown=len(keep), total=len(paths)))}</p>'
    return html
