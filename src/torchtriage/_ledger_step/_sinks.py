"""Parameters that receive a gradient at every step and that no optimizer holds (session 12).

The invariant: a tensor that requires grad, is a leaf, is reached by the training loss and gets a
gradient is updated by something (an optimizer, or the user's own `p -= lr * p.grad`). A module
built outside the model that the optimizer was built from (a distillation loss with its own
1x1 align convolutions, a projection head kept in the trainer, a layer re-enabled after the
optimizer was built from the trainable ones only) gets a `.grad` at every backward, no
optimizer holds it, `zero_grad()` never clears it (it grows), and it never moves: the model is
trained through a fixed random projection.

Seen from the backward graph, not from the watched models: at the judged backwards (the ledger's
sampled steps; a walk at most `WALKS` times per set of optimizers and of the watched models'
parameters, so a layer replaced after the optimizer was built is walked again) the graph is walked from the
roots to its `AccumulateGrad` leaves. A leaf that is an `nn.Parameter` and that no optimizer's
`param_groups` holds is a candidate; its values (a sample) and gradient (a sample) are kept. Its
consumer op is noted too: whether another input of that op depends on parameters an optimizer
holds (it sits on the trained path: student -> align conv -> loss) or not (a target network fed
with data). At the end (one read) a candidate reached at `MIN_REACHED` judged backwards whose
sampled values never changed while its gradient was non-zero is reported:

  * warning: its module ran in train() mode on the trained path while an optimizer stepped;
  * info: its module is in eval() (a frozen pretrained network whose requires_grad was left on:
    wasted work, no harm), or it is not on the trained path.

Quiet: frozen parameters (requires_grad False: no AccumulateGrad), parameters updated by hand
(they move), parameters of a second optimizer (held), a GAN's discriminator reached by the
generator's loss (held by its own optimizer), EMA / teacher copies (not reached).
Cost: one Python walk of the graph at a judged backward, at most `WALKS` per set of optimizers;
two gathers per candidate when first seen; one read at the end.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import weakref
from typing import Any

import torch
import torch.nn as nn

from .._deferred import read_scalars
from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, is_our_file, user_frame_from_stack
from .._gradients._graph import grad_fn_of

WALKS = 6  # judged backwards walked per set of optimizers
MAX_SETS = 64  # sets of (optimizers, models' parameters) walked (a model re-creating parameters each step)
MIN_REACHED = 2  # judged backwards that reached a parameter before it is judged (a sampled pair)
MIN_STEPS = 3  # optimizer steps in the run before anything is judged
SAMPLE = 32
MAX_NODES = 100_000


@dataclasses.dataclass
class _Sink:
    ref: weakref.ref[torch.Tensor]
    index: torch.Tensor
    start: torch.Tensor
    grad0: torch.Tensor  # |gradient| sample when first seen
    gmax: torch.Tensor
    shape: tuple[int, ...]
    name: str = ""
    module: weakref.ref[nn.Module] | None = None
    module_name: str = ""
    reached: int = 0
    on_path: int = 0  # judged backwards where another input of its op depended on held parameters
    frame: UserFrame | None = None
    grad_seen: bool = False
    order: int = 0  # its place among its module's parameters
    in_train: int = 0  # walks at which its module was in train() mode (the end may find it in eval())


def walk(roots: Any, held: set[int]) -> tuple[list[Any], dict[int, bool], dict[int, list[Any]]]:
    """The graph's nodes in post-order, whether each reaches a held leaf, and each node's
    consumers (the nodes that take its output)."""
    order: list[Any] = []
    trained: dict[int, bool] = {}
    parents: dict[int, list[Any]] = {}
    stack: list[tuple[Any, bool]] = []
    for r in roots:
        if isinstance(r, torch.Tensor) and r.requires_grad:
            fn, known = grad_fn_of(r)
            if known and fn is not None:
                stack.append((fn, False))
    seen: set[int] = set()
    while stack:
        node, done = stack.pop()
        if done:
            kids = [n for n, _ in getattr(node, "next_functions", ()) if n is not None]
            trained[id(node)] = any(trained.get(id(k), False) for k in kids)
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        if len(seen) > MAX_NODES:
            break
        var = getattr(node, "variable", None)
        if isinstance(var, torch.Tensor):
            trained[id(node)] = id(var) in held
            order.append(node)
            continue
        stack.append((node, True))
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is None:
                continue
            parents.setdefault(id(nxt), []).append(node)
            if id(nxt) not in seen:
                stack.append((nxt, False))
    return order, trained, parents


def on_trained_path(node: Any, trained: dict[int, bool], parents: dict[int, list[Any]]) -> bool:
    """Whether an op that takes this leaf (through views of it alone: a Linear's weight goes
    through a transpose) also takes an input that depends on parameters an optimizer holds."""
    level, seen = [node], {id(node)}
    for _ in range(8):
        nxt = []
        for child in level:
            for p in parents.get(id(child), ()):
                if id(p) in seen:
                    continue
                seen.add(id(p))
                kids = [k for k, _ in p.next_functions if k is not None]
                if len(kids) == 1:
                    nxt.append(p)  # a view of the leaf alone
                elif any(trained.get(id(k), False) for k in kids if id(k) != id(child)):
                    return True
        level = nxt
        if not level:
            break
    return False


class GradSinks:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.sinks: dict[int, _Sink] = {}
        self.walks: dict[tuple[int, ...], int] = {}  # (optimizer ids..., models' parameters)
        self.steps = 0  # optimizer steps heard (judged ones)
        self.last_nodes: list[Any] = []  # the last walk's nodes (for the plain-weight watch)
        self.held_seen: set[int] = set()  # parameters an optimizer held at a walk (it may be gone at the end)
        self.optimizers_seen = 0  # the most optimizers known at a walk (they may be freed before the end)
        self.model_ids: set[int] = set()  # parameters the watched models had at a walk
        self.gone = 0  # the most held Parameters the models no longer had at a walk after a change

    def stepped(self) -> None:
        self.steps += 1

    def backward(self, roots: tuple[Any, ...]) -> list[Any] | None:
        """A judged backward is about to run: walk its graph (at most `WALKS` times per set of
        optimizers). Returns the walk's nodes, or None when not walked."""
        opts = self.session.optimizers
        # per set of optimizers and of the watched models' parameters: a layer replaced after the
        # optimizer was built (a pruning or quantization wrapper swapped in mid-run) is a new set
        ids = tuple(id(p) for m in self.session.models for p in m.parameters())
        key = (*sorted(id(o) for o in opts), hash(ids))
        if not opts or self.walks.get(key, 0) >= WALKS or (key not in self.walks and len(self.walks) >= MAX_SETS):
            return None
        self.walks[key] = self.walks.get(key, 0) + 1
        held = {id(p) for o in opts for g in o.param_groups for p in g["params"]}
        self.held_seen |= held
        if self.walks[key] == 1 and len(self.walks) > 1:
            # the models' parameters changed: the Parameters an optimizer holds that no watched model
            # has any more (the layers a replacement took out) are the other half of the story
            current = set(ids)
            gone = [p for o in opts for g in o.param_groups for p in g["params"]
                    if isinstance(p, nn.Parameter) and id(p) not in current and id(p) in self.model_ids]
            self.gone = max(self.gone, len(gone))
        self.model_ids |= set(ids)
        order, trained, parents = walk(roots, held)
        frame: UserFrame | None = None
        fresh: list[_Sink] = []
        now: list[_Sink] = []
        self.optimizers_seen = max(self.optimizers_seen, len(opts))
        with torch.no_grad():
            for node in order:
                var = getattr(node, "variable", None)
                if not isinstance(var, nn.Parameter) or id(var) in held or not var.requires_grad \
                        or not var.is_floating_point() or not var.numel() or var.layout is not torch.strided \
                        or not var.untyped_storage().nbytes():  # (FSDP's views: storage freed until the all-gather)
                    continue
                s = self.sinks.get(id(var))
                if s is None or s.ref() is not var:
                    n = var.numel()
                    index = torch.linspace(0, n - 1, min(n, SAMPLE), device=var.device).long()
                    start = var.detach().reshape(-1).index_select(0, index).clone()
                    zeros = torch.zeros(index.numel(), dtype=torch.float32, device=var.device)
                    frame = frame or user_frame_from_stack(3)
                    s = self.sinks[id(var)] = _Sink(weakref.ref(var), index, start, zeros.clone(), zeros,
                                                    tuple(var.shape), frame=frame)
                    fresh.append(s)
                s.reached += 1
                now.append(s)
                if on_trained_path(node, trained, parents):
                    s.on_path += 1
        if fresh:
            self._name(fresh)
        for sink in now:
            mod = sink.module() if sink.module is not None else None
            sink.in_train += mod is None or mod.training
        return order

    def backward_end(self) -> None:
        """After a walked backward: the gradients' sample (no read)."""
        with torch.no_grad():
            for s in self.sinks.values():
                p = s.ref()
                if p is None or p.grad is None or p.grad.shape != p.shape or p.grad.layout is not torch.strided:
                    continue
                g = p.grad.detach().reshape(-1).index_select(0, s.index).abs().float()
                if not s.grad_seen:
                    s.grad0.copy_(g)
                    s.grad_seen = True
                torch.maximum(s.gmax, g, out=s.gmax)

    def _name(self, fresh: list[_Sink]) -> None:
        """The module each new candidate belongs to, found from the locals of the user's frames on
        the stack (the trainer's `distillation_loss.D_loss_fn`), breadth-first, bounded."""
        wanted = {id(p): s for s in fresh if (p := s.ref()) is not None}
        k = 0
        for module, path in modules_on_stack():
            if not wanted:
                break
            for mname, sub in module.named_modules():
                for pname, p in sub.named_parameters(recurse=False):
                    s = wanted.pop(id(p), None)
                    k += 1
                    if s is not None:
                        s.order = k
                        s.module = weakref.ref(sub)
                        s.module_name = f"{path}.{mname}" if mname else path
                        s.name = f"{s.module_name}.{pname}"

    # ------------------------------------------------------------------ judging
    def end(self, explained: set[str]) -> list[Finding]:
        if self.steps < MIN_STEPS:
            return []
        opts = self.session.optimizers
        held = {id(p) for o in opts for g in o.param_groups for p in g["params"]}
        rows = [(s, p) for s in self.sinks.values()
                if s.reached >= MIN_REACHED and (p := s.ref()) is not None and id(p) not in held
                and p.requires_grad]
        if not rows:
            return []
        with torch.no_grad():
            dev = rows[0][1].device
            stats = []
            for s, p in rows:
                now = p.detach().reshape(-1).index_select(0, s.index)
                g = p.grad.detach().reshape(-1).index_select(0, s.index).abs().float() \
                    if p.grad is not None and p.grad.shape == p.shape else torch.zeros_like(s.gmax)
                stats.append(torch.stack([(now != s.start).sum().float(), s.gmax.max(),
                                          s.grad0.norm(), g.norm(),
                                          p.detach().float().norm()]).to(dev))
            flat = read_scalars([torch.stack(stats).reshape(-1)])
        groups: dict[tuple[str, bool], list[tuple[_Sink, list[float]]]] = {}
        for (s, p), k in zip(rows, range(0, len(flat), 5)):
            moved, gmax, g0, g1, norm = flat[k:k + 5]
            info = self.session.param_index.info(p)
            if moved or not gmax or (s.name and s.name in explained) \
                    or (info is not None and info.qualname in explained):
                continue
            mod = s.module() if s.module is not None else None
            # a parameter whose own module's other parameters an optimizer holds (held now or at a
            # walk: the optimizer may be gone), left out by selection (LoRA's base weight beside its
            # adapters, requires_grad left on), is deliberate: info. A layer appended to a model
            # after its optimizer was built holds nothing an optimizer holds: loud.
            inside = mod is not None and any(id(q) in held or id(q) in self.held_seen for q in mod.parameters())
            loud = s.in_train > 0 and s.on_path > 0 and not inside
            groups.setdefault((s.module_name.rpartition(".")[0] if "." in s.module_name else s.module_name,
                               loud), []).append((s, [g0, g1, norm]))
        return [self._finding(sorted(items, key=lambda it: it[0].order), loud)
                for (_, loud), items in groups.items()]

    def _finding(self, items: list[tuple[_Sink, list[float]]], loud: bool) -> Finding:
        s, (g0, g1, norm) = items[0]
        names = [it[0].name or f"tensor {list(it[0].shape)}" for it in items]
        module = _common([it[0].module_name for it in items])
        mode = "train" if s.in_train else "eval"
        evidence: dict[str, Any] = {
            "parameters": names[:10], "count": len(items),
            "values": sum(int(torch.Size(it[0].shape).numel()) for it in items),
            "judged_backwards_reaching_them": s.reached, "in_optimizer": False,
            "optimizers": max(len(self.session.optimizers), self.optimizers_seen), "moved": False,
            "first_norm": round(norm, 6), "grad_sample_norm_first": float(f"{g0:.4g}"),
            "grad_sample_norm_end": float(f"{g1:.4g}"), "module_mode": mode,
            "on_trained_path": s.on_path > 0,
            "module_types": sorted({type(m).__name__ for it in items if it[0].module is not None
                                    and (m := it[0].module()) is not None})[:4]}
        if self.gone:
            evidence["optimizer_holds_parameters_the_model_replaced"] = self.gone
        fields = {"count": len(items), "module": module or names[0], "first": names[0], "reached": s.reached,
                  "g0": f"{g0:.3g}", "g1": f"{g1:.3g}", "mode": mode}
        variant = "sink" if loud else "sink_quiet"
        return from_catalogue(Category.GRADIENT, "gradient.not_in_optimizer", f"ledger.{variant}",
                              fields=fields, cause_key=f"ledger.{variant}.cause", next_key=f"ledger.{variant}.next",
                              frame=s.frame, evidence=evidence, source_line=s.frame is not None,
                              severity=Severity.WARNING if loud else Severity.INFO, stage=Stage.OPTIMIZER,
                              step=self.session.step, module=module or None, parameter=names[0])


