"""`OpRecorder`: every aten op of a run's first steps, with where it ran (issue 28).

A check like the others (the session's events, its module names and parameter index): on the
steps it records it pushes `_OpTape`, a `TorchDispatchMode` that only looks, and a
`ModuleStack` (`_nonfinite/_trace.py`, the replay's module path). Each op of the user's step
(forward, loss, backward, optimizer update; not the ops of torchtriage's own hooks) becomes an
event: step, stage, module path, aten op, the user's line, its non-tensor arguments, and each
output's shape, dtype and fingerprint (`_fingerprint.py`). The batch a model is called with
comes first, as an "input" event. Beside the ops it keeps what the comparison reports: the
loss and gradient norm of each step, each parameter's update, the modules in eval mode, the
seeds the script set (and, when asked, the seeds to use instead: two runs' data orders aligned),
and the weights at the first call (or, given another run's, those copied in by name, else by
shape and order).

Cost: a host read and a stack walk per op while recording (the first `steps` steps only; a
tiny MLP's step runs about 10x slower); nothing after.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .._checker import Checker
from .._frames import is_our_file, is_user_file, user_frame_from_stack, user_frame_from_tb, user_frame_of
from .._nonfinite._trace import ModuleStack
from ._fingerprint import fingerprint
from ._weights import map_state

RANDOM_OPS = frozenset({"bernoulli", "native_dropout", "rand", "randn", "randint", "randperm", "normal", "uniform",
                        "multinomial", "exponential", "geometric", "cauchy", "log_normal", "rand_like",
                        "randn_like", "randint_like", "random"})
_DATA = os.path.join(os.path.dirname(torch.__file__), "utils", "data") + os.sep
MAX_OPS = 50_000  # per run; a record past it is marked truncated


def _site(start: Any) -> Any:
    """The user's frame that issued the op now dispatched; False for an op of torchtriage's own
    code (a check's hook), None when no user frame is on the stack."""
    f = start
    loading = False  # the op is the data pipeline's (a collate), whoever iterates the loader
    while f is not None:
        code = f.f_code
        file = code.co_filename
        if is_user_file(file) and code.co_name != "__torch_function__":
            return f
        loading = loading or _DATA in file
        if is_our_file(file) and not loading and "__tracebackhide__" not in code.co_varnames \
                and code.co_name not in ("__torch_dispatch__", "__torch_function__"):
            return False
        f = f.f_back
    return None


def _arg_text(func: Any, args: Any, kwargs: Any) -> str:
    """`dim=1, keepdim=False`: the op's non-tensor arguments (a changed `dim` shows here)."""
    try:
        names = [a.name for a in func._schema.arguments]
    except AttributeError:
        names = []
    parts = []
    for i, v in enumerate(args):
        if any(isinstance(x, torch.Tensor) for x in tree_leaves(v)):
            continue
        name = names[i] if i < len(names) else f"arg{i}"
        parts.append(f"{name}={_short(v)}")
    for k, v in kwargs.items():
        if not any(isinstance(x, torch.Tensor) for x in tree_leaves(v)):
            parts.append(f"{k}={_short(v)}")
    return ", ".join(parts)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _outputs(out: Any) -> list[list[Any]]:
    return [[list(t.shape), str(t.dtype), fingerprint(t)] for t in tree_leaves(out) if isinstance(t, torch.Tensor)]


def seed_everything(seed: int) -> None:
    """torch, numpy (when installed) and Python's `random`, as a script's own seeding would."""
    import random

    random.seed(seed)
    torch.random.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(seed)


class _OpTape(TorchDispatchMode):
    """Appends one event per dispatched op of the user's step; changes nothing."""

    def __init__(self, owner: OpRecorder) -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            self.owner.add_op(func, args, kwargs, out, sys._getframe(1))
        except Exception as e:  # bookkeeping must never break the user's op
            self.owner.failed(e)
        return out


class OpRecorder(Checker):
    """Records the first `steps` steps op by op into `self.record` (plain, JSON-ready data).

    Arguments:
        steps: how many training steps to record.
        init: another run's weights at its first call (`index/name` -> tensor): copied into
            this run's models (by name, else by shape and order) before their first forward.
        seeds: the values to use for this run's `torch.manual_seed` calls, in call order
            (another run's), so that both draw the same numbers; None: the script's own.
        seed: seed torch, numpy and random with it before the script runs, and ask torch for
            deterministic algorithms (both sides of a diff start alike).
        on_done: called once the last recorded step has ended (the child process exits there).
    """

    name = "diff_record"

    def __init__(self, steps: int = 3, *, init: dict[str, torch.Tensor] | None = None,
                 seeds: list[int] | None = None, seed: int | None = None,
                 on_done: Callable[[OpRecorder], None] | None = None) -> None:
        super().__init__()
        self.steps = steps
        self.init_from = init
        self.force_seeds = seeds
        self.seed = seed
        self._deterministic: tuple[bool, bool] | None = None
        self.on_done = on_done
        self.init_state: dict[str, torch.Tensor] = {}
        self.record: dict[str, Any] = {"steps": steps, "ops": [], "frames": [], "loss": [], "grad_norm": [],
                                       "updates": [], "modes": [], "seeds": [], "rng": [], "init": {},
                                       "truncated": False, "errors": [], "models": []}
        self._frames: dict[tuple[str, int], int] = {}
        self._tape: _OpTape | None = None
        self._stack: ModuleStack | None = None
        self._models: list[nn.Module] = []  # in the order of their first call
        self._before: dict[str, torch.Tensor] = {}
        self._t0 = 0.0
        self._done = False

    # ------------------------------------------------------------------ the events
    def on_start(self, session: Any) -> None:
        original = torch.manual_seed

        def manual_seed(seed: Any) -> Any:
            __tracebackhide__ = True
            seeds = self.record["seeds"]
            asked = int(seed)
            forced = self.force_seeds
            used = forced[len(seeds)] if forced is not None and len(seeds) < len(forced) else asked
            frame = user_frame_from_stack(1)
            seeds.append({"asked": asked, "used": used, "frame": self._frame_index(frame)})
            return original(used)

        session.patch(torch, "manual_seed", manual_seed)
        if self.seed is not None:
            seed_everything(self.seed)
            self._deterministic = (torch.are_deterministic_algorithms_enabled(),
                                   torch.is_deterministic_algorithms_warn_only_enabled())
            torch.use_deterministic_algorithms(True, warn_only=True)
        self._t0 = time.perf_counter()

    def wants_step(self, step: int) -> bool:
        return step < self.steps and not self._done

    def on_step_begin(self, step: int) -> None:
        self.record["rng"].append(hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()[:12])
        self.record["modes"].append({})
        sess = self.session
        assert sess is not None
        if self._tape is None:
            # on from the first step to the end of the last one: the ops between two steps (a
            # metric after `optimizer.step()`, the next batch's preprocessing) count for the next
            self._stack = ModuleStack(lambda m: sess.module_name(m))
            self._stack.__enter__()
            self._tape = _OpTape(self)
            self._tape.__enter__()

    def on_root_forward_pre(self, model: nn.Module, label: str) -> None:
        if model not in self._models:
            self._models.append(model)
            self.record["models"].append(label)
            self._first_call(model, len(self._models) - 1)
        index = self._models.index(model)
        eval_modules = sorted(n for n, m in model.named_modules() if not m.training)
        self.record["modes"][-1].setdefault(str(index), [model.training, eval_modules])
        self._input_at = len(self.record["ops"])

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                        output: Any) -> None:
        frame = user_frame_from_stack(2)
        event = {"s": self._step(), "g": "data", "m": "", "o": f"{label}(...)", "k": "input",
                 "f": self._frame_index(frame), "a": "", "out": _outputs((args, kwargs)), "r": False}
        self.record["ops"].insert(min(self._input_at, len(self.record["ops"])), event)

    def on_backward(self, roots: tuple[torch.Tensor, ...], grads: Any) -> None:
        if roots and roots[0].numel() == 1:
            self.record["loss"].append([self._step(), float(roots[0].detach().float())])

    @torch.no_grad()
    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        names = self._param_names()
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if grads:
            total = torch.stack([g.detach().float().norm() for g in grads]).norm()
            self.record["grad_norm"].append([self._step(), float(total)])
        self._before = {names.get(id(p), f"?{i}"): p.detach().clone()
                        for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}

    @torch.no_grad()
    def on_optimizer_step_post(self, optimizer: torch.optim.Optimizer) -> None:
        names = self._param_names()
        params = [p for g in optimizer.param_groups for p in g["params"]]
        updates = {}
        for i, p in enumerate(params):
            name = names.get(id(p), f"?{i}")
            before = self._before.get(name)
            if before is not None and before.shape == p.shape:
                updates[name] = [list(p.shape), str(p.dtype), fingerprint(p.detach() - before)]
        self._before = {}
        self.record["updates"].append([self._step(), updates])

    def on_step_end(self, step: int) -> None:
        if step + 1 >= self.steps:
            self._pop()
            self.finish()

    def on_exception(self, exc: BaseException) -> None:
        self._pop()
        if not self._done and "raised" not in self.record:
            frame = user_frame_from_tb(exc.__traceback__)
            self.record["raised"] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200],
                                     "step": self._step(), "frame": self._frame_index(frame)}

    def on_end(self) -> None:
        self._pop()
        if self._deterministic is not None:
            torch.use_deterministic_algorithms(self._deterministic[0], warn_only=self._deterministic[1])
            self._deterministic = None
        if not self._done:
            self.finish()

    # ------------------------------------------------------------------ the record
    def finish(self) -> None:
        self._done = True
        self.record["seconds"] = round(time.perf_counter() - self._t0, 3)
        if self.on_done is not None:
            self.on_done(self)

    def failed(self, e: BaseException) -> None:
        if len(self.record["errors"]) < 5:
            self.record["errors"].append(f"{type(e).__name__}: {e}")

    def add_op(self, func: Any, args: Any, kwargs: Any, out: Any, start: Any) -> None:
        ops = self.record["ops"]
        if len(ops) >= MAX_OPS:
            self.record["truncated"] = True
            return
        site = _site(start)
        if site is False:
            return  # a check's own arithmetic, not the user's step
        name = func._schema.name if hasattr(func, "_schema") else str(func)
        base = name.split("::")[-1].rstrip("_")
        sess = self.session
        stage = sess.stage.value if sess is not None and sess.stage is not None else "forward"
        frame = user_frame_of(site) if site is not None else None
        ops.append({"s": self._step(), "g": stage, "m": self._stack.top if self._stack else None, "o": name,
                    "k": "op", "f": self._frame_index(frame), "a": _arg_text(func, args, kwargs),
                    "out": _outputs(out), "r": base in RANDOM_OPS})

    def _pop(self) -> None:
        if self._tape is not None:
            tape, self._tape = self._tape, None
            tape.__exit__(None, None, None)
        if self._stack is not None:
            stack, self._stack = self._stack, None
            stack.__exit__(None, None, None)

    def _step(self) -> int:
        return self.session.step if self.session is not None else 0

    def _param_names(self) -> dict[int, str]:
        return self.session.param_index.names() if self.session is not None else {}

    def _frame_index(self, frame: Any) -> int | None:
        if frame is None:
            return None
        key = (frame.file, frame.line)
        index = self._frames.get(key)
        if index is None:
            index = self._frames[key] = len(self.record["frames"])
            self.record["frames"].append([frame.file, frame.line, frame.function, frame.source])
        return index

    @torch.no_grad()
    def _first_call(self, model: nn.Module, index: int) -> None:
        """Keep the weights as they are at the model's first call; with another run's, copy
        those in first (how they were matched goes into the record)."""
        state = model.state_dict(keep_vars=True)
        if self.init_from is not None:
            theirs = {k.split("/", 1)[1]: v for k, v in self.init_from.items() if k.split("/", 1)[0] == str(index)}
            pairs, how = map_state(list(theirs.items()), list(state.items()))
            for src, dst in pairs:
                state[dst].copy_(theirs[src].to(state[dst].device))
            self.record["init"][str(index)] = {"how": how, "copied": len(pairs), "of": len(state),
                                               "names": {dst: src for src, dst in pairs if src != dst}}
        for k, v in state.items():
            if isinstance(v, torch.Tensor):
                self.init_state[f"{index}/{k}"] = v.detach().clone()
