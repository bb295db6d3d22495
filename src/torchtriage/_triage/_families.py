"""The frequent families of torch errors, each with a specific explanation (issue 12 §3).

Same `Rule` shape as `_rules.py` (tried after it, so nothing that table classifies changes):
a message pattern gives the family, then a refinement reads the evidence (the operands of the
failing call, the running module, the user's frame) to say which tensor, which module and why.
The structural explanations that need more than a few lines live beside this file:
`_structure.py` (an optimizer with no parameters, DDP's unused parameters, the line that
produced a tensor modified in place).
"""

from __future__ import annotations

import ast
import re
from typing import Any, Optional

import torch
import torch.nn as nn

from .._catalogue import msg
from .._findings import Category
from ._heads import narrow_head_fields, output_width_fields
from ._operands import Operand, lines_before, lookup
from ._rules import Rule, _dtype_pair, _r
from ._structure import ddp_unused, empty_optimizer

Fields = Optional[tuple[str, dict[str, Any]]]


def _ops(ctx: Any) -> list[Operand]:
    return list(ctx.operands)


def _named(ctx: Any, pred: Any, default: str = "?") -> str:
    for o in _ops(ctx):
        if pred(o):
            return o.name
    return default


def _receiver(ctx: Any) -> str:
    """The name of the tensor the failing call works on: `x` in `x.numpy()`, `x.squeeze().sum()`
    or `np.asarray(x)`; else the first operand's name."""
    site = ctx.sites.user
    node = getattr(site, "node", None)
    if isinstance(node, ast.Call):
        base = node.func.value if isinstance(node.func, ast.Attribute) else None
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute):
            base = base.func.value  # x.squeeze().sum(): x
        if base is not None and isinstance(lookup(base, site.frame)[1], torch.Tensor):
            return ast.unparse(base)
        if node.args:  # np.asarray(t), torch.mean(t)
            return ast.unparse(node.args[0])
    return _named(ctx, lambda o: True, "tensor")


# ---------------------------------------------------------------- device
def _rnn_hidden(m: re.Match[str], ctx: Any) -> Fields:
    hidden_dev = m.group("b")
    inputs = ctx.inputs()
    first = id(inputs[0][1]) if inputs else 0  # the RNN's input sequence, not its state
    name = _named(ctx, lambda o: o.device == hidden_dev and o.ident != first, "")
    return "device.rnn_hidden", {"hidden": name or "hx"}


def _numpy_tensor(m: re.Match[str], ctx: Any) -> Fields:
    return "device.numpy", {"tensor": _receiver(ctx)}


def _numpy_grad(m: re.Match[str], ctx: Any) -> Fields:
    return "gradient.numpy_requires_grad", {"tensor": _receiver(ctx)}


def _index_device(m: re.Match[str], ctx: Any) -> Fields:
    # CUDA's indexing check names only the indexed tensor's device (an index on the CPU is
    # accepted): the index's own device comes from the operands when the message lacks it.
    indexed, told = m.group("b"), m.groupdict().get("a")
    idx = next((o for o in _ops(ctx) if not o.is_floating and o.device != indexed
                and (told is None or o.device == told)), None)
    where = told or (idx.device if idx is not None else msg("triage.device.index_elsewhere"))
    name = idx.name if idx is not None else ""
    return "device.index", {"a": where, "index": f" {name}" if name else "", "index_name": name or "idx"}


# ---------------------------------------------------------------- dtype
_C10 = {"float": "Float", "double": "Double", "long int": "Long", "int64_t": "Long", "int": "Int",
        "c10::Half": "Half", "c10::BFloat16": "BFloat16", "bool": "Bool", "short int": "Short",
        "signed char": "Char", "unsigned char": "Byte"}


def _c10_pair(m: re.Match[str], ctx: Any) -> Fields:
    a, b = (_C10.get(m.group(k).strip(), m.group(k).strip()) for k in ("a", "b"))
    pair = re.match(r"(?P<a>.*)\|(?P<b>.*)", f"{a}|{b}")
    assert pair is not None
    return _dtype_pair(pair, ctx) or ("dtype.matmul", {"a": a, "b": b})


_FLOAT_ONLY = re.compile(r"mean|std|var|softmax|norm|log|exp|sigmoid|tanh|erf|sqrt|pow|lerp|cumprod|median|"
                         r"quantile|dropout|gelu|silu|elu|cross_entropy|mse|avg_pool|interpolate|upsample")


def _integer_reduction(m: re.Match[str], ctx: Any) -> Fields:
    function = ctx.sites.function or ""
    name = function.rsplit(".", 1)[-1] if function else m.groupdict().get("opname") or m.groupdict().get("kernel")
    got = m.groupdict().get("got") or _dtype_of(ctx)
    return "dtype.integer_reduction", {"opname": name or "?", "got": got, "tensor": _receiver(ctx)}