def _common(paths: list[str]) -> str:
    """The longest dotted prefix the module paths share."""
    parts = [p.split(".") for p in paths if p]
    if not parts:
        return ""
    out = []
    for bits in zip(*parts):
        if len(set(bits)) != 1:
            break
        out.append(bits[0])
    return ".".join(out)


MAX_DEPTH = 4
MAX_VISITS = 5_000
MAX_ITEMS = 64
_LEAVES = (str, bytes, int, float, bool, complex, type(None), types.ModuleType, types.FunctionType,
           types.BuiltinFunctionType, types.MethodType, type, torch.Tensor)


def modules_on_stack() -> list[tuple[nn.Module, str]]:
    """Modules reachable from the locals of the user's frames on the stack, with their path."""
    level: list[tuple[Any, str]] = []
    f: Any = sys._getframe(1)
    while f is not None:
        if not is_our_file(f.f_code.co_filename) and "/torch/" not in f.f_code.co_filename:
            level.extend((v, k) for k, v in list(f.f_locals.items()))
        f = f.f_back
    seen: set[int] = set()
    out: list[tuple[nn.Module, str]] = []
    for _ in range(MAX_DEPTH):
        nxt: list[tuple[Any, str]] = []
        for o, where in level:
            if id(o) in seen or len(seen) >= MAX_VISITS or isinstance(o, _LEAVES):
                continue
            seen.add(id(o))
            if isinstance(o, nn.Module):
                out.append((o, where))
                seen.update(id(m) for m in o.modules())
                for mname, m in o.named_modules():
                    at = f"{where}.{mname}" if mname else where
                    nxt.extend((v, f"{at}.{k}") for k, v in vars(m).items()
                               if not k.startswith("_") and not isinstance(v, _LEAVES))
            elif isinstance(o, (list, tuple)):
                nxt.extend((v, f"{where}[{k}]") for k, v in enumerate(o[:MAX_ITEMS]))
            elif isinstance(o, dict):
                nxt.extend((v, f"{where}[{k!r}]") for k, v in list(o.items())[:MAX_ITEMS])
            elif not type(o).__module__.startswith(("torchtriage", "torch")):
                d = getattr(o, "__dict__", None)
                if isinstance(d, dict):
                    nxt.extend((v, f"{where}.{k}") for k, v in list(d.items())[:MAX_ITEMS])
        level = nxt
    return out
