"""The transparency catalogue: operations a user applies to their own objects (copy, pickle, save,
script, trace, export, compile, torch.func, move, hooks, data loading, profiling) whose outcome
must be the same with torchtriage attached as without it (issue 10).

`run_catalogue(attach, names)` builds a fresh `World` per case (a small model, its optimizer,
scheduler, GradScaler and dataset), trains it `STEPS` steps inside `attach(world)`, runs the case
mid-training, trains one more step and returns `{case: outcome}`. An outcome is plain JSON data:
`["ok", value, warnings, next_loss]` or `["raise", type name, message, warnings]`, so outcomes
from `python script.py` and `torchtriage run script.py` compare the same way as in-process ones.
The numbers are compared bitwise (floats as `float.hex`).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import pickle
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

STEPS = 3
CASES: dict[str, Callable[[World], Any]] = {}
# Run by name only (tests/test_transparency.py::test_compile_inductor): a C++ compile each.
SLOW_CASES: dict[str, Callable[[World], Any]] = {}


def case(fn: Callable[[World], Any]) -> Callable[[World], Any]:
    CASES[fn.__name__] = fn
    return fn


def slow_case(fn: Callable[[World], Any]) -> Callable[[World], Any]:
    SLOW_CASES[fn.__name__] = fn
    return fn


# ---------------------------------------------------------------------------- the user's objects
class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


class CachingNet(Net):
    """A user-defined __getstate__ / __setstate__: the cache is dropped when pickling."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[str, Any] = {"note": "not pickled"}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("cache")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.cache = {"note": "rebuilt"}


class Squares(Dataset):
    def __init__(self, n: int = 12) -> None:
        g = torch.Generator().manual_seed(3)
        self.x = torch.randn(n, 4, generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] * 2, self.y[i]


def collate(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*batch)
    return torch.stack(xs), torch.stack(ys)