def _kernel_dtype(m: re.Match[str], ctx: Any) -> Fields:
    got = m.group("got")
    if got in ("Long", "Int", "Short", "Byte", "Char", "Bool") and _FLOAT_ONLY.search(m.group("kernel")):
        return _integer_reduction(m, ctx)
    return None


def _dtype_of(ctx: Any) -> str:
    for o in _ops(ctx):
        if not o.is_floating:
            return o.dtype
    return "?"


def _requires_grad_int(m: re.Match[str], ctx: Any) -> Fields:
    found = next((o for o in _ops(ctx) if not o.is_floating), None)
    detail = f" ({found.name}: {found})" if found is not None else ""
    return "dtype.requires_grad_integer", {"detail": detail}


# ---------------------------------------------------------------- shape
def _dim_range(m: re.Match[str], ctx: Any) -> Fields:
    ndim = int(m.group("high")) + 1
    first = next((o for o in _ops(ctx) if o.shape is not None), None)
    if first is not None and len(first.shape) == ndim - 1:  # unsqueeze / stack: dims of the result
        ndim -= 1
    fields: dict[str, Any] = {"ndim": ndim, "tensor": _receiver(ctx)}
    squeezed = _squeezed(ctx)
    if squeezed is not None:
        name, shape = squeezed
        return "shape.dim_range_squeeze", dict(fields, tensor=name, shape=shape)
    return "shape.dim_range", fields


def _squeezed(ctx: Any) -> tuple[str, str] | None:
    """(name, original shape) when the failing call's tensor came out of a bare squeeze()."""
    site = ctx.sites.user
    if site is None or not isinstance(site.node, ast.Call):
        return None
    func = site.node.func
    base: ast.AST | None = func.value if isinstance(func, ast.Attribute) else None
    if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) and base.func.attr == "squeeze" \
            and not base.args and not base.keywords:
        found, value = lookup(base.func.value, site.frame)
        return ast.unparse(base), _of_shape(value if found else None)
    if isinstance(base, ast.Name):
        # h = x.squeeze() on an earlier line of the same function (the last such line wins)
        rx = re.compile(rf"^\s*{re.escape(base.id)}\s*=\s*(?P<src>.+)\.squeeze\(\s*\)\s*(?:#.*)?$")
        source = None
        for _, line in lines_before(site.frame):
            hit = rx.match(line)
            if hit:
                source = hit.group("src")
        if source is not None:
            try:
                ok, value = lookup(ast.parse(source.strip(), mode="eval").body, site.frame)
            except SyntaxError:
                ok, value = False, None
            return base.id, _of_shape(value if ok else None)
    return None


def _of_shape(value: Any) -> str:
    return msg("triage.shape.of_shape", shape=list(value.shape)) if isinstance(value, torch.Tensor) else ""


def _one_d(m: re.Match[str], ctx: Any) -> Fields:
    g = m.groupdict()
    dims = f"{g['rank_a']}-D and {g['rank_b']}-D" if g.get("rank_a") else f"{g['got']}-D"
    return "shape.one_d_only", {"dims": dims, "opname": g.get("opname") or "dot"}


def _rnn_batch_first(m: re.Match[str], ctx: Any) -> Fields:
    mod = ctx.module
    if not isinstance(mod, nn.RNNBase):
        return None
    inputs = [t for _, t in ctx.inputs()]
    if not inputs or inputs[0].dim() != 3:
        return None
    x = inputs[0]
    bf = bool(mod.batch_first)
    batch, other = (x.shape[0], x.shape[1]) if bf else (x.shape[1], x.shape[0])
    hidden = next((t for t in inputs[1:] if t.dim() == 3), None)
    if m.groupdict().get("expected", "").startswith("(") and hidden is not None and hidden.shape[1] == other:
        return "shape.rnn_batch_first", {"batch_first": bf, "shape": list(x.shape), "batch": batch,
                                         "hidden_batch": int(hidden.shape[1])}
    return None


def _embedding_index(m: re.Match[str], ctx: Any) -> Fields:
    mod = ctx.module
    if isinstance(mod, nn.Embedding):
        ids = next((t for _, t in ctx.inputs()), None)
        top = int(ids.max()) if isinstance(ids, torch.Tensor) and ids.numel() and ids.device.type != "meta" else "?"
        head = output_width_fields(ctx, mod, ids, top) if isinstance(ids, torch.Tensor) else None
        if head is not None:  # an id the model's own output head can predict: its width is wrong
            where = msg(f"triage.shape.output_width_not_vocab.{head.pop('width_source')}",
                        shape=head["width_shape"])
            return "shape.output_width_not_vocab", dict(head, detail=msg(
                "triage.shape.output_width_not_vocab.wide", read_from=where, **head))
        return "data.embedding_index", {"num_embeddings": mod.num_embeddings, "max_index": top}
    return "data.index_range", {}


