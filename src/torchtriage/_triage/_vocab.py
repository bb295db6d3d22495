"""Reading an unknown torch error by its vocabulary and its operands (issue 12 §1).

When neither the exact rules (`_rules.py`) nor the family rules (`_families.py`) know a
message, the category is decided from two kinds of evidence together:

  * the message's words: each `Signal` is a phrase that speaks of one kind of fault
    ("Dimension out of range", "floating point", "same device", "contiguous", "requires grad",
    "param_groups"...) with a weight; a category's score is the sum of its signals' weights;
  * the operands (`_operands.py`): tensors on different devices add to `device`, an integer
    tensor where the message speaks of dtypes or floating point adds to `dtype`, a
    non-contiguous tensor where it speaks of views or strides adds to `layout`.

The category with the highest score wins (ties: the seed's order, shape first); its code is its
strongest signal's. Vocabulary codes are generic on purpose (`shape.rank`, `dtype.unsupported`):
the finding says what kind of fault it is and names the operands, never a story the message
does not support. A message with no signal stays `other`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from .._findings import CATEGORY_ORDER, Category
from ._operands import Operand


@dataclasses.dataclass(frozen=True)
class Signal:
    code: str
    weight: int
    pattern: re.Pattern[str]

    @property
    def category(self) -> Category:
        return Category(self.code.split(".")[0])


def _s(code: str, weight: int, rx: str) -> Signal:
    return Signal(code, weight, re.compile(rx, re.IGNORECASE))


_DTYPES = (r"(?:Half|BFloat16|Float|Double|Long|Int|Short|Byte|Char|Bool|ComplexFloat|ComplexDouble|"
           r"float16|bfloat16|float32|float64|int64|int32|int16|int8|uint8|bool|c10::Half|c10::BFloat16)")
_DEVICES = r"(?:devices?|cuda(?::\d+)?|cpu|mps|meta|xpu|hpu|gpu|accelerator|privateuse1|host memory)"

SIGNALS: tuple[Signal, ...] = (
    # shape: dims, ranks, sizes, element counts
    _s("shape.dim_range_any", 5, r"dim(?:ension)?\w*\s+(?:\S+\s+){0,3}out of range|"
                                 r"expected .*dim\w* .*in (?:the )?range|"
                             r"\binvalid dim(?:ension)?\b|\bdim(?:ension)? \S+ is out of bounds"),
    _s("shape.rank", 3, r"\b\d-?D\b|\d+-dimensional|number of dimensions|\bndims?\b|\bdim\(\)|\brank\b|\bunbatched\b|"
                        r"\bbatched\b|\b(?:zero|one|two|three|four|five|\d)[- ]dim|"
                        r"\bscalar tensors?\b|\bdimensionality\b|"
                        r"\b0-d\b|\bat least \w+ dim|\bnon-?empty \d|\bvector\b|\bmatrix\b|\bmatrices\b"),
    _s("shape.numel", 3, r"\bnumel\b|number of elements|is invalid for input of size|"
                         r"\bmore than one (?:value|element)\b|"
                         r"\bone element\b|\bsingle element\b|\b\d+ elements\b|\bempty tensors?\b"),
    _s("shape.size", 2, r"\bsizes?\b|\bshapes?\b|\blength\b|\bchannels?\b|\bbatch(?:_size|es)?\b|\bsingleton\b|"
                        r"\bbroadcast\w*|\bexpand\w*|\bmatch\w* .*\b(?:size|shape|dim)|\bdim(?:ension)?s?\b|"
                        r"\bsame number\b|too (?:small|large|big)|\bwindow\b|"
                        r"\bkernel_size\b|\bpadding\b|\bstride\b.*\bsize|"
                        r"\bsplit\w*\b|\bchunks?\b|\bsections?\b|\bheads?\b|\bembed_dim\b|\bsequence\b|\bslices?\b"),
    _s("data.index_range", 3, r"\bindex\w*\b.*\b(?:out of (?:range|bounds)|exceeds?)|out of (?:\w+ )?bounds|"
                              r"\bindices? \S+ out of range|\bout of range in self\b"),
    # dtype: scalar types, floating point vs integers, unsupported kernels
    _s("dtype.unsupported", 5, r"not implemented for '\w+'|\bnot (?:yet )?(?:supported|implemented) "
                               r"for (?:dtype|\w+ dtype|"
                               + _DTYPES + r"\b)|unsupported (?:scalar ?type|dtype)"),
    _s("dtype.floating_required", 4, r"floating[ -]point|\bfloating\b|\bcomplex\b.*\b(?:dtype|type)|\breal[- ]valued\b|"
                                     r"must be (?:a )?float"),
    _s("dtype.integer_required", 4, r"\bintegral\b|\binteger\b|\bints?\b.*\btensors?\b|indices must be|"
                                    r"\b(?:long|int64), int\b|\bint32/int64\b"),
    _s("dtype.mismatch", 3, r"\bdtypes?\b|scalar ?types?|\bScalarType\b|type promotion|result type|\bcast\w*\b|"
                            r"\btypes? of\b|\bsame type\b|\bquantized\b|\bqint\w*|\bquint\w*"),
    _s("dtype.mismatch", 1, r"\b" + _DTYPES + r"\b"),
    _s("dtype.mismatch", 3, r"\b(?:Long|Float|Double|Half|Int|Byte|Bool|Short|Char|BFloat16)Tensor\b"),
    _s("dtype.unsupported", 2, r"\b(?:non-)?complex\b|\bboolean\b|\bdatatypes?\b|\bitemsize\b"),
    # device: where tensors live
    _s("device.placement", 5, r"same device|different devices?|on the same|devices? mismatch|"
                              r"is not on the expected device|"
                             r"(?:tensor|argument|input|index|indices)\w* (?:is |are )?on (?:a )?" + _DEVICES),
    _s("device.pinning", 4, r"\bpin(?:ned|ning)?\b|\bpin_memory\b"),
    _s("device.meta", 4, r"\bmeta tensors?\b|\bmeta device\b"),
    _s("device.unsupported", 3, r"\b" + _DEVICES + r"\b|\bbackend\b|\bdevice type\b|\bdevice_type\b"),
    # layout: strides, contiguity, sparse and nested layouts
    _s("layout.noncontiguous", 5, r"contiguous|\bsubspaces\b"),
    _s("layout.memory_format", 4, r"channels[_ ]last|memory[_ ]format"),
    _s("layout.stride", 4, r"\bstrides?\b|\bstrided\b|overlapping memory|internal overlap|\bas_strided\b"),
    _s("layout.sparse", 4, r"\bsparse\b|\bCSR\b|\bCSC\b|\bCOO\b|\bBSR\b|\bBSC\b|\bnested\b|\bjagged\b|\bmkldnn\b|"
                           r"\blayouts?\b|\bcompressed\b|\bnnz\b|\bcrow_indices\b|\bcol_indices\b"),
    # gradient: autograd, in-place changes, version counters, optimizers
    _s("gradient.optimizer", 6, r"\boptimi[sz]er\b|\bparam(?:eter)?_groups?\b|\bparameter (?:list|group)s?\b|"
                                r"\blearning rate\b|\bmomentum\b|\bweight_decay\b|\bnesterov\b|\bbetas?\b|\bamsgrad\b|"
                                r"\blr_scheduler\b|\bscheduler\b|\bclosure\b"),
    _s("gradient.inplace", 5, r"in-?place|\binplace\b|\bis at version\b|\bversion counter\b|\b_version\b|"
                              r"\bmodified by an\b|\bhas been modified\b"),
    _s("gradient.requires_grad", 4, r"requires?[_ ]grad|require gradients?|does not require grad|\bno_grad\b|"
                                    r"\binference[_ ]mode\b|\binference tensors?\b"),
    _s("gradient.autograd", 3, r"\bbackward\b|\bautograd\b|\bgrad_fn\b|\bgraph\b|differentiab\w*|\bderivatives?\b|"
                               r"\bgrad(?:ient)?s?\b|\bleaf\b|\bretain_graph\b|\bsaved tensors?\b|\bjacobian\b|"
                               r"\bhessian\b|\bforward AD\b|\bforward-mode\b|\bdual\b|\btangents?\b|\bvjp\b|\bjvp\b|"
                               r"\bcheckpoint\w*\b|\bgrad mode\b|\bdetach\w*\b"),
)

_INTEGERS = ("int", "uint", "bool")


@dataclasses.dataclass(frozen=True)
class Reading:
    """What the vocabulary and the operands say: the winning code and the words that decided."""

    code: str
    scores: dict[str, int]
    words: tuple[str, ...]

    @property
    def category(self) -> Category:
        return Category(self.code.split(".")[0])


def read(text: str, operands: Sequence[Operand] = ()) -> Reading | None:
    """The category and code that `text` (and `operands`) speak for, or None: no signal."""
    scores: dict[str, int] = {}
    best: dict[str, tuple[int, str]] = {}
    words: dict[str, list[str]] = {}
    for sig in SIGNALS:
        m = sig.pattern.search(text)
        if m is None:
            continue
        cat = sig.category.value
        scores[cat] = scores.get(cat, 0) + sig.weight
        words.setdefault(cat, []).append(m.group(0))
        if cat not in best or sig.weight > best[cat][0]:
            best[cat] = (sig.weight, sig.code)
    named = set(re.findall(r"\b(?:cuda(?::\d+)?|cpu|mps|meta|xpu(?::\d+)?)\b", text.lower()))
    if len(named) > 1:  # two devices named in one message: a placement clash
        scores["device"] = scores.get("device", 0) + 5
        best["device"] = max(best.get("device", (0, "")), (5, "device.placement"))
        words.setdefault("device", []).append(" / ".join(sorted(named)))
    if not scores:
        return None
    _weigh_shapes(text, best)
    _weigh_operands(text, operands, scores, best)
    order = [c.value for c in CATEGORY_ORDER]
    cat = max(scores, key=lambda c: (scores[c], -order.index(c)))
    return Reading(best[cat][1], scores, tuple(words.get(cat, ())))


_SHAPE = re.compile(r"torch\.Size\(\[([\d,\s]*)\]\)|[(\[](\d+(?:,\s*\d+)+),?[)\]]")


def shapes_in(text: str) -> list[tuple[int, ...]]:
    """The shapes a message prints: `torch.Size([6, 6])`, `(5, 5)`, `[16, 4]` (two or more
    numbers, or a torch.Size of any rank)."""
    out = []
    for m in _SHAPE.finditer(text):
        body = m.group(1) if m.group(1) is not None else m.group(2)
        out.append(tuple(int(v) for v in re.findall(r"\d+", body)))
    return out


def _weigh_shapes(text: str, best: dict[str, tuple[int, str]]) -> None:
    """Two shapes printed side by side tell rank from size: the same number of dimensions with
    other sizes is a size mismatch, whatever words ("2D") the message uses; another number of
    dimensions is a rank mismatch."""
    if best.get("shape", (0, ""))[1] not in ("shape.rank", "shape.size"):
        return
    found = shapes_in(text)
    if len(found) < 2 or len(set(found)) < 2:
        return
    ranks = {len(sh) for sh in found}
    best["shape"] = (best["shape"][0], "shape.size" if len(ranks) == 1 else "shape.rank")


def _weigh_operands(text: str, operands: Sequence[Operand], scores: dict[str, int],
                    best: dict[str, tuple[int, str]]) -> None:
    """Evidence from the tensors themselves, added to the categories the message already names."""
    if not operands:
        return
    kinds = {o.device.split(":")[0] for o in operands}
    if len(kinds) > 1 or len({o.device for o in operands if o.device != "cpu"}) > 1:
        if "device" in scores or re.search(r"\bsame\b|\bdifferent\b|\bmismatch", text, re.IGNORECASE):
            scores["device"] = scores.get("device", 0) + 4
            best.setdefault("device", (0, "device.placement"))
    if "dtype" in scores and any(o.dtype.startswith(_INTEGERS) for o in operands) \
            and any(o.is_floating for o in operands):
        scores["dtype"] += 2
    if "layout" in scores or re.search(r"\bview\b", text):
        if any(o.layout == "strided" and o.is_view for o in operands):
            scores["layout"] = scores.get("layout", 0) + 1
            best.setdefault("layout", (0, "layout.stride"))
    if "gradient" in scores and any(o.requires_grad for o in operands):
        scores["gradient"] += 1
