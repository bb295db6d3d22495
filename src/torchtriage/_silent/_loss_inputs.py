"""Loss-input semantics: the loss got a legal tensor with the wrong meaning.

    cross_entropy on probabilities   softmax applied twice: inputs in [0, 1], rows summing to 1
    nll_loss without log_softmax     inputs above 0, or rows whose logsumexp is not 0
    sigmoid before *_with_logits     inputs in [0, 1] (or produced by sigmoid)
    binary loss on class indices     targets outside [0, 1]
    multi-hot targets to cross_entropy  probability targets whose rows do not sum to 1
    regression loss on class labels  (N, C) output against integer-valued (N, 1) labels

When the input's producer is visible in its autograd node (SoftmaxBackward0, SigmoidBackward0)
the verdict needs no number at all; otherwise it rests on a few reductions read once.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from .._findings import Report, Severity
from .._frames import user_frame_from_stack
from ._common import is_index_tensor, shape
from ._plans import Plan, Verdict, run_now
from ._swapped import swapped_plan

REGRESSION_LOSSES = frozenset({"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"})
ELEMENTWISE_LOSSES = REGRESSION_LOSSES | {"soft_margin_loss", "poisson_nll_loss", "kl_div"}
_TOL = 1e-3


def producer(t: Any) -> str:
    fn = getattr(t, "grad_fn", None)
    return fn.name() if fn is not None else ""


def _const(v: Verdict | None) -> Plan:
    return Plan([], lambda _vals: v)


_VIEWS = re.compile(r"(Unsafe)?(View|Reshape|Squeeze|Unsqueeze|Alias|Expand|Transpose|Permute|Select|Slice|Clone|T)"
                    r"(Alias)?Backward\d*$")


def first_producing_node(t: Any) -> Any:
    """`t`'s autograd node past any views (reshape, slice, transpose, ...): the op that made its
    values; None for a tensor outside the graph."""
    fn = getattr(t, "grad_fn", None)
    while fn is not None and _VIEWS.match(fn.name()):
        fn = next((f for f, _ in fn.next_functions if f is not None), None)
    return fn


def past_views(fn: Any) -> Any:
    """The first node at or below `fn` that is not a view (reshape, slice, transpose, ...)."""
    while fn is not None and _VIEWS.match(fn.name()):
        fn = next((f for f, _ in fn.next_functions if f is not None), None)
    return fn


# squashing ops and the range of their outputs
_SQUASHED = {"SigmoidBackward": (0.0, 1.0), "SoftmaxBackward": (0.0, 1.0), "TanhBackward": (-1.0, 1.0)}


def _squash_range(fn: Any) -> tuple[float, float] | None:
    name = fn.name() if fn is not None else ""
    return next((r for k, r in _SQUASHED.items() if name.startswith(k)), None)


def _squashed_twice(name: str, inp: torch.Tensor, tgt: torch.Tensor) -> Plan | None:
    """A loss on probabilities fed `sigmoid(p)` where `p` already came out of a squashing op
    (the model ends in nn.Sigmoid, the loss code applies torch.sigmoid again): the input can
    only lie in (sigmoid(lo), sigmoid(hi)) of the inner op's range, (0.5, 0.731) for a sigmoid.
    The harm is measured on this batch: the lowest loss above its minimum (the targets' own
    entropy) that any prediction in that band can reach (0 when the targets lie in the band)."""
    outer = first_producing_node(inp)
    if outer is None or not outer.name().startswith("SigmoidBackward") or tgt.shape != inp.shape:
        return None
    inner = past_views(next((f for f, _ in outer.next_functions if f is not None), None))
    rng = _squash_range(inner)
    if rng is None:
        return None
    lo, hi = (1 / (1 + math.exp(-r)) for r in rng)
    t = tgt.detach().float()
    band = t.clamp(lo, hi)
    # the loss above its own minimum (the targets' entropy) that the band leaves at best
    floor = (torch.xlogy(t, t) - t * band.log() + torch.xlogy(1 - t, 1 - t) - (1 - t) * (1 - band).log()).mean()
    x = inp.detach()

    def judge(v: list[float]) -> Verdict | None:
        if v[0] <= 0.01 or x.numel() < 4 or v[3] < 0 or v[4] > 1:
            return None  # targets inside the band: the loss can still reach its minimum
        return dict(name="squashed_twice", severity=Severity.WARNING, loss=name, inner=_op_of(inner),
                    lo=f"{lo:.3g}", hi=f"{hi:.3g}", floor=f"{v[0]:.3g}", _node=inner,
                    evidence={"input_producer": outer.name(), "its_input_producer": inner.name(),
                              "input_min": round(v[1], 6), "input_max": round(v[2], 6),
                              "possible_range": [round(lo, 4), round(hi, 4)],
                              "target_min": round(v[3], 6), "target_max": round(v[4], 6),
                              "lowest_reachable_excess_loss": round(v[0], 4)})

    return Plan([floor, x.amin(), x.amax(), t.amin(), t.amax()], judge)


def _op_of(fn: Any) -> str:
    return fn.name().replace("Backward0", "").replace("Backward1", "").lower()


def _probabilities(name: str, inp: torch.Tensor, dim: int | None, verdict: str, sev: Severity) -> Plan:
    made_by = producer(inp)
    if made_by.startswith(("SoftmaxBackward", "SigmoidBackward")):
        return _const(dict(name=verdict, severity=sev, loss=name, producer=made_by.replace("Backward0", "").lower(),
                           evidence={"input_producer": made_by}))
    if dim is None and inp.grad_fn is not None:
        # Sigmoid: the graph names the producer. Raw logits of a young model often all lie in
        # [0, 1] (a GAN discriminator's first steps), so values alone must not accuse them.
        fn = first_producing_node(inp)
        if fn is not None and fn.name().startswith("SigmoidBackward"):
            return _const(dict(name=verdict, severity=sev, loss=name, producer="sigmoid",
                               evidence={"input_producer": fn.name()}))
        return _const(None)
    x = inp.detach()
    vals = [x.amin(), x.amax()]
    if dim is not None and x.dim() > dim and x.shape[dim] > 1:
        vals.append((x.float().sum(dim) - 1).abs().amax())

    def judge(v: list[float]) -> Verdict | None:
        if x.numel() < 4 or v[0] < 0 or v[1] > 1 or (len(v) > 2 and v[2] > _TOL):
            return None
        return dict(name=verdict, severity=sev, loss=name, producer="softmax" if len(v) > 2 else "sigmoid",
                    evidence={"input_min": round(v[0], 6), "input_max": round(v[1], 6),
                              **({"max_row_sum_error": round(v[2], 6)} if len(v) > 2 else {})})

    return Plan(vals, judge)


def _log_probabilities(name: str, inp: torch.Tensor) -> Plan:
    """`kl_div`'s input is log-probabilities (issue 26): every value <= 0. Probabilities (a
    softmax's output) or raw scores above 0 are the other kind of input: the graph names a
    softmax producer, else the values do."""
    made_by = producer(inp)
    if made_by.startswith(("SoftmaxBackward", "SigmoidBackward")):
        return _const(dict(name="kl_div_input_not_log", severity=Severity.ERROR, loss=name,
                           evidence={"input_producer": made_by}))
    if made_by.startswith("LogSoftmaxBackward"):
        return _const(None)
    x = inp.detach()

    def judge(v: list[float]) -> Verdict | None:
        if v[1] <= 1e-6:
            return None
        return dict(name="kl_div_input_not_log", severity=Severity.ERROR, loss=name,
                    evidence={"input_min": round(v[0], 6), "input_max": round(v[1], 6)})

    return Plan([x.amin(), x.amax()], judge)


def loss_plans(name: str, inp: Any, tgt: Any, kwargs: dict[str, Any]) -> list[Plan]:
    """The semantic checks for one loss call (no sync: numbers are read later)."""
    if not isinstance(inp, torch.Tensor) or not isinstance(tgt, torch.Tensor) or not inp.is_floating_point():
        return []
    plans: list[Plan] = []
    swapped = swapped_plan(name, inp, tgt)
    if swapped is not None:  # labels as the input, the model's output as the target
        return [swapped]
    if name == "cross_entropy" and inp.dim() >= 2 and inp.shape[1] > 1:
        if is_index_tensor(tgt):
            plans.append(_probabilities(name, inp, 1, "probabilities_to_cross_entropy", Severity.ERROR))
        elif tgt.is_floating_point() and tgt.shape == inp.shape:
            t = tgt.detach()
            sums = t.float().sum(1)

            def judge_soft(v: list[float]) -> Verdict | None:
                if v[0] < 0 or v[1] <= _TOL:
                    return None
                return dict(name="targets_not_distributions", severity=Severity.WARNING, loss=name,
                            evidence={"target_shape": shape(tgt), "row_sum_min": round(v[2], 6),
                                      "row_sum_max": round(v[3], 6)})

            plans.append(Plan([t.amin(), (sums - 1).abs().amax(), sums.amin(), sums.amax()], judge_soft))
    elif name == "nll_loss" and inp.dim() >= 2 and inp.shape[1] > 1:
        made_by = producer(inp)
        if made_by.startswith("LogSoftmaxBackward"):
            pass
        elif made_by.startswith("SoftmaxBackward"):
            plans.append(_const(dict(name="nll_without_log_softmax", severity=Severity.ERROR, loss=name,
                                     evidence={"input_producer": made_by})))
        else:
            x = inp.detach().float()
            lse = torch.logsumexp(x, dim=1).abs().amax()

            def judge_nll(v: list[float]) -> Verdict | None:
                if v[0] <= 1e-6 and v[1] <= 1e-2:
                    return None
                return dict(name="nll_without_log_softmax", severity=Severity.ERROR, loss=name,
                            evidence={"input_max": round(v[0], 6), "max_abs_logsumexp": round(v[1], 6)})

            plans.append(Plan([x.amax(), lse], judge_nll))
    elif name == "kl_div" and inp.numel() >= 4:
        plans.append(_log_probabilities(name, inp))
    elif name in ("binary_cross_entropy_with_logits", "binary_cross_entropy"):
        if name == "binary_cross_entropy_with_logits":
            plans.append(_probabilities(name, inp, None, "sigmoid_before_logits_loss", Severity.ERROR))
        elif (twice := _squashed_twice(name, inp, tgt)) is not None:
            plans.append(twice)
        t = tgt.detach()

        def judge_bin(v: list[float]) -> Verdict | None:
            if v[0] >= 0 and v[1] <= 1:
                return None
            return dict(name="class_indices_to_binary_loss", severity=Severity.ERROR, loss=name,
                        evidence={"target_min": v[0], "target_max": v[1]})

        plans.append(Plan([t.amin(), t.amax()], judge_bin))
    elif name in REGRESSION_LOSSES and inp.dim() == 2 and inp.shape[1] > 1:
        n, c = inp.shape
        if tgt.numel() == n and tgt.shape in ((n,), (n, 1)):
            t = tgt.detach().float()

            def judge_reg(v: list[float]) -> Verdict | None:
                integral, lo, hi, distinct = v
                if integral > 0 or lo < 0 or hi > c - 1 or distinct > c or n < 4:
                    return None
                return dict(name="regression_on_class_labels", severity=Severity.ERROR, loss=name,
                            classes=c, evidence={"input_shape": shape(inp), "target_shape": shape(tgt),
                                                 "target_values": f"integers in [{int(lo)}, {int(hi)}]"})

            distinct = torch.unique(t).numel() if t.device.type == "cpu" else c  # avoid a sync off CPU
            plans.append(Plan([(t - t.round()).abs().amax(), t.amin(), t.amax(),
                               torch.tensor(float(distinct), device=t.device)], judge_reg))
    return plans


def check_loss_inputs(input: torch.Tensor, target: torch.Tensor, *, loss: str = "cross_entropy",
                      **loss_kwargs: Any) -> Report:
    """Check that a loss gets what it expects: logits, log-probabilities, class indices, distributions.

    Arguments:
        input: the first argument of the loss (a prediction).
        target: the second argument of the loss.
        loss: the `torch.nn.functional` name of the loss: "cross_entropy", "nll_loss",
            "binary_cross_entropy_with_logits", "binary_cross_entropy", "mse_loss", "l1_loss", ...
        **loss_kwargs: the loss's keyword arguments (ignore_index, reduction, ...).

    Returns:
        A `Report`, empty when the inputs have the meaning the loss expects.

    Example:
        >>> probs = torch.softmax(torch.randn(8, 5), dim=1)
        >>> torchtriage.check_loss_inputs(probs, torch.randint(0, 5, (8,))).primary.code
        'silent.probabilities_to_cross_entropy'
    """
    if not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError(f"check_loss_inputs takes two tensors, got {type(input).__name__} and {type(target).__name__}")
    if not isinstance(loss, str):
        raise TypeError(f"loss must be the name of a torch.nn.functional loss such as 'cross_entropy', got {loss!r}")
    with torch.no_grad():
        return run_now(loss_plans(loss, input, target, loss_kwargs), frame=user_frame_from_stack(2), op=loss)
