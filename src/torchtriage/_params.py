"""The session's parameter index: every tensor the step trains, under one name (issue 11).

A parameter is what an optimizer holds, plus the parameters of the watched models. A module
parameter is named as `named_parameters()` names it (`encoder.0.weight`), owned by its module
and model. A tensor an optimizer holds that no watched module registers (style transfer's
`Adam([image])`, a mixture's `means_coef`, prompt tuning, a NeRF grid, a `functional_call`
parameter dict) is a *raw* parameter: first-class, named after the user's variable when one
holds it (`means_coef`, `params['weight']`, `netD.0.weight` for a module nobody watches), else
by its place, `param_groups[g][i]`. Every check names parameters through this index
(`session.param_index`); nothing else walks `named_parameters()` to name one.

The index is rebuilt lazily when the models or any optimizer's param groups changed
(`add_param_group` adds a group: the signature of group sizes changes), so reading it costs a
few `len()` calls; the user's variables are searched once per new raw tensor, in the user's
frame at the time the optimizer became known (its locals hold the tensors it was built from)
or at the first look-up after that.
"""

from __future__ import annotations

import dataclasses
import types
import weakref
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn as nn

from ._frames import released_locals, user_stack_frame

_MAX_ITEMS = 64  # elements of a dict / list searched for a tensor (a list of 10k tensors is data)


@dataclasses.dataclass(frozen=True)
class ParamInfo:
    """Where a parameter lives.

    Attributes:
        qualname: its name (`named_parameters()` path, the user's variable, or `param_groups[g][i]`).
        module: the owning module's path in its model; None for a raw tensor (no module).
        owner: id of the owning module (0: none).
        label: the watched model's label (None: no watched model holds it).
        root: id of the watched model (labels repeat: two root Linears are both "Linear").
        optimizer: index of the first optimizer holding it (None: no optimizer does).
        group: its param group in that optimizer.
    """

    qualname: str
    module: str | None
    owner: int
    label: str | None
    root: int = 0
    optimizer: int | None = None
    group: int | None = None

    @property
    def raw(self) -> bool:
        """True for a tensor no watched module registers (held by an optimizer)."""
        return self.owner == 0


def index_parameters(models: Iterable[tuple[nn.Module, str]],
                     optimizers: Iterable[torch.optim.Optimizer] = (),
                     names: dict[int, str] | None = None) -> dict[int, ParamInfo]:
    """id(parameter) -> ParamInfo: the watched models' parameters (a shared parameter: its first
    name), then every tensor the optimizers hold (raw ones named by `names`, else by place)."""
    out: dict[int, ParamInfo] = {}
    for model, label in models:
        for mname, mod in model.named_modules():
            for pname, p in mod._parameters.items():
                if p is not None and id(p) not in out:
                    out[id(p)] = ParamInfo(f"{mname}.{pname}" if mname else pname, mname, id(mod), label, id(model))
    opts = list(optimizers)
    for oi, opt in enumerate(opts):
        for gi, group in enumerate(opt.param_groups):
            for i, p in enumerate(group["params"]):
                pid = id(p)
                info = out.get(pid)
                if info is None:
                    name = (names or {}).get(pid) or _place(oi, gi, i, len(opts))
                    out[pid] = ParamInfo(name, None, 0, None, 0, oi, gi)
                elif info.optimizer is None:
                    out[pid] = dataclasses.replace(info, optimizer=oi, group=gi)
    return out


def model_device(model: nn.Module) -> torch.device:
    """The device a model runs on: its first parameter's (else first buffer's), else the CPU."""
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def _place(oi: int, gi: int, i: int, n_optimizers: int) -> str:
    where = f"param_groups[{gi}][{i}]"
    return where if n_optimizers == 1 else f"optimizers[{oi}].{where}"


