"""The classification table: (exception types, message regex) → category and code.

Rules are tried in order, so the specific ones come first (a dtype clash in a matmul must
not read as a shape clash). Each rule's named groups become fields of its catalogue message
(`triage.<code>`, `triage.<code>.cause`, `triage.<code>.next`). A rule may *refine* its code
from the context (the running module, the stage): `mat1 and mat2 shapes` inside an
`nn.Linear` is a wrong `in_features`, not a generic matmul.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import torch

from .._catalogue import msg
from .._findings import Category, Stage

# torch.OutOfMemoryError is the top-level name since 2.5; older releases only have the CUDA one.
_OOM: type[BaseException] = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)

Refine = Callable[[re.Match[str], Any], "tuple[str, dict[str, Any]] | None"]


@dataclasses.dataclass(frozen=True)
class Rule:
    code: str
    category: Category
    pattern: re.Pattern[str] | None  # None: the exception type alone decides
    types: tuple[type[BaseException], ...] = (RuntimeError,)
    op: str | None = None
    refine: Refine | None = None

    def match(self, exc: BaseException) -> re.Match[str] | None:
        if not isinstance(exc, self.types):
            return None
        if self.pattern is None:
            return re.match("", "")
        return self.pattern.search(str(exc))


def _r(text: str) -> re.Pattern[str]:
    return re.compile(text, re.DOTALL)


# ---------------------------------------------------------------- refinements
def _linear_in_features(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    mod = ctx.module
    if isinstance(mod, torch.nn.Linear):
        got = m.group("a").split("x")[-1]
        return "shape.linear_in_features", {"in_features": mod.in_features, "got": got}
    return None


# conv's "Input type (double) and bias type (float)" names C types
_C_TYPES = {"float": "Float", "double": "Double", "long": "Long", "int": "Int", "c10::Half": "Half",
            "c10::BFloat16": "BFloat16", "unsigned char": "Byte", "bool": "Bool"}
_INTEGER = {"Long", "Int", "Short", "Byte", "Char", "Bool"}
_HALF = {"Half", "BFloat16"}


def _dtype_pair(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    a, b = (_C_TYPES.get(v, v) for v in (_plain_dtype(m.group("a")), _plain_dtype(m.group("b"))))
    pair = {a, b}
    if pair & _INTEGER:
        return "dtype.integer_input", {"a": a, "b": b}
    if "Double" in pair and "Float" in pair:
        return "dtype.double_input", {"a": a, "b": b}
    if pair & _HALF:
        return "dtype.half_input", {"a": a, "b": b}
    return None


def _plain_dtype(name: str) -> str:
    # "torch.cuda.FloatTensor" -> "Float", "torch.float32" -> "float32", "Long" -> "Long"
    name = name.strip()
    m = re.match(r"torch\.(?:cuda\.)?(\w+?)Tensor$", name)
    return m.group(1) if m else name


def _input_weight_type(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    a, b = m.group("a"), m.group("b")
    if ("cuda" in a) != ("cuda" in b):
        dev = lambda s: "cuda" if "cuda" in s else "cpu"  # noqa: E731
        return "device.input_weight", {"a": dev(a), "b": dev(b)}
    out = _dtype_pair(re.match(r"(?P<a>.*)\|(?P<b>.*)", f"{a}|{b}"), ctx)  # type: ignore[arg-type]
    return out or ("dtype.input_weight", {"a": _plain_dtype(a), "b": _plain_dtype(b)})


def _device_pair(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    devices = _devices_in(m.group(0))
    fields = {"devices": " and ".join(devices) or "?"}
    inside = ctx.module_device_clash()
    if inside is not None:
        key = "meta" if "meta" in (inside["module_device"], inside["input_device"]) else "move"
        return "device.module_input", dict(fields, **inside, hint=msg(f"triage.device.module_input.{key}"))
    if "meta" in devices:
        return "device.meta", fields
    return None


def _devices_in(text: str) -> list[str]:
    found: list[str] = []
    for d in re.findall(r"\b(cuda:\d+|cuda|cpu|mps|meta|xpu:\d+|xpu)\b", text):
        if d not in found:
            found.append(d)
    return found


def _device_fields(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    out = _device_pair(m, ctx)
    if out is None:
        return "device.mismatch", {"devices": " and ".join(_devices_in(m.group(0))) or "?"}
    return out


def _view_layout(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    name = ctx.channels_last_tensor()
    if name is not None:
        return "layout.channels_last", {"tensor": name}
    found = ctx.noncontiguous_tensor()
    detail = ""
    if found is not None:
        t = found[1]
        detail = msg("triage.layout.view_detail", tensor=found[0], shape=list(t.shape), stride=list(t.stride()))
    return "layout.view_noncontiguous", {"detail": detail}


def _conv_channels(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    """The channel axis to fix, by the input's rank and where its expected channels sit: a
    (batch, length, features) sequence given to Conv1d needs transpose(1, 2), not NHWC's permute."""
    shape = [int(v) for v in re.findall(r"-?\d+", m.group("input"))]
    last = len(shape) >= 3 and shape[-1] == int(m.group("expected"))
    key = {3: "seq", 4: "image", 5: "volume"}.get(len(shape), "image")
    return "shape.conv_channels", {"layout_fix": msg(f"triage.conv_layout.{key}" + (".last" if last else ""))}