class World:
    """One case's objects, built from the same seed every time."""

    def __init__(self, model_cls: type[nn.Module] = Net) -> None:
        torch.manual_seed(0)
        self.model = model_cls()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)
        self.scaler = torch.amp.GradScaler("cpu")
        self.data = Squares()
        self.x = torch.randn(6, 4)
        self.y = torch.randint(0, 3, (6,))

    def step(self, model: nn.Module | None = None) -> torch.Tensor:
        model = model or self.model
        loss = F.cross_entropy(model(self.x), self.y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.sched.step()
        return loss.detach()


# ---------------------------------------------------------------------------- plain-data outcomes
def plain(v: Any) -> Any:
    """A JSON-comparable, bitwise-faithful image of a value."""
    if isinstance(v, torch.Tensor):
        t = v.detach()
        if t.is_floating_point():
            t = t.double()
        vals = t.flatten().tolist()
        return ["tensor", str(v.dtype), list(v.shape), [x.hex() if isinstance(x, float) else x for x in vals]]
    if isinstance(v, float):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return f"<{type(v).__name__}>"


def _warning_text(w: warnings.WarningMessage) -> str:
    # The first line: anomaly mode's warning goes on with the forward's stack, which differs
    # with the caller (the test harness), not with torchtriage.
    return f"{w.category.__name__}: {str(w.message).splitlines()[0]}"


def outcome(world: World, fn: Callable[[World], Any]) -> list[Any]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            value = plain(fn(world))
        except Exception as e:  # the outcome *is* the exception, compared by type and message
            return ["raise", type(e).__name__, str(e), sorted({_warning_text(w) for w in seen})]
    ours = [w for w in seen if "torchtriage" in w.category.__module__]
    if ours:  # our own warnings are a difference too
        return ["raise", "TorchtriageWarned", _warning_text(ours[0]), []]
    return ["ok", value, sorted({_warning_text(w) for w in seen}), plain(world.step())]


def run_catalogue(attach: Callable[[World], Any] = lambda w: contextlib.nullcontext(),
                  names: list[str] | None = None, *, after: bool = False) -> dict[str, Any]:
    """Each case on a fresh world trained STEPS steps inside `attach(world)`; the case runs
    inside the attached block (mid-training) or, with `after=True`, once the block has ended."""
    results: dict[str, Any] = {}
    for name in names or list(CASES):
        fn = CASES.get(name) or SLOW_CASES[name]
        world = World(getattr(fn, "model_cls", Net))
        with attach(world):
            for _ in range(STEPS):
                world.step()
            if not after:
                results[name] = outcome(world, fn)
        if after:
            results[name] = outcome(world, fn)
    return results


def out(m: nn.Module, w: World) -> torch.Tensor:
    with torch.no_grad():
        return m(w.x)


def hooks_of(m: nn.Module) -> list[int]:
    return [len(getattr(s, k)) for s in m.modules() for k in (
        "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_forward_hooks_always_called")]


# ---------------------------------------------------------------------------- copying and saving
@case
def copy_model(w: World) -> Any:
    c = copy.copy(w.model)
    return [out(c, w), c.state_dict()["head.weight"] is w.model.state_dict()["head.weight"]]


@case
def deepcopy_model(w: World) -> Any:
    c = copy.deepcopy(w.model)
    w.step()  # the original moves on, the copy does not
    return [out(c, w), hooks_of(c), c.training]


@case
def pickle_model(w: World) -> Any:
    c = pickle.loads(pickle.dumps(w.model))
    return [out(c, w), hooks_of(c)]


@case
def torch_save_module(w: World) -> Any:
    buf = io.BytesIO()
    torch.save(w.model, buf)
    buf.seek(0)
    c = torch.load(buf, weights_only=False)
    return [out(c, w), hooks_of(c)]


@case
def torch_load_module_weights_only(w: World) -> Any:
    buf = io.BytesIO()
    torch.save(w.model, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)  # refused by torch: the same message both ways


@case
def torch_save_state_dicts(w: World) -> Any:
    buf = io.BytesIO()
    torch.save({"model": w.model.state_dict(), "opt": w.opt.state_dict(), "sched": w.sched.state_dict(),
                "scaler": w.scaler.state_dict()}, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@case
def copy_optimizer_scheduler_scaler(w: World) -> Any:
    o, s, g = copy.deepcopy(w.opt), copy.deepcopy(w.sched), copy.deepcopy(w.scaler)
    c = copy.copy(w.opt)
    return [o.state_dict(), s.get_last_lr(), s.state_dict(), g.state_dict(), c.state_dict()]


@case
def pickle_optimizer_scheduler_scaler(w: World) -> Any:
    o, s, g = (pickle.loads(pickle.dumps(v)) for v in (w.opt, w.sched, w.scaler))
    return [o.state_dict(), s.state_dict(), g.state_dict()]


@case
def copy_pickle_dataset(w: World) -> Any:
    a, b = copy.deepcopy(w.data), pickle.loads(pickle.dumps(w.data))
    return [len(a), a[3], b[5]]


@case
def load_state_dict_strict(w: World) -> Any:
    sd = w.model.state_dict()
    sd.pop("head.bias")
    sd["extra.weight"] = torch.zeros(1)
    return Net().load_state_dict(sd, strict=True)


@case
def load_state_dict_not_strict(w: World) -> Any:
    sd = w.model.state_dict()
    sd.pop("head.bias")
    sd["extra.weight"] = torch.zeros(1)
    r = w.model.load_state_dict(sd, strict=False)
    return [sorted(r.missing_keys), sorted(r.unexpected_keys), out(w.model, w)]


@case
def user_getstate_setstate(w: World) -> Any:
    c, d = copy.deepcopy(w.model), pickle.loads(pickle.dumps(w.model))
    return [c.cache, d.cache, out(c, w), out(d, w)]


user_getstate_setstate.model_cls = CachingNet  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- compiling and transforming
@case
def jit_script(w: World) -> Any:
    s = torch.jit.script(w.model)
    return [out(s, w), str(s.code)]


@case
def jit_script_copy(w: World) -> Any:
    return out(torch.jit.script(copy.deepcopy(w.model)), w)


@case
def jit_trace(w: World) -> Any:
    t = torch.jit.trace(w.model, w.x)
    return [out(t, w), str(t.graph).count("aten::")]


@case
def torch_export(w: World) -> Any:
    ep = torch.export.export(w.model, (w.x,))
    return [out(ep.module(), w), [n.op for n in ep.graph.nodes], sorted(ep.state_dict)]


def _compiled_step(w: World, backend: str) -> Any:
    torch._dynamo.reset()
    c = torch.compile(w.model, backend=backend)
    loss = F.cross_entropy(c(w.x), w.y)
    w.opt.zero_grad()
    loss.backward()
    w.opt.step()
    return [loss, out(c, w)]


@case
def compile_eager(w: World) -> Any:
    return _compiled_step(w, "eager")


@slow_case
def compile_inductor(w: World) -> Any:
    return _compiled_step(w, "inductor")


@case
def compile_fullgraph_and_export_strict(w: World) -> Any:
    torch._dynamo.reset()
    c = torch.compile(w.model, backend="eager", fullgraph=True)
    ep = torch.export.export(w.model, (w.x,), strict=True)
    return [out(c, w), out(ep.module(), w), [n.op for n in ep.graph.nodes]]


@case
def func_transforms(w: World) -> Any:
    params = {k: v.detach() for k, v in w.model.named_parameters()}
    y = torch.func.functional_call(w.model, params, (w.x,))

    def loss_of(p: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(torch.func.functional_call(w.model, p, (w.x,)), w.y)

    grads = torch.func.grad(loss_of)(params)
    per_sample = torch.func.vmap(lambda x: torch.func.functional_call(w.model, params, (x,)))(w.x)
    return [y, grads, per_sample]


@case
def parametrization_and_weight_norm(w: World) -> Any:
    class Symmetric(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.triu() + x.triu(1).mT

    torch.nn.utils.parametrize.register_parametrization(w.model.body[2], "weight", Symmetric())
    torch.nn.utils.parametrizations.weight_norm(w.model.head)
    w.step()
    return [out(w.model, w), sorted(w.model.state_dict()), type(w.model.head).__name__]


# ---------------------------------------------------------------------------- moving
@case
def to_dtype_half_memory_format(w: World) -> Any:
    w.model.to(torch.float64)
    y = w.model(w.x.double())
    w.model.half().float()
    conv = nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    return [y, out(w.model, w), conv.weight.is_contiguous(memory_format=torch.channels_last)]


@case
def data_parallel(w: World) -> Any:
    dp = nn.DataParallel(w.model)  # no GPU: runs the module itself
    return [out(dp, w), sorted(dp.state_dict())]


# ---------------------------------------------------------------------------- the module's own API
@case
def module_api(w: World) -> Any:
    seen: list[str] = []
    w.model.apply(lambda m: seen.append(type(m).__name__))
    return [seen, [n for n, _ in w.model.named_modules()], list(w.model.state_dict()), repr(w.model),
            sorted(vars(w.model)), [n for n, _ in w.model.named_buffers()]]


@case
def user_hooks(w: World) -> Any:
    calls: list[str] = []
    m = w.model
    m.register_forward_pre_hook(lambda mod, args: calls.append("pre"))
    m.register_forward_pre_hook(lambda mod, args, kwargs: calls.append(f"pre_kw {sorted(kwargs)}"), with_kwargs=True)
    m.register_forward_hook(lambda mod, args, o: calls.append("post"))
    m.register_forward_hook(lambda mod, args, kwargs, o: calls.append("post_kw"), with_kwargs=True)
    m.register_forward_hook(lambda mod, args, o: calls.append("always"), always_call=True)
    m.register_forward_pre_hook(lambda mod, args: calls.append("first"), prepend=True)
    m.head.register_full_backward_hook(lambda mod, gi, go: calls.append("backward"))
    m.head.register_full_backward_pre_hook(lambda mod, go: calls.append("backward_pre"))
    w.step()
    m.register_forward_hook(lambda mod, args, o: o * 2)  # a hook that replaces the output
    return [calls, out(m, w)]


@case
def user_hook_always_call_on_error(w: World) -> Any:
    calls: list[str] = []
    w.model.register_forward_hook(lambda mod, args, o: calls.append(f"always {o}"), always_call=True)
    try:
        w.model(torch.randn(2, 5))
    except RuntimeError as e:
        return [calls, str(e)]
    return calls


@case
def register_module_after_start(w: World) -> Any:
    w.model.add_module("extra", nn.Linear(3, 3))
    w.model.register_module("tail", nn.Identity())  # the alias of add_module
    w.model.register_buffer("count", torch.zeros(1))
    w.opt.add_param_group({"params": list(w.model.extra.parameters())})
    y = w.model.extra(out(w.model, w))
    return [[n for n, _ in w.model.named_modules()], list(w.model.state_dict()), y]


# ---------------------------------------------------------------------------- data loading
def _loader_batches(w: World, **kw: Any) -> Any:
    return [b for b in DataLoader(w.data, batch_size=4, collate_fn=collate, **kw)]


@case
def dataloader_fork_workers(w: World) -> Any:
    return _loader_batches(w, num_workers=2, multiprocessing_context="fork")


class Featurized(Dataset):
    """A dataset whose items go through a (frozen) module: the module runs in the workers."""

    def __init__(self, data: Squares, encoder: nn.Module) -> None:
        self.data, self.encoder = data, encoder

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.data[i]
        with torch.no_grad():
            return self.encoder(x), y


@case
def dataloader_fork_workers_run_a_module(w: World) -> Any:
    data = Featurized(w.data, w.model.body)
    return [b for b in DataLoader(data, batch_size=4, num_workers=2, multiprocessing_context="fork")]


@case
def dataloader_spawn_worker(w: World) -> Any:
    return _loader_batches(w, num_workers=1, multiprocessing_context="spawn")


@case
def dataloader_persistent_pin(w: World) -> Any:
    loader = DataLoader(w.data, batch_size=6, num_workers=1, persistent_workers=True, pin_memory=True,
                        multiprocessing_context="fork")
    epochs = [[b[0] for b in loader] for _ in range(2)]
    for x, y in loader:  # a training step per batch from the loader
        w.opt.zero_grad()
        F.cross_entropy(w.model(x), y).backward()
        w.opt.step()
    return epochs


# ---------------------------------------------------------------------------- anomaly mode and profiler
@case
def detect_anomaly_clean(w: World) -> Any:
    with torch.autograd.detect_anomaly():
        return w.step()


@case
def detect_anomaly_nan(w: World) -> Any:
    with torch.autograd.detect_anomaly():
        x = w.x.clone().requires_grad_()
        y = (x * 0).sqrt().sum() + w.model(x).sum()
        y.backward()
        return y


@case
def profiler(w: World) -> Any:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("user_region"):
            w.step()
    keys = {e.key for e in prof.key_averages()}
    return sorted(k for k in ("user_region", "aten::addmm", "aten::relu") if k in keys)


def main() -> None:
    """`python transparency.py [after]`: print the outcomes as JSON (the run-mode comparison)."""
    names = [a for a in sys.argv[1:] if a in CASES or a in SLOW_CASES] or None
    print(json.dumps(run_catalogue(names=names), sort_keys=True))


if __name__ == "__main__":
    main()
