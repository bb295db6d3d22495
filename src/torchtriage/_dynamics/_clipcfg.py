"""Gradient clipping that the user's configuration turned off (session 13).

A max norm of 0 (or False) for gradient clipping means "no clipping" in every trainer's
configuration (DeepSpeed's `gradient_clipping`, MMEngine's `clip_grad.max_norm`, an `--clip 0`
flag): `clip_grad_norm_(params, 0)` would zero the gradients, so nobody writes it meaning to clip.
A run whose configuration says 0 while `clip_grad_norm_` is called with a positive max norm had
the 0 replaced on the way (`cfg.get("max_norm") or 1.0`, a falsy test that falls back to a
default). Measured: at the first `clip_grad_norm_` call, the configuration objects the user's
frames hold (dicts, argparse / simple namespaces, dataclasses, named tuples, the user's own config
classes; bounded walk) are searched for a gradient-clipping key set to 0; then each call's
returned norm rides the dynamics check's deferred read and is compared with the max norm.
`dynamics.clip_configured_off`: a warning when the clip bit (norm above max norm) on most calls,
with the count, the median norm and the key; an info when it seldom bit.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import itertools
import linecache
import statistics
import sys
import types
from collections.abc import Mapping
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame, is_user_file, user_frame_from_stack
from ._common import finding, num

MIN_CALLS = 10
MAX_NODES = 4000
MAX_DEPTH = 5
_NAMES = {"clip", "max_norm", "max_grad_norm", "gradient_clipping", "grad_norm_clip"}
_NOT_SETTINGS = ("value", "clipped", "count", "num", "total", "steps", "frac", "ratio")
_SKIP = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer, torch.utils.data.DataLoader,
         torch.utils.data.Dataset, types.ModuleType, types.FunctionType, type)


def _clip_key(key: str, path: str) -> bool:
    k = key.lower()
    if any(w in k for w in _NOT_SETTINGS):
        return False  # clip_grad_value_ / a value clip, a counter of clipped steps: not this setting
    if k == "max_norm":
        return "clip" in path or "grad" in path
    return k in _NAMES or ("clip" in k and ("grad" in k or "norm" in k))


def _children(obj: Any) -> list[tuple[str, Any, bool]] | None:
    """(name, value, by key) of a configuration object's entries; None for anything else."""
    if isinstance(obj, Mapping):
        return [(k, v, True) for k, v in itertools.islice(obj.items(), 500) if isinstance(k, str)]
    if isinstance(obj, (argparse.Namespace, types.SimpleNamespace)):
        return [(k, v, False) for k, v in vars(obj).items()]
    if isinstance(obj, tuple) and hasattr(obj, "_asdict"):
        return [(k, v, False) for k, v in obj._asdict().items()]
    if isinstance(obj, _SKIP):
        return None
    if dataclasses.is_dataclass(obj):
        return [(f.name, getattr(obj, f.name, None), False) for f in dataclasses.fields(obj)]
    d = getattr(obj, "__dict__", None)
    mod = getattr(type(obj), "__module__", "")
    if isinstance(d, dict) and (mod == "__main__" or _user_class(type(obj))):
        return [(k, v, False) for k, v in d.items() if isinstance(k, str) and not k.startswith("_")]
    return None


def _user_class(cls: type) -> bool:
    mod = sys.modules.get(cls.__module__)
    file = getattr(mod, "__file__", None)
    return isinstance(file, str) and is_user_file(file)


def off_setting(frame: types.FrameType | None) -> tuple[str, Any, list[str]] | None:
    """The first gradient-clipping key set to 0 / False in the configuration the user's frames
    hold (path as the user would write it, value, the leaf key, the user's files on the way), or None."""
    seen: set[int] = set()
    budget = [MAX_NODES]

    def walk(obj: Any, path: str, depth: int) -> tuple[str, Any, str] | None:
        if depth > MAX_DEPTH or budget[0] <= 0 or id(obj) in seen:
            return None
        seen.add(id(obj))
        budget[0] -= 1
        try:
            kids = _children(obj)
        except Exception:  # a mapping whose items() raises (a lazy config): not one we can read
            kids = None
        if not kids:
            return None
        for name, v, by_key in kids:
            sub = f"{path}[{name!r}]" if by_key else f"{path}.{name}"
            if _clip_key(name, path.lower()) and (v is False or (type(v) in (int, float) and v == 0)):
                return sub, v, name
        for name, v, by_key in kids:
            if isinstance(v, (str, int, float, bool, bytes)) or v is None:
                continue
            found = walk(v, f"{path}[{name!r}]" if by_key else f"{path}.{name}", depth + 1)
            if found is not None:
                return found
        return None

    globs_seen: set[int] = set()
    files: list[str] = []
    frames = 0
    f = frame
    while f is not None and frames < 12:
        if is_user_file(f.f_code.co_filename):
            frames += 1
            if f.f_code.co_filename not in files:
                files.append(f.f_code.co_filename)
            scopes = [f.f_locals]
            if id(f.f_globals) not in globs_seen:
                globs_seen.add(id(f.f_globals))
                scopes.append(f.f_globals)
            for scope in scopes:
                for name, v in list(scope.items()):
                    if name.startswith("__") or isinstance(v, (str, int, float, bool, bytes)) or v is None:
                        continue
                    found = walk(v, name, 0)
                    if found is not None:
                        return found[0], found[1], [found[2], *files]
        f = f.f_back
    return None