def variable_names(tensors: dict[int, torch.Tensor], frame: types.FrameType | None,
                   skip_modules: Iterable[nn.Module] = ()) -> dict[int, str]:
    """The user's names for `tensors` (id -> tensor) in `frame`: a variable holding the tensor
    itself (`means_coef`), an item of a dict / list / tuple variable (`params['weight']`), or a
    parameter of a module variable nobody watches (`netD.0.weight`). Locals before globals."""
    found: dict[int, str] = {}
    if frame is None or not tensors:
        return found
    skip = {id(m) for m in skip_modules}
    local = released_locals(frame)
    scopes = [local, frame.f_globals] if local is not frame.f_globals else [local]
    for scope in scopes:
        for var, value in list(scope.items()):
            if var.startswith("_") or not var.isidentifier() or len(found) == len(tensors):
                continue
            if isinstance(value, torch.Tensor):
                if id(value) in tensors and id(value) not in found:
                    found[id(value)] = var
            elif isinstance(value, nn.Module):
                if id(value) not in skip:
                    for pname, p in value.named_parameters():
                        if id(p) in tensors and id(p) not in found:
                            found[id(p)] = f"{var}.{pname}"
            elif isinstance(value, dict):
                for i, (k, v) in enumerate(value.items()):
                    if i >= _MAX_ITEMS:
                        break
                    if isinstance(v, torch.Tensor) and id(v) in tensors and id(v) not in found:
                        found[id(v)] = f"{var}[{k!r}]"
            elif isinstance(value, (list, tuple)):
                for i, v in enumerate(value[:_MAX_ITEMS]):
                    if isinstance(v, torch.Tensor) and id(v) in tensors and id(v) not in found:
                        found[id(v)] = f"{var}[{i}]"
    return found


class ParamIndex:
    """The session's index (`session.param_index`), rebuilt when models or param groups change."""

    def __init__(self, session: Any) -> None:
        self._session = weakref.ref(session)
        self._signature: tuple[Any, ...] | None = None
        self._infos: dict[int, ParamInfo] = {}
        self._tensors: dict[int, weakref.ref[torch.Tensor]] = {}
        # id -> (weak ref, the user's name): a raw tensor keeps the name first found for it.
        self._names: dict[int, tuple[weakref.ref[torch.Tensor], str]] = {}

    # ------------------------------------------------------------------ reading
    def infos(self) -> dict[int, ParamInfo]:
        """id(tensor) -> ParamInfo for every parameter (module parameters and raw tensors)."""
        self._refresh()
        return self._infos

    def info(self, t: Any) -> ParamInfo | None:
        if not isinstance(t, torch.Tensor):
            return None
        info = self.infos().get(id(t))
        ref = self._tensors.get(id(t))
        return info if ref is not None and ref() is t else None

    def name(self, t: Any) -> str | None:
        """The parameter's name, or None when `t` is no parameter of the session."""
        info = self.info(t)
        return info.qualname if info is not None else None

    def names(self) -> dict[int, str]:
        """id(tensor) -> the parameter's name, for every parameter."""
        return {pid: info.qualname for pid, info in self.infos().items()}

    def tensors(self) -> list[tuple[torch.Tensor, ParamInfo]]:
        """Every live parameter with its info (module parameters first)."""
        infos = self.infos()
        out = []
        for pid, info in infos.items():
            t = self._tensors[pid]()
            if t is not None:
                out.append((t, info))
        return out

    def raw(self) -> list[tuple[torch.Tensor, ParamInfo]]:
        return [(t, i) for t, i in self.tensors() if i.raw]

    # ------------------------------------------------------------------ building
    def note_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer became known: name its raw tensors from the user's frame now (the line
        that built it, or the `with watch(...)` line: their locals hold the tensors)."""
        self._signature = None
        self._refresh(frame=user_stack_frame(1))

    def _current_signature(self, sess: Any) -> tuple[Any, ...]:
        return (tuple(id(m) for m in sess.models),
                tuple((id(o), tuple(len(g["params"]) for g in o.param_groups)) for o in sess.optimizers))

    def _refresh(self, frame: types.FrameType | None = None) -> None:
        sess = self._session()
        if sess is None:
            return
        sig = self._current_signature(sess)
        if sig == self._signature:
            return
        self._signature = sig
        models = [(m, sess.model_label(m) or type(m).__name__) for m in sess.models]
        optimizers = sess.optimizers
        held: dict[int, torch.Tensor] = {}
        owned = {id(p) for m, _ in models for p in m.parameters()}
        for opt in optimizers:
            for group in opt.param_groups:
                for p in group["params"]:
                    if id(p) not in owned:
                        held[id(p)] = p
        unnamed = {pid: t for pid, t in held.items()
                   if pid not in self._names or self._names[pid][0]() is not t}
        if unnamed:
            found = variable_names(unnamed, frame if frame is not None else user_stack_frame(1),
                                   [m for m, _ in models])
            for pid, name in found.items():
                self._names[pid] = (weakref.ref(unnamed[pid]), name)
        names = {pid: n for pid, (r, n) in self._names.items() if pid in held and r() is held[pid]}
        self._infos = index_parameters(models, optimizers, names)
        tensors: dict[int, weakref.ref[torch.Tensor]] = {}
        for m, _ in models:
            for p in m.parameters():
                tensors[id(p)] = weakref.ref(p)
        for pid, t in held.items():
            tensors[pid] = weakref.ref(t)
        self._tensors = tensors