def _scalar_type(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    if ctx.stage is Stage.LOSS or ctx.loss_function is not None:
        return "dtype.loss_target", {"got": m.group("got"), "expected": m.group("expected")}
    return None


def _distribution_values(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    """A distribution's parameter that failed its constraint: NaN / Inf in it (a model output
    gone non-finite, the usual cause) or finite values outside it (a negative scale)."""
    if re.search(r"\b(?:nan|inf)\b", m.string[m.end():]):
        return "numerical.distribution_nonfinite", {}
    return None


# ---------------------------------------------------------------- the table
def _state_dict_keys(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    text = m.string
    counts = {}
    for key, head in (("missing", "Missing key(s) in state_dict:"), ("unexpected", "Unexpected key(s) in state_dict:")):
        at = text.find(head)
        counts[key] = text[at:].split("\n", 1)[0].count('", "') + 1 if at >= 0 else 0
    counts["shapes"] = text.count("size mismatch for ")
    return "other.state_dict_keys", counts


RULES: tuple[Rule, ...] = (
    # a state dict that does not fit the module (its key list may read like anything: "optimizer")
    Rule("other.state_dict_keys", Category.OTHER, _r(r"Error\(s\) in loading state_dict for (?P<model>\w+)"),
         op="load_state_dict", refine=_state_dict_keys),
    # memory first: an allocator message may mention shapes or sizes
    Rule("memory.oom", Category.MEMORY, None, (_OOM, MemoryError)),
    Rule("memory.oom", Category.MEMORY,
         _r(r"(?:CUDA|MPS|XPU|HIP)? ?out of memory|DefaultCPUAllocator: can't allocate memory"
            r"|not enough memory")),
    # dtype (before shape: both speak of mat1 and mat2)
    Rule("dtype.matmul", Category.DTYPE,
         _r(r"mat1 and mat2 must have the same dtype, but got (?P<a>\w+) and (?P<b>\w+)"),
         op="matmul", refine=_dtype_pair),
    Rule("dtype.input_weight", Category.DTYPE,
         _r(r"Input type \((?P<a>[\w.]+)\) and (?:weight|bias) type \((?P<b>[\w.]+)\) should be the same"),
         refine=_input_weight_type),
    Rule("dtype.loss_target", Category.DTYPE,
         _r(r"expected target dtype to be (?P<expected>[\w ]+?), but got (?P<got>\w+)")),
    Rule("dtype.loss_target", Category.DTYPE,
         _r(r"Found dtype (?P<got>\w+) but expected (?P<expected>\w+)")),
    Rule("dtype.scalar_type", Category.DTYPE,
         _r(r"expected scalar type (?P<expected>\w+) but found (?P<got>\w+)"), refine=_scalar_type),
    Rule("dtype.scalar_type", Category.DTYPE,
         _r(r"Expected object of scalar type (?P<expected>\w+) but got scalar type (?P<got>\w+)"),
         refine=_scalar_type),
    Rule("dtype.cast", Category.DTYPE,
         _r(r"result type (?P<expected>\w+) can't be cast to the desired output type (?P<got>\w+)"),
         refine=_scalar_type),
    Rule("dtype.index", Category.DTYPE,
         _r(r"tensors used as indices must be (?P<expected>long, int, byte or bool) tensors"),
         (IndexError, RuntimeError), op="indexing"),
    Rule("dtype.index", Category.DTYPE,
         _r(r"Expected tensor for argument #\d+ 'indices' to have one of the following scalar types: "
            r"(?P<expected>[\w, ]+); but got (?P<got>[\w.]+)"), op="embedding"),
    Rule("dtype.index", Category.DTYPE,
         _r(r"(?P<op>\w+)\(\): Expected dtype (?P<expected>[\w/]+) for index"), (IndexError, RuntimeError),
         op="index"),
    # device
    Rule("device.mismatch", Category.DEVICE,
         _r(r"Expected all tensors to be on the same device[^\n]*"), refine=_device_fields),
    Rule("device.mismatch", Category.DEVICE,
         _r(r"Tensor on device (?P<a>\S+) is not on the expected device (?P<b>[^\s!]+)!?"),
         refine=_device_fields),
    Rule("device.meta", Category.DEVICE,
         _r(r"(?:cannot be called on meta tensors|Cannot copy out of meta tensor|meta tensors? (?:has|have) no data)"),
         (RuntimeError, NotImplementedError)),
    # layout (before the view-size shape rule)
    Rule("layout.view_noncontiguous", Category.LAYOUT,
         _r(r"view size is not compatible with input tensor's size and stride"), op="view",
         refine=_view_layout),
    Rule("layout.noncontiguous", Category.LAYOUT,
         _r(r"(?:is not contiguous|must be contiguous|to be contiguous|non-contiguous)")),
    # shape
    Rule("shape.matmul", Category.SHAPE,
         _r(r"mat1 and mat2 shapes cannot be multiplied \((?P<a>\d+x\d+) and (?P<b>\d+x\d+)\)"),
         op="matmul", refine=_linear_in_features),
    Rule("shape.bmm", Category.SHAPE,
         _r(r"Expected size for first two dimensions of batch2 tensor to be: (?P<expected>\[[^\]]*\]) "
            r"but got: (?P<got>\[[^\]]*\])"), op="bmm"),
    Rule("shape.dot", Category.SHAPE,
         _r(r"inconsistent tensor size, expected tensor (?P<a>\[[^\]]*\]) and src (?P<b>\[[^\]]*\])"), op="dot"),
    Rule("shape.broadcast", Category.SHAPE,
         _r(r"The size of tensor a \((?P<a>\d+)\) must match the size of tensor b \((?P<b>\d+)\) "
            r"at non-singleton dimension (?P<dim>\d+)")),
    Rule("shape.cat", Category.SHAPE,
         _r(r"Sizes of tensors must match except in dimension (?P<dim>\d+)\. Expected size (?P<expected>\d+) "
            r"but got size (?P<got>\d+) for tensor number (?P<index>\d+)"), op="cat"),
    Rule("shape.stack", Category.SHAPE,
         _r(r"stack expects each tensor to be equal size, but got (?P<a>\[[^\]]*\]) at entry (?P<i>\d+) "
            r"and (?P<b>\[[^\]]*\]) at entry (?P<j>\d+)"), op="stack"),
    Rule("shape.view", Category.SHAPE,
         _r(r"shape '(?P<shape>\[[^\]]*\])' is invalid for input of size (?P<numel>\d+)"), op="view/reshape"),
    Rule("shape.conv_channels", Category.SHAPE,
         _r(r"weight of size (?P<weight>\[[^\]]*\]), expected input(?P<input>\[[^\]]*\]) to have "
            r"(?P<expected>\d+) channels, but got (?P<got>\d+) channels"), refine=_conv_channels),
    Rule("shape.loss_batch", Category.SHAPE,
         _r(r"Expected input batch_size \((?P<input>\d+)\) to match target batch_size \((?P<target>\d+)\)"),
         (ValueError, RuntimeError)),
    Rule("shape.loss_target_dims", Category.SHAPE,
         _r(r"(?P<what>0D or 1D target tensor expected, multi-target not supported)")),
    Rule("shape.loss_target_size", Category.SHAPE,
         _r(r"Target size \((?P<target>torch\.Size\(\[[^\]]*\]\))\) must be the same as input size "
            r"\((?P<input>torch\.Size\(\[[^\]]*\]\))\)"), (ValueError, RuntimeError)),
    Rule("shape.batchnorm_one_sample", Category.SHAPE,
         _r(r"Expected more than 1 value per channel when training, "
            r"got input size (?P<size>torch\.Size\(\[[^\]]*\]\))"),
         (ValueError,), op="batch_norm"),
    # numerical: torch.distributions validates its arguments (validate_args, on by default).
    # The message prints the tensor, `grad_fn=` included: without these rules its words read
    # as an autograd fault.
    Rule("numerical.distribution_parameter", Category.NUMERICAL,
         _r(r"Expected parameter (?P<param>\w+) \(Tensor of shape (?P<shape>\([^)]*\))\) of distribution "
            r"(?P<dist>\w+)\(.*?\) to satisfy the constraint (?P<constraint>.+?), but found invalid values"),
         (ValueError,), refine=_distribution_values),
    Rule("numerical.distribution_value", Category.NUMERICAL,
         _r(r"Expected value argument \(\w+ of shape (?P<shape>\([^)]*\))\) to be within the support "
            r"\((?P<support>.+?)\) of the distribution (?P<dist>\w+)\(.*?\), but found invalid values"),
         (ValueError,)),
    # gradient
    Rule("gradient.no_graph", Category.GRADIENT,
         _r(r"element (?P<index>\d+) of tensors does not require grad and does not have a grad_fn"), op="backward"),
    Rule("gradient.no_graph", Category.GRADIENT,
         _r(r"One of the differentiated Tensors does not require grad()"), op="autograd.grad"),
    Rule("gradient.inplace_saved", Category.GRADIENT,
         _r(r"one of the variables needed for gradient computation has been modified by an inplace operation: "
            r"\[(?P<tensor>.+?)\], which is output (?P<output>\d+) of (?P<node>\w+), is at version "
            r"(?P<version>\d+); expected version (?P<expected>\d+)"), op="backward"),
    Rule("gradient.backward_twice", Category.GRADIENT,
         _r(r"Trying to backward through the graph a second time"), op="backward"),
    Rule("gradient.leaf_inplace", Category.GRADIENT,
         _r(r"(?<!view of )a leaf Variable that requires grad is being used in an in-place operation")),
    # environment
    Rule("environment.file_not_found", Category.ENVIRONMENT, None, (FileNotFoundError,)),
)


def classify(exc: BaseException) -> tuple[Rule, re.Match[str]] | None:
    """The first rule that matches `exc`, with its regex match; None for an unknown exception."""
    for rule in RULES:
        m = rule.match(exc)
        if m is not None:
            return rule, m
    return None
