"""Families the vocabulary misread, found by measuring the triage on real errors (issue 27 §4).

`tests/data/triage_labelled.py` holds errors torch raises for real calls, labelled by hand; these
rules cover the families whose words led the vocabulary astray ("index k out of range" is a size
limit, not a bad index; a singular matrix is numerical, not `other`), tried after the exact
rules and the families, before the vocabulary. Where no message rule applies, the place that
raised decides: an error raised by `torch.utils.data` (a loader, a split, a collate) is a data
fault, one raised by `torch.optim` an optimizer's.
"""

from __future__ import annotations

import ast
import os
import re
from typing import Any, Optional

import torch

from .._findings import Category
from ._operands import lookup
from ._rules import Rule, _r

Fields = Optional[tuple[str, dict[str, Any]]]

_LINALG: tuple[type[BaseException], ...] = tuple(
    t for t in (getattr(torch.linalg, "LinAlgError", None),) if isinstance(t, type))

_BACKEND_LAYOUTS = ("Sparse", "Nested", "Mkldnn")


def _backend(m: re.Match[str], ctx: Any) -> Fields:
    """An op with no kernel for its operand's backend: a sparse / nested / mkldnn operand is a
    layout fault (densify it), a meta one a device fault; others stay `other`."""
    backend = m.group("backend")
    if any(backend.startswith(k) or k in backend for k in _BACKEND_LAYOUTS):
        return "layout.backend", {}
    if backend == "Meta":
        return "device.meta", {}
    return None


def _arguments(m: re.Match[str], ctx: Any) -> Fields:
    """A wrong call of an optimizer's or a scheduler's method (`opt.step()` without LBFGS's
    closure) is an optimizer fault; other argument errors stay `other`."""
    site = ctx.sites.user
    node = getattr(site, "node", None)
    if site is None or not isinstance(node, ast.Call):
        return None
    owner: Any = None
    if isinstance(node.func, ast.Attribute):
        owner = lookup(node.func.value, site.frame)[1]
    callee = lookup(node.func, site.frame)[1]
    optim = (torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)
    if isinstance(owner, optim) or (isinstance(callee, type) and issubclass(callee, optim)):
        return "gradient.optimizer_config", {}
    return None


def _scaler_order(m: re.Match[str], ctx: Any) -> Fields:
    """unscale_() after step() without update() in between: the same state machine, read the other way."""
    if m.group("after"):
        return "numerical.grad_scaler_order", {"op": "unscale_", "previous": "step"}
    return "numerical.grad_scaler_order", {"previous": m.group("op")}


READINGS: tuple[Rule, ...] = (
    # shape: sizes asked of an op that the input cannot give
    Rule("shape.checkpoint_size", Category.SHAPE,
         _r(r"size mismatch for (?P<param>[\w.]+): copying a param with shape (?P<got>torch\.Size\(\[[^\]]*\]\)) "
            r"from checkpoint, the shape in current model is (?P<expected>torch\.Size\(\[[^\]]*\]\))")),
    Rule("shape.k_range", Category.SHAPE, _r(r"selected (?:index|number) k out of range"), (RuntimeError, IndexError)),
    Rule("shape.divisible", Category.SHAPE,
         _r(r"(?P<what>\w+)(?: \(\d+\))? must be divisible by (?P<by>\w+)"),
         (ValueError, RuntimeError, AssertionError)),
    # numerical: values a kernel or a check refused
    Rule("numerical.linalg", Category.NUMERICAL, None, _LINALG),
    Rule("numerical.probabilities", Category.NUMERICAL,
         _r(r"invalid multinomial distribution|probability tensor contains either `inf`, `nan` or element < 0")),
    # a random generator's parameter out of its domain: std < 0, p outside [0, 1], a negative rate
    Rule("numerical.sampling_parameter", Category.NUMERICAL,
         _r(r"\b(?P<sampler>normal|log_normal|exponential|geometric|cauchy|uniform|bernoulli)\w* expects "
            r"[^,]*, but found|invalid (?P<rate>\w+) rate|Expected p_in >= 0 && p_in <= 1")),
    Rule("numerical.grad_norm_nonfinite", Category.NUMERICAL,
         _r(r"The total norm of order (?P<order>\S+) for gradients from `parameters` is non-finite")),
    # GradScaler keeps one state per optimizer that only update() resets: unscale_ / step twice
    # between two update() calls (a branch that skips step() and update() together) is refused.
    Rule("numerical.grad_scaler_order", Category.NUMERICAL,
         _r(r"(?P<op>unscale_|step)\(\) has already been called (?:on this optimizer )?since the last update\(\)|"
            r"(?P<after>unscale_)\(\) is being called after step\(\)"), refine=_scaler_order),
    Rule("numerical.anomaly", Category.NUMERICAL,
         _r(r"Function '(?P<node>\w+)' returned nan values in its (?P<index>\d+)\w* output")),
    # gradient
    Rule("gradient.func_non_scalar", Category.GRADIENT,
         _r(r"Expected f\(\*args\) to return a scalar Tensor, got tensor with (?P<dims>\d+) dims")),
    Rule("gradient.hook_size", Category.GRADIENT, _r(r"hook '(?P<hook>[^']+)' has changed the (?:size|type) of value")),
    # layout: an op without a kernel for the operand's layout
    Rule("layout.backend", Category.LAYOUT,
         _r(r"Could not run '(?P<op>[\w:.]+)' with arguments from the '(?P<backend>\w+)' backend"),
         (NotImplementedError, RuntimeError), refine=_backend),
    # data
    Rule("data.collate_type", Category.DATA,
         _r(r"default_collate: batch must contain (?P<expected>[^;]+); found (?P<found>.+)"), (TypeError,)),
    Rule("data.lengths_unsorted", Category.DATA,
         _r(r"`lengths` array must be sorted in decreasing order when `enforce_sorted` is True")),
    # other, named: Python argument errors (their signatures list dtypes and dims, read as faults)
    Rule("other.arguments", Category.OTHER,
         _r(r"received an invalid combination of arguments|missing \d+ required positional arguments?|"
            r"got an unexpected keyword argument|failed to unpack the object at pos \d+|"
            r"must be tuple of ints, but found element of type|"
            r"takes \d+ positional arguments? but \d+ (?:was|were) given|"
            r"cannot assign '[\w.]+' object to (?:buffer|parameter) '\w+'"), (TypeError,), refine=_arguments),
)


def match_reading(exc: BaseException) -> tuple[Rule, re.Match[str]] | None:
    for rule in READINGS:
        m = rule.match(exc)
        if m is not None:
            return rule, m
    return None


_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
# (path prefix, exception types or None for any, code). A scheduler's ValueError is a value of its
# schedule that does not fit the loop (stepped past total_steps, steps_per_epoch below the
# batches); its TypeError is the optimizer argument, an optimizer fault like torch.optim's own.
PLACES: tuple[tuple[str, tuple[type[BaseException], ...] | None, str], ...] = (
    (os.path.join(_TORCH, "utils", "data") + os.sep, None, "data.pipeline"),
    (os.path.join(_TORCH, "optim", "lr_scheduler.py"), (ValueError,), "other.scheduler_config"),
    (os.path.join(_TORCH, "optim") + os.sep, None, "gradient.optimizer_config"))


def raised_in(exc: BaseException) -> str | None:
    """The code of the place that raised `exc` (its innermost frame), when it says the fault's kind."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    path = os.path.abspath(tb.tb_frame.f_code.co_filename)
    return next((code for prefix, kinds, code in PLACES
                 if path.startswith(prefix) and (kinds is None or isinstance(exc, kinds))), None)