def _reads_key(node: ast.AST, key: str) -> bool:
    """`x.get(key)`, `x[key]` or `x.key` itself."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == key
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == key
    return isinstance(node, ast.Attribute) and node.attr == key


def _truth_tested(test: ast.AST, key: str) -> bool:
    """`key`'s value read where only its truth counts: the whole test, an operand of and/or/not."""
    if _reads_key(test, key):
        return True
    if isinstance(test, ast.BoolOp):
        return any(_truth_tested(v, key) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _truth_tested(test.operand, key)
    return False


def falsy_test(files: list[str], key: str) -> UserFrame | None:
    """The user's line that tests the configured `key` for truth (`if cfg.get(key):`,
    `cfg.get(key) or 1.0`): where a 0 turns into the default."""
    for file in files:
        text = "".join(linecache.getlines(file))
        try:
            tree = ast.parse(text) if text else None
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree) if tree is not None else ():
            tests: list[ast.expr] = []
            if isinstance(node, (ast.If, ast.IfExp, ast.While)):
                tests = [node.test]
            elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
                tests = node.values[:-1]
            if tests and any(_truth_tested(t, key) for t in tests):
                line = tests[0].lineno
                return UserFrame(file, line, "", linecache.getline(file, line).strip())
    return None


class ClipConfig:
    """`clip_grad_norm_` calls against a configuration that turned clipping off."""

    def __init__(self, defer: Any) -> None:
        self.defer = defer  # the dynamics check's deferred read (`DeferredFlags.add`)
        self.state: tuple[str, Any, list[str]] | None | bool = None  # None: not searched yet; False: nothing to follow
        self.max_norm = 0.0
        self.frame: UserFrame | None = None
        self.calls = 0
        self.read = 0
        self.bit = 0
        self.norms: list[float] = []

    def clipped(self, max_norm: float | None, out: Any, frame: types.FrameType | None) -> None:
        if self.state is False:
            return
        if self.state is None:
            if max_norm is None or not max_norm > 0:
                self.state = False
                return
            self.state = off_setting(frame) or False
            if self.state is False:
                return
            self.max_norm, self.frame = max_norm, user_frame_from_stack(2)
        if max_norm != self.max_norm or not isinstance(out, torch.Tensor) or out.numel() != 1:
            return
        self.calls += 1
        self.defer([out.detach()], self._norm)

    def _norm(self, v: list[float]) -> None:
        self.read += 1
        self.bit += v[0] > self.max_norm
        if len(self.norms) < 8192:
            self.norms.append(v[0])

    def finding(self) -> Finding | None:
        if not isinstance(self.state, tuple) or self.calls < MIN_CALLS or not self.read:
            return None
        key, value, (leaf, *files) = self.state
        test = falsy_test(files, leaf)
        most = self.bit >= 0.5 * self.read
        median = statistics.median(self.norms) if self.norms else float("nan")
        ev = {"configured": f"{key} = {value!r}", "max_norm_used": num(self.max_norm), "clip_calls": self.calls,
              "calls_read": self.read, "calls_clipped": self.bit, "median_norm_before_clip": num(median),
              "max_norm_before_clip": num(max(self.norms)) if self.norms else "n/a",
              "clip_call": f"{self.frame.file}:{self.frame.line}" if self.frame else None,
              "truth_test_of_the_key": f"{test.file}:{test.line}: {test.source}" if test else None}
        if most:
            ev["harm"] = (f"the gradient was scaled down on {self.bit}/{self.read} steps (median norm {num(median)} "
                          f"cut to {num(self.max_norm)}) although the configuration turned clipping off")
        self.state = False
        return finding("clip_configured_off", category=Category.GRADIENT,
                       severity=Severity.WARNING if most else Severity.INFO, stage=Stage.OPTIMIZER, step=0,
                       frame=test or self.frame, op="clip_grad_norm_", key=key, value=repr(value),
                       max_norm=num(self.max_norm), clipped=self.bit, read=self.read, median=num(median),
                       ratio=num(median / self.max_norm) if self.max_norm else "n/a", evidence=ev)
