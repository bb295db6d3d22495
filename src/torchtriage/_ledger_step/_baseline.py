"""A baseline that is trained by the policy loss (session 12): REINFORCE with the critic not detached.

The invariant: a loss term meant to train one module does not backpropagate into another. The
score-function (REINFORCE / actor-critic / PPO) term multiplies a log-probability by a weight —
the advantage, a reward minus a baseline (`reward - critic(x)`, `returns - values`) — and that
weight must carry no gradient: the policy's gradient is `advantage * d log p`. When the baseline
is not detached, the policy term also sends `log p * d baseline` into the critic, which then
chases the policy's log-probabilities instead of the reward.

Seen from the backward graph at the ledger's walked backwards (the nodes of `GradSinks.backward`):
a `Mul` node one of whose inputs depends on a log-probability (a `LogSoftmax`, `Logsumexp`, `Log`
or `LogSigmoid` node within `LOG_DEPTH` nodes) and the other, past view-like nodes, is a
difference (`Sub`) that requires grad. The parameters the difference depends on and the
log-probability does not (the critic's own; with a shared trunk, the value head) that an
optimizer holds are the ones the policy term reaches wrongly: `gradient.baseline_not_detached`.

Quiet: a detached advantage (the weight has no grad), an entropy or focal term (the weight is
made from the same logits as the log-probability: no parameter of its own), actor-critic with a
shared trunk and a detached advantage (a combined loss over a shared trunk is normal).
Cost: the walked nodes' types, and bounded walks below each `Mul` that takes a difference.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack

_LOGS = {"LogSoftmaxBackward0", "LogsumexpBackward0", "LogBackward0", "LogSigmoidBackward0"}
_VIEWS = {"UnsqueezeBackward0", "SqueezeBackward0", "SqueezeBackward1", "ExpandBackward0", "ViewBackward0",
          "ReshapeAliasBackward0", "NegBackward0", "CloneBackward0", "ToCopyBackward0", "SelectBackward0",
          "SliceBackward0", "TBackward0", "PermuteBackward0", "TransposeBackward0"}
LOG_DEPTH = 400  # nodes looked at below the log-probability side
MAX_LEAVES_WALK = 200_000


@dataclasses.dataclass
class _Hit:
    params: list[str]
    count: int
    values: int
    log_op: str
    frame: UserFrame | None
    step: int
    seen: int = 1


def _below(node: Any, limit: int) -> tuple[set[int], set[str], dict[int, Any]]:
    """Node ids, node types and leaves (id -> tensor) below `node`, at most `limit` nodes."""
    seen: set[int] = set()
    kinds: set[str] = set()
    leaves: dict[int, Any] = {}
    stack = [node]
    while stack and len(seen) < limit:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        kinds.add(type(n).__name__)
        var = getattr(n, "variable", None)
        if var is not None:
            leaves[id(var)] = var
            continue
        stack.extend(k for k, _ in getattr(n, "next_functions", ()) if k is not None)
    return seen, kinds, leaves


def _name(index: Any, t: Any, several: bool) -> str:
    info = index.info(t)
    if info is None:
        return f"tensor {list(t.shape)}"
    return f"{info.label}.{info.qualname}" if several and info.label and not info.raw else info.qualname


class BaselineWatch:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.hits: dict[tuple[str, ...], _Hit] = {}

    def nodes(self, order: list[Any]) -> None:
        opts = self.session.optimizers
        held = {id(p): k for k, p in enumerate(p for o in opts for g in o.param_groups for p in g["params"])}
        if not held:
            return
        index = self.session.param_index
        for node in order:
            if type(node).__name__ != "MulBackward0":
                continue
            kids = [k for k, _ in node.next_functions]
            if len(kids) != 2 or kids[0] is None or kids[1] is None:
                continue  # a detached (or constant) weight: nothing goes back through it
            for x, w in ((kids[0], kids[1]), (kids[1], kids[0])):
                diff = w
                while diff is not None and type(diff).__name__ in _VIEWS:
                    nxt = [k for k, _ in diff.next_functions if k is not None]
                    diff = nxt[0] if len(nxt) == 1 else None
                if diff is None or type(diff).__name__ != "SubBackward0":
                    continue
                _, xkinds, xleaves = _below(x, LOG_DEPTH)
                log_ops = sorted(xkinds & _LOGS)
                if not log_ops:
                    continue
                _, _, wleaves = _below(diff, MAX_LEAVES_WALK)
                own = sorted((t for i, t in wleaves.items() if i not in xleaves and i in held),
                             key=lambda t: held[id(t)])
                if not own:
                    continue
                names = [_name(index, t, len(self.session.models) > 1) for t in own]
                key = tuple(sorted(names))
                if key in self.hits:
                    self.hits[key].seen += 1
                    continue
                self.hits[key] = _Hit(names, len(own), sum(int(t.numel()) for t in own), log_ops[0],
                                      user_frame_from_stack(3), self.session.step)
                break

    def end(self) -> list[Finding]:
        out = []
        for hit in self.hits.values():
            model = ""
            first = hit.params[0]
            module = first.rpartition(".")[0] or None
            evidence: dict[str, Any] = {
                "parameters_reached_through_the_weight": hit.params[:12], "count": hit.count,
                "values": hit.values, "log_probability_op": hit.log_op.replace("Backward0", ""),
                "weight": "a difference that requires grad (reward - baseline)", "walked_backwards": hit.seen}
            fields = {"count": hit.count, "first": first, "values": hit.values,
                      "log": hit.log_op.replace("Backward0", ""), "model": model}
            out.append(from_catalogue(Category.GRADIENT, "gradient.baseline_not_detached", "ledger.baseline",
                                      fields=fields, cause_key="ledger.baseline.cause",
                                      next_key="ledger.baseline.next", frame=hit.frame, evidence=evidence,
                                      source_line=hit.frame is not None, severity=Severity.WARNING,
                                      stage=Stage.BACKWARD, step=hit.step, module=module, parameter=first))
        return out
