"""Checks talk to the frame through its public API: no check reaches into another object's
privates (ARCHITECTURE.md, "The check API").

Read from the sources with `ast`: in the check packages (and the renderers, dashboards and
integrations, which read what checks produce), an attribute access `x._name` is refused when
`_name` starts with one underscore and is not a dunder, unless

  * `x` is `self` or `cls` (an object's own state), or
  * `x` names a module: one imported from outside torchtriage (`torch._C`, `sys._getframe`,
    `nn.modules.loss._Loss`) or from the same package as the file (a sibling module's private
    helper), or
  * `_name` is one of torch's own privates in `TORCH_PRIVATES`, or a library's (torchmetrics) in
    `LIBRARY_PRIVATES`, each with the reason no public API gives the same (and none of them is a
    name the frame uses for its own state).

`getattr(x, "_name", ...)`, `hasattr` and `setattr` with a literal name count as accesses too.

A session, a frame object (snapshot, step record, parameter index, clock) or another check's
object is never a module, so `session._anything` always fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "torchtriage"

CHECK_PACKAGES = ("_triage", "_nonfinite", "_gradients", "_silent", "_dynamics", "_leakage", "_distributed",
                  "_repro", "_contracts.py", "_seed.py", "integrations", "report", "_render", "_dashboard")

# The frame: the modules whose objects checks are handed (their privates must stay theirs).
FRAME_MODULES = ("_session.py", "_hooks.py", "_checker.py", "_registry.py", "_snapshot.py", "_step.py",
                 "_params.py", "_deferred.py", "_series.py", "_transparent.py", "_roothook.py")

TORCH_PRIVATES = {
    "_version": "a tensor's version counter: the only record of an in-place write (a grad that "
                "zero_grad never reset, a parameter the optimizer updated)",
    "_saved_result": "an autograd node's saved output (ExpBackward0): max(exp x) without re-running",
    "_sequence_nr": "an autograd node's creation order: which loss node of a step came first",
    "_schema": "an OpOverload's aten schema, for the op's name in evidence",
    "_parameters": "a module's own parameters as stored (no recursion, no dedup generator), read "
                   "per module call in the gradient analysis window",
    "_is_view": "whether a tensor is a view (no public predicate), for an exception's operands",
    "_base": "a view's base tensor (an index tensor sliced from a permutation in the leakage check)",
    "_meta": "a dask DataFrame's empty meta frame, which map_partitions needs to know the output",
    "_orig_mod": "the module a torch.compile'd OptimizedModule wraps, to replay it eagerly",
    "_scale": "GradScaler's scale tensor on the device (get_scale() would sync)",
    "_saved_dim": "a softmax node's saved dim, to read which axis a loss normalised",
    "_saved_other": "a Div/Mul node's saved operand: the divisor a loss was normalised by (all-reduced "
                    "count) and the constants on it",
    "_input_metadata": "an autograd node's output shapes: the width of each block a column concatenation of "
                       "contrastive logits joined (CatBackward0 saves no sizes)",
    "_saved_self": "a product node's saved operand (MmBackward0, MulBackward0): the two embeddings a "
                   "contrastive logit compares, without re-running the forward",
    "_saved_mat2": "MmBackward0's saved second operand (with _saved_self: the pair of a similarity product)",
    "_saved_start": "SliceBackward0's saved bounds (with _saved_end, _saved_step): two slices of one tensor "
                    "with the same bounds are the same rows, named in the finding",
    "_saved_end": "SliceBackward0's saved end (see _saved_start)",
    "_saved_step": "SliceBackward0's saved step (see _saved_start)",
    "_saved_self_sym_sizes": "SliceBackward0's saved input shape: the tensor the two slices were cut from",
    "_step_count": "an LR scheduler's step counter: 0 before its first step()",
    "_get_closed_form_lr": "an LR scheduler's lr at any last_epoch (get_lr() is chainable: it reads the "
                           "group's current lr), to read what a never-stepped schedule would have given",
    "_local_tensor": "a DTensor's local shard without to_local()'s autograd wrapper",
    "_dataset": "a DataLoader iterator's dataset (no public reference from the iterator to its loader), "
                "to follow a batch's sampler indices to the split in the leakage check",
    "_in_order": "whether a multi-worker DataLoader iterator returns batches in the order their "
                 "indices were handed out (the leakage check pairs them first in first out)",
}

# A library's own privates that a check reads on the library's objects, each with its reason.
LIBRARY_PRIVATES = {
    "_defaults": "a torchmetrics Metric's state defaults (add_state's default): which states are "
                 "lists and which tensors, to split the updates since the last compute from the rest",
    "_reductions": "a torchmetrics Metric's state reductions: only a sum state can be split by subtraction",
    "_computed": "a torchmetrics Metric's cached compute() result, cleared on our deep copy only",
    "_update_count": "a torchmetrics Metric's update counter, copied onto our deep copy so that its "
                     "compute() does not warn",
    "_asdict": "a namedtuple's documented public method (the leading underscore only keeps it off the "
               "field names)",
}


def _files(names: tuple[str, ...]) -> list[Path]:
    out: list[Path] = []
    for name in names:
        p = SRC / name
        out += [p] if p.suffix == ".py" else sorted(p.rglob("*.py"))
    return out


def _parts(path: Path) -> tuple[str, ...]:
    return path.relative_to(SRC).parts if path.is_relative_to(SRC) else (path.name,)


def _package(path: Path) -> str:
    rel = _parts(path)
    return rel[0] if len(rel) > 1 else ""


def _module_names(tree: ast.AST, path: Path) -> set[str]:
    """Names bound to modules by this file's imports that the rule lets through: external ones,
    and torchtriage modules of the file's own package."""
    out: set[str] = set()
    own = _package(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if not a.name.startswith("torchtriage"):
                    out.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and not (node.module or "").startswith("torchtriage"):
                out.update(a.asname or a.name for a in node.names)
            elif node.level == 1 and node.module is None and own:
                out.update(a.asname or a.name for a in node.names if (SRC / own).is_dir())
            elif node.level == 2 and node.module is None and len(_parts(path)) > 2:
                out.update(a.asname or a.name for a in node.names)  # a subpackage's parent package
    return out


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def private_reaches(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = _module_names(tree, path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                v, name = node.value, node.attr
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                v, name = node.args[0], node.args[1].value
            else:
                continue
            if not name.startswith("_") or name.startswith("__"):
                continue
            if isinstance(v, ast.Name) and v.id in ("self", "cls"):
                continue
            if isinstance(v, (ast.Name, ast.Attribute)) and _root(v) in modules:
                continue
            if name in TORCH_PRIVATES or name in LIBRARY_PRIVATES:
                continue
            found.append(f"{'/'.join(_parts(path))}:{node.lineno}: {ast.unparse(v)}.{name}")
    return found


def frame_private_names() -> set[str]:
    """Every `self._x` the frame's classes set or define."""
    out: set[str] = set()
    for path in _files(FRAME_MODULES):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                out.add(node.attr)
    return out


def test_checks_use_only_the_frames_public_api():
    found = private_reaches(_files(CHECK_PACKAGES))
    assert found == [], "private attribute reached from a check:\n" + "\n".join(found)


def test_the_torch_allow_list_does_not_cover_frame_state():
    assert sorted((set(TORCH_PRIVATES) | set(LIBRARY_PRIVATES)) & frame_private_names()) == []


def test_the_rule_catches_a_reach_into_the_session(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n"
                   "def f(session, watch):\n"
                   "    session._clock = None\n"
                   "    watch.sentinel._sync()\n"
                   "    torch._C._get_tracing_state()\n"  # a module: allowed
                   "    getattr(session, '_findings', None)\n"
                   "    return session.step, self_like._busy\n")
    found = [line.split(": ", 1)[1] for line in private_reaches([bad]) if ": " in line]
    assert sorted(found) == ["self_like._busy", "session._clock", "session._findings", "watch.sentinel._sync"]


def test_the_documented_custom_check_runs_on_the_public_api():
    # docs/checks.md's example: a user's Checker built on the same interface, run as written.
    import re

    doc = (SRC.parents[1] / "docs" / "checks.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    scope: dict[str, object] = {}
    exec(compile(code, "docs/checks.md", "exec"), scope)  # the example asserts its own finding
    found = scope["found"]
    assert (found.code, found.step, found.count, found.severity.value, found.stage.value) == (
        "loss_ceiling.exceeded", 0, 2, "warning", "loss")
    assert "._" not in code.replace("__init__", ""), "the example reaches a private attribute"


def test_a_skipped_optimizer_step_closes_the_step_only_for_the_clocks_optimizer():
    # Session.step_skipped: what the AMP check tells the clock when GradScaler skipped step().
    import torch
    import torch.nn as nn

    import torchtriage

    model = nn.Linear(2, 1)
    first = torch.optim.SGD(model.parameters(), lr=0.0)
    second = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.ones(4, 2)
    with torchtriage.watch(model, [first, second], checks=["triage"], report=False) as session:
        model(x).sum().backward()
        first.step()  # the first optimizer that steps drives the clock
        assert (session.step, session.step_started) == (1, True)
        model(x).sum().backward()
        session.step_skipped(second)  # not the clock's optimizer: the step stays open
        assert session.step == 1
        session.step_skipped(first)
        assert session.step == 2