def _target_range(m: re.Match[str], ctx: Any) -> Fields:
    logits = next((o for o in _ops(ctx) if o.is_floating and len(o.shape) >= 1), None)
    classes = logits.shape[1] if logits is not None and len(logits.shape) > 1 else "?"
    last = classes - 1 if isinstance(classes, int) else "?"
    head = narrow_head_fields(ctx, int(m.group("target")))
    if head is not None:  # the targets are the model's own ids: its head is narrower than its vocabulary
        return "shape.output_width_not_vocab", dict(head, detail=msg(
            "triage.shape.output_width_not_vocab.narrow", shape=head["width_shape"], **head))
    return "data.target_range", {"classes": classes, "last": last}


# ---------------------------------------------------------------- autograd
def _non_scalar(m: re.Match[str], ctx: Any) -> Fields:
    out = None
    for f, _ in reversed(ctx.frames):
        v = f.f_locals.get("out")
        if isinstance(v, torch.Tensor):
            out = v
            break
    name = _receiver(ctx)
    shape = list(out.shape) if out is not None else "?"
    return "gradient.non_scalar", {"tensor": name, "shape": shape}


def _view_inplace(m: re.Match[str], ctx: Any) -> Fields:
    code = "gradient.view_no_grad" if m.re.pattern.startswith("A view") else "gradient.leaf_view_inplace"
    return code, {"tensor": _receiver(ctx)}


