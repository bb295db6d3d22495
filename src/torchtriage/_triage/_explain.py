"""Turn an exception into a `Finding`: classify it, then say where it happened and why.

`triage_exception(exc)` works on any caught exception; `ExceptionTriage` is the session's
check (name "triage") that does the same when the watched code raises. The exception itself
is never changed: the session and `torchtriage run` re-raise it after the report.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from .._catalogue import msg
from .._checker import Checker, LossCall
from .._errors import AnomalyError, TriageError
from .._findings import Category, Finding, Report, Severity, Stage
from .._frames import is_user_file
from .._summary import TensorSummary, summarize
from ._consequence import consequence_evidence, earlier_nonfinite
from ._context import Context, _internal
from ._families import match_family
from ._freed import reuse_fields
from ._heads import HeadWidths
from ._nonegrad import match_none_grad
from ._overlap import match_overlap
from ._readings import match_reading, raised_in
from ._rules import RULES, Rule, classify
from ._structure import inplace_producer
from ._vocab import read
from ._worker import WorkerError, read_worker_error

_CHAIN_DEPTH = 5


def triage_exception(exc: BaseException, *, session: Any = None) -> Report:
    """Explain an exception: category, the module that was running, operand shapes, your line.

    Arguments:
        exc: any exception, typically caught with ``except Exception as exc``.
        session: a `Session` to name modules by their path and to read the stage and step
            (default: none; modules are then named by their class).

    Returns:
        A `Report` with one finding (category "other" when the exception is not one
        torchtriage knows; never a forced wrong category).

    Example:
        >>> try:
        ...     model(x)
        ... except RuntimeError as exc:
        ...     print(torchtriage.triage_exception(exc))
    """
    if not isinstance(exc, BaseException):
        raise TypeError(f"triage_exception() takes an exception, got {type(exc).__name__}")
    return Report((explain(exc, session),))


def explain(exc: BaseException, session: Any = None) -> Finding:
    """The finding for `exc` (its cause chain is searched when `exc` itself is unknown)."""
    return explain_in_context(exc, session)[0]


def explain_in_context(exc: BaseException, session: Any = None) -> tuple[Finding, Context]:
    """`explain`, with the `Context` its evidence was read from (the failing call's tensors)."""
    # A DataLoader worker's error arrives as text: classify the worker's own error and point
    # at its line in the dataset / collate_fn, not at the `for batch in loader` line.
    worker = read_worker_error(exc)
    probe = worker.proxy if worker is not None and worker.proxy is not None else exc
    target, hit = exc, _classify(probe)
    link: BaseException | None = exc if worker is None else None
    for _ in range(_CHAIN_DEPTH):
        if hit is not None or link is None:
            break
        link = link.__cause__ or link.__context__
        if link is not None:
            hit = _classify(link)
            if hit is not None:
                target = link
    ctx = Context(target, session)
    if ctx.user_frame is None and target is not exc:
        ctx.user_frame = Context(exc, session).user_frame
    if worker is not None:
        ctx.stage = Stage.DATA
        ctx.user_frame = worker.frame or ctx.user_frame
    known = hit is not None and any(hit[0] is r for r in RULES)
    reading = None
    # An unknown error raised by torch.utils.data or torch.optim is that place's fault (issue 27).
    place = raised_in(target) if hit is None and worker is None else None
    # torch.distributed speaks of process ranks, sizes and devices of a job, not of tensors:
    # its words would read as shape or device faults ("environment variable RANK expected").
    if hit is None and _torch_raised(target, worker) and not (ctx.sites.function or "").startswith(
            "torch.distributed."):
        reading = read(str(probe if worker is not None else target), ctx.operands)
    if hit is not None:
        rule, m = hit
        code, category, op = rule.code, rule.category, rule.op
        fields = {k: as_written(v) for k, v in m.groupdict().items() if v is not None}
        if rule.refine is not None:
            refined = _refine(rule, m, ctx)
            if refined is not None:
                code, extra = refined
                category = Category(code.split(".")[0])
                fields.update(extra)
        fields.setdefault("opname", fields.get("op") or op or "?")
        op = fields.pop("op", None) or op
    elif place is not None and (reading is None or reading.category.value != place.split(".")[0]):
        code, category, op, fields = place, Category(place.split(".")[0]), None, {}
    elif reading is not None:
        code, category, op = reading.code, reading.category, None
        fields = {"vocabulary": ", ".join(dict.fromkeys(w.strip() for w in reading.words))}
    else:
        code, category, fields, op = "other.exception", Category.OTHER, {}, None
    if code.startswith("gradient.inplace_"):
        fields.update(inplace_producer(fields, ctx))
    if code == "gradient.backward_twice":
        fields.update(reuse_fields(ctx))
    function = ctx.sites.function
    if not known:
        # New families, vocabulary readings and unknown errors name the torch function (issue 12).
        op = op or function
    _call_fields(fields, ctx, function)
    if code == "environment.file_not_found":
        fields.update(_file_fields(probe if worker is not None else target, ctx))
    if worker is not None:
        fields.setdefault("error", msg("triage.worker", error=worker.error, worker=worker.worker))
    fields.setdefault("error", _first_line(target))
    fields["type"] = type(target).__name__
    fields["module"] = ctx.module_path or msg("triage.no_module")
    # the root module's path is "": name it by its class in sentences
    fields["where"] = (msg("triage.where", module=ctx.module_path or type(ctx.module).__name__)
                       if ctx.module is not None else "")
    evidence = _evidence(target, ctx, fields, code)
    _operand_evidence(evidence, ctx, fields, function)
    uf = ctx.user_frame
    return Finding(
        category=category,
        code=code,
        message=msg(f"triage.{code}", **fields),
        severity=Severity.ERROR,
        stage=ctx.stage,
        step=ctx.step,
        module=ctx.module_path,
        op=op or ctx.loss_function or (type(ctx.module).__name__ if ctx.module is not None else None),
        file=uf.file if uf else None,
        line=uf.line if uf else None,
        cause=msg(f"triage.{code}.cause", **fields),
        next_check=msg(f"triage.{code}.next", **fields),
        evidence=evidence,
    ), ctx


def _classify(exc: BaseException) -> tuple[Rule, re.Match[str]] | None:
    """The exact rules first (nothing they know changes), then the families of issue 12."""
    return classify(exc) or match_none_grad(exc) or match_family(exc) or match_overlap(exc) or match_reading(exc)


# Types torch raises its own checks with; anything else (KeyError, a user's own class) is not read.
_TORCH_TYPES = (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError, AssertionError)


def _refine(rule: Rule, m: re.Match[str], ctx: Context) -> tuple[str, dict[str, Any]] | None:
    try:
        assert rule.refine is not None
        return rule.refine(m, ctx)
    except Exception as e:  # a refinement's bug keeps the rule's own reading
        _internal(f"triage.{rule.code}", e)
        return None


def _torch_raised(exc: BaseException, worker: WorkerError | None) -> bool:
    """True unless the user's own code raised it (`raise`/`assert` at the innermost frame)."""
    if type(exc) not in _TORCH_TYPES and not (worker is not None and worker.proxy is not None
                                               and type(worker.proxy) in _TORCH_TYPES):
        return False
    if worker is not None:
        return not (worker.frame is not None and worker.frame.source.startswith(("raise", "assert")))
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return True  # built by hand (tests, the catalogue): read as torch would raise it
    code = tb.tb_frame.f_code
    if not is_user_file(code.co_filename):
        return True
    return not linecache.getline(code.co_filename, tb.tb_lineno).strip().startswith(("raise", "assert"))


def _call_fields(fields: dict[str, Any], ctx: Context, function: str | None) -> None:
    """Fields every message may use: the failing function and the operands with metadata."""
    ops = ctx.operands[:3]
    fields.setdefault("function", function or "?")
    fields.setdefault("call", f"{function}: " if function else "")
    fields.setdefault("ops", " (" + ", ".join(f"{o.name}: {o}" for o in ops) + ")" if ops else "")
    fields.setdefault("names", ", ".join(o.name for o in ops) if ops else msg("triage.the_operands"))
    fields.setdefault("in_module", msg("triage.in_module", module=ctx.module_path or type(ctx.module).__name__)
                      if ctx.module is not None else "")
    fields.setdefault("in_function", msg("triage.in_function", function=function) if function else "")


def _operand_evidence(ev: dict[str, Any], ctx: Context, fields: dict[str, Any], function: str | None) -> None:
    if function:
        ev["function"] = function
    # the running module's inputs and parameters are already there: repeat them only under the
    # user's own name for them (`h0`, not torch's `input`)
    shown = {id(t) for _, t in ctx.inputs()} | {id(t) for _, t in ctx.parameters()}
    for o in ctx.operands:
        if o.name not in ev and (o.named_by_user or o.ident not in shown):
            ev[f"operand {o.name}"] = o
    for key in ("vocabulary", "branch_line", "reused"):
        if fields.get(key):
            ev[key] = fields[key]
    if "width_shape" in fields:  # an output head wider than its vocabulary: the three numbers
        ev.update({"max_index": fields["max_index"], "num_embeddings": fields["num_embeddings"],
                   "output_width": fields["width"], "output_shape": fields["width_shape"]})
        if fields.get("embedding"):
            ev["embedding"] = fields["embedding"]
    if fields.get("producer"):
        ev["produced_by"] = fields["producer"].strip()
    modified = fields.get("modified")
    if modified is not None:  # the tensor changed in place, by the user's name for it
        ev.setdefault(f"operand {modified.name}", modified)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    return f"{type(exc).__name__}: {line[:300]}"


_OPERAND_KEYS = ("a", "b", "expected", "got", "shape", "numel", "dim", "input", "target", "size",
                 "weight", "devices", "tensor", "node", "version")


def _evidence(exc: BaseException, ctx: Context, fields: dict[str, Any], code: str) -> dict[str, Any]:
    ev: dict[str, Any] = {}
    if ctx.user_frame is not None and ctx.user_frame.source:
        ev["source_line"] = ctx.user_frame.source
    ev["exception"] = fields["error"]
    operands = {k: fields[k] for k in _OPERAND_KEYS if k in fields}
    if operands and not code.startswith("environment."):
        ev["operands"] = ", ".join(f"{k}={v}" for k, v in operands.items())
    # Out of memory: reading values would allocate full-size temporaries on the full device
    # (and fail again); shapes, dtypes and devices are the evidence that matters there.
    describe = _metadata_only if code == "memory.oom" else summarize
    for name, t in ctx.inputs():
        ev[name] = describe(t)
    for name, p in ctx.parameters():
        ev[name if name.startswith("buffer ") else f"param {name}"] = describe(p)
    if code.startswith("environment."):
        for k in ("cwd", "resolved", "script_dir", "next_to_script", "exists_next_to_script"):
            if k in fields:
                ev[k] = fields[k]
    if code == "memory.oom" and torch.cuda.is_available():
        try:
            # The device that ran out ("... GPU 1 has a total capacity of ..."), else the current one.
            m = re.search(r"\bGPU (\d+)\b", str(exc))
            dev = int(m.group(1)) if m and int(m.group(1)) < torch.cuda.device_count() else None
            if dev is not None:
                ev["cuda_device"] = dev
            ev["cuda_allocated_mb"] = round(torch.cuda.memory_allocated(dev) / 2**20, 1)
            ev["cuda_reserved_mb"] = round(torch.cuda.memory_reserved(dev) / 2**20, 1)
        except Exception:  # a broken CUDA context must not hide the report
            pass
    return ev


def _metadata_only(t: Any) -> TensorSummary | None:
    """A tensor's summary without reading its values (no allocation, no sync)."""
    if not isinstance(t, torch.Tensor):
        return None
    strided = t.layout == torch.strided
    return TensorSummary(shape=tuple(t.shape), dtype=str(t.dtype), device=str(t.device),
                         contiguous=bool(t.is_contiguous()) if strided else False, numel=t.numel(),
                         requires_grad=bool(t.requires_grad), stride=tuple(t.stride()) if strided else None)


def _file_fields(exc: BaseException, ctx: Context) -> dict[str, Any]:
    """Seed G.1: the working directory, the resolved path, and the file next to the script."""
    name = getattr(exc, "filename", None)
    if name is None:
        m = re.search(r"'([^']+)'", str(exc))
        name = m.group(1) if m else "?"
    name = os.fsdecode(name) if isinstance(name, (str, bytes, os.PathLike)) else str(name)
    cwd = os.getcwd()
    resolved = str(Path(cwd, name).resolve()) if name != "?" else "?"
    script = None
    if ctx.session is not None:
        script = ctx.session.options.get("script")
    if script is None and ctx.user_frame is not None:
        script = ctx.user_frame.file
    if script is None and sys.argv and sys.argv[0]:
        script = sys.argv[0]
    script_dir = str(Path(script).resolve().parent) if script else cwd
    candidate = str(Path(script_dir, name).resolve()) if name != "?" and not os.path.isabs(name) else resolved
    exists = candidate != resolved and os.path.exists(candidate)
    return {"path": name, "cwd": cwd, "resolved": resolved, "script_dir": script_dir,
            "next_to_script": candidate, "exists_next_to_script": exists,
            "hint": msg("triage.environment.file_not_found.exists" if exists
                        else "triage.environment.file_not_found.absent", candidate=candidate)}


# exception code -> codes of findings, made before the exception, that explain it better
_SUPERSEDED: dict[str, tuple[str, ...]] = {
    "gradient.no_graph": ("gradient.loss_no_grad_fn",),
}


class ExceptionTriage(Checker):
    """Explains the exception that ends a watched block (check name "triage")."""

    name = "triage"

    def __init__(self) -> None:
        super().__init__()
        # The largest autograd node number among the roots of a completed backward(): nodes up
        # to it that backward reached were freed (read when a later backward meets them).
        self.freed_upto: int | None = None
        # the class-axis width of each model's last output and loss input (shapes only), to tell
        # an output head wider than its vocabulary from a bad id in the data (`_heads.py`)
        self.head_widths = HeadWidths()

    def on_root_forward_pre(self, model: torch.nn.Module, label: str) -> None:
        self.head_widths.calling(model)

    def on_root_forward(self, model: torch.nn.Module, label: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any], output: Any) -> None:
        self.head_widths.saw_output(model, output, args)

    def on_loss(self, call: LossCall) -> None:
        self.head_widths.saw_loss(call.name, call.input)

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        # (every backward: two attribute reads a root, nothing else)
        upto = self.freed_upto
        for t in roots:
            try:
                n = t.grad_fn._sequence_nr()  # type: ignore[union-attr]
            except AttributeError:  # not a tensor, a leaf, or a node type without a number
                continue
            if upto is None or n > upto:
                upto = n
        self.freed_upto = upto

    def on_exception(self, exc: BaseException) -> None:
        # SystemExit / KeyboardInterrupt are not faults; our own errors already carry a finding.
        if not isinstance(exc, Exception) or isinstance(exc, TriageError):
            return
        assert self.session is not None
        finding, ctx = explain_in_context(exc, self.session)
        # An error raised on NaN/Inf operands after a non-finite value was found is that
        # value's consequence (NaN logits refused by a distribution at the next step).
        earlier = earlier_nonfinite(self.session.findings, finding)
        if earlier is not None:
            evidence = consequence_evidence(finding, ctx)
            if evidence is not None:
                self.session.count_on(earlier, evidence)
                return
        # A check that already explained this failure before it was raised (e.g. the gradient
        # check names the .item() line that left the graph) makes the generic reading redundant.
        superseded_by = _SUPERSEDED.get(finding.code, ())
        if any(f.code in superseded_by for f in self.session.report.findings):
            return
        # The user's exception is re-raised unchanged after the report: the policy must neither
        # raise an AnomalyError nor a (possibly error-filtered) warning in its place.
        from .._errors import TriageWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TriageWarning)
            try:
                self.session.add(finding)
            except AnomalyError:
                pass


def as_written(value: str) -> str:
    """A number of torch's message as the user wrote it: C++ prints a negative dim that went through
    a `size_t` as its two's complement (`dim=-1` read as 18446744073709551615, issue 24)."""
    if value.isdigit() and 1 << 63 <= int(value) < 1 << 64:
        return str(int(value) - (1 << 64))
    return value