# ---------------------------------------------------------------- the table
FAMILIES: tuple[Rule, ...] = (
    # device
    Rule("device.rnn_hidden", Category.DEVICE,
         _r(r"Input and hidden tensors are not at the same device, found input tensor at (?P<a>\S+) "
            r"and hidden tensor at (?P<b>[^\s,.]+)"), refine=_rnn_hidden),
    Rule("device.numpy", Category.DEVICE,
         _r(r"can't convert (?P<device>\S+) device type tensor to numpy"), (TypeError, RuntimeError),
         op="numpy", refine=_numpy_tensor),
    Rule("gradient.numpy_requires_grad", Category.GRADIENT,
         _r(r"Can't call numpy\(\) on Tensor that requires grad"), op="numpy", refine=_numpy_grad),
    Rule("device.pin_memory", Category.DEVICE,
         _r(r"cannot pin '(?P<ttype>[\w.]+)'"), op="pin_memory"),
    Rule("device.index", Category.DEVICE,
         _r(r"indices should be either on cpu or on the same device as the indexed tensor \((?P<b>[^)]+)\)"),
         (RuntimeError, IndexError), op="indexing", refine=_index_device),
    # index_add_ / index_copy_ / index_fill_ / take / put_: the index's device differs from self's
    Rule("device.index", Category.DEVICE,
         _r(r"(?P<opname>\w+)\(\): self, index and (?:source|out) expected to be in the same device, but got "
            r"(?:\(self\) |self\.device = )(?P<b>[^,\s]+), (?:\(index\) |index\.device = )(?!(?P=b),)(?P<a>[^,\s]+),"),
         refine=_index_device),
    Rule("device.cuda_error", Category.DEVICE,
         _r(r"CUDA error: (?P<what>[^\n]+)"), (RuntimeError,)),
    # dtype
    Rule("dtype.integer_reduction", Category.DTYPE,
         _r(r"(?P<opname>\w+)\(\): could not infer output dtype\. Input dtype must be either a floating point "
            r"or complex dtype\. Got: (?P<got>\w+)"), refine=_integer_reduction),
    Rule("dtype.integer_reduction", Category.DTYPE,
         _r(r"(?P<opname>std and var|\w+) only supports? floating point "
            r"and complex dtypes"), refine=_integer_reduction),
    Rule("dtype.kernel_dtype", Category.DTYPE,
         _r(r"\"(?P<kernel>\w+)\" not implemented for '(?P<got>\w+)'"), (RuntimeError, NotImplementedError),
         refine=_kernel_dtype),
    Rule("dtype.matmul", Category.DTYPE,
         _r(r"expected (?:m1|mat1|self) and (?:m2|mat2|other) to have the same dtype, but got: "
            r"(?P<a>[\w:]+(?: int)?) != (?P<b>[\w:]+(?: int)?)"), op="matmul", refine=_c10_pair),
    Rule("dtype.requires_grad_integer", Category.DTYPE,
         _r(r"[Oo]nly Tensors of floating point (?:and complex )?dtype can require gradients"),
         refine=_requires_grad_int),
    # shape
    Rule("shape.dim_range", Category.SHAPE,
         _r(r"Dimension out of range \(expected to be in range of \[(?P<low>-?\d+), (?P<high>-?\d+)\], "
            r"but got (?P<dim>-?\d+)\)"), (IndexError, RuntimeError), refine=_dim_range),
    Rule("shape.one_d_only", Category.SHAPE,
         _r(r"1D tensors expected, but got (?P<rank_a>\d)D and (?P<rank_b>\d)D tensors"), op="dot", refine=_one_d),
    Rule("shape.one_d_only", Category.SHAPE,
         _r(r"(?P<opname>\w+): Expected 1-D argument (?P<arg>\w+), but got (?P<got>\d+)-D"), refine=_one_d),
    Rule("shape.bmm_rank", Category.SHAPE, _r(r"(?P<arg>batch1|batch2) must be a 3D tensor"), op="bmm"),
    Rule("shape.einsum_rank", Category.SHAPE,
         _r(r"einsum\(\): the number of subscripts in the equation \((?P<subscripts>\d+)\) does not match the "
            r"number of dimensions \((?P<dims>\d+)\) for operand (?P<index>\d+)"), op="einsum"),
    Rule("shape.einsum_size", Category.SHAPE,
         _r(r"einsum\(\): subscript (?P<subscript>\w) has size (?P<a>\d+) for operand (?P<index>\d+) which does "
            r"not broadcast with previously seen size (?P<b>\d+)"), op="einsum"),
    Rule("shape.conv_rank", Category.SHAPE,
         _r(r"Expected (?P<expected>\d+D \(unbatched\) or \d+D \(batched\)) input to (?P<opname>\w+), but got input "
            r"of size: (?P<size>\[[^\]]*\])")),
    Rule("shape.rnn_hidden_size", Category.SHAPE,
         _r(r"Expected hidden(?:\[\d\])? size (?P<expected>\([^)]*\)), got (?P<got>\[[^\]]*\])"),
         refine=_rnn_batch_first),
    Rule("shape.rnn_hidden_size", Category.SHAPE,
         _r(r"For (?:un)?batched (?P<expected>\d-D) input, hx (?:and cx )?should also be \d-D but got "
            r"(?P<got>\d-D) tensors?")),
    Rule("shape.rnn_input_size", Category.SHAPE,
         _r(r"input\.size\(-1\) must be equal to input_size\. Expected (?P<expected>\d+), got (?P<got>\d+)")),
    Rule("shape.rank_mismatch", Category.SHAPE,
         _r(r"Tensors must have same number of dimensions: got (?P<a>\d+) and (?P<b>\d+)"), op="cat"),
    Rule("shape.expand", Category.SHAPE,
         _r(r"The expanded size of the tensor \((?P<a>-?\d+)\) must match the existing size \((?P<b>\d+)\) at "
            r"non-singleton dimension (?P<dim>\d+)\.\s+Target sizes: (?P<target>\[[^\]]*\])\.\s+"
            r"Tensor sizes: (?P<size>\[[^\]]*\])"), op="expand"),
    # data: indices and labels out of range
    Rule("data.embedding_index", Category.DATA, _r(r"index out of range in self"), (IndexError, RuntimeError),
         refine=_embedding_index),
    Rule("data.target_range", Category.DATA, _r(r"Target (?P<target>-?\d+) is out of bounds"),
         (IndexError, RuntimeError), refine=_target_range),
    Rule("data.index_bounds", Category.DATA,
         _r(r"index (?P<index>-?\d+) is out of bounds for dimension (?P<dim>\d+) with size (?P<size>\d+)"),
         (IndexError, RuntimeError), op="indexing"),
    # autograd
    Rule("gradient.non_scalar", Category.GRADIENT,
         _r(r"grad can be implicitly created only for (?:real )?scalar outputs"), op="backward", refine=_non_scalar),
    Rule("gradient.view_no_grad", Category.GRADIENT,
         _r(r"A view was created in no_grad mode and is being modified inplace with grad mode enabled"),
         refine=_view_inplace),
    Rule("gradient.leaf_view_inplace", Category.GRADIENT,
         _r(r"a view of a leaf Variable that requires grad is being used in an in-place operation"),
         refine=_view_inplace),
    Rule("gradient.inplace_version", Category.GRADIENT,
         _r(r"modified by an inplace operation: \[(?P<tensor>.+?)\] is at version (?P<version>\d+); "
            r"expected version (?P<expected>\d+)"), op="backward"),
    # optimizer and DDP: explained by the model's structure
    Rule("gradient.optimizer_empty", Category.GRADIENT, _r(r"optimizer got an empty parameter list"),
         (ValueError,), refine=empty_optimizer),
    Rule("gradient.ddp_unused_parameters", Category.GRADIENT,
         _r(r"Expected to have finished reduction in the prior iteration before starting a new one"),
         refine=ddp_unused),
)


def match_family(exc: BaseException) -> tuple[Rule, re.Match[str]] | None:
    for rule in FAMILIES:
        m = rule.match(exc)
        if m is not None:
            return rule, m
    return None
