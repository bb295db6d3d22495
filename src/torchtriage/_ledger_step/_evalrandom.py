"""What is random in evaluation (issue 26 item 5, modes).

A model in `eval()` mode is expected to be a function: the same batch evaluated twice gives the
same output, unless the user samples on purpose. Nothing is re-run to check it (a replay would
move BatchNorm's running statistics and the RNG): during a model's first `EVAL_FORWARDS` root
forwards in `eval()` mode under `no_grad` / `inference_mode` (with gradients on, an `eval()`
model is a partly frozen one being trained: `model.eval(); model.head.train()`) a pass-through
`TorchFunctionMode` notes each random op its forward calls (`torch.rand*` / `randn*` /
`randint*` / `randperm` / `bernoulli` / `normal` / `multinomial`, the in-place samplers,
dropout with `training=True` and `p > 0`, `rrelu` in training) and the module that called
it. It changes no argument and no result and draws no random number itself: the user's RNG
stream and numerics stay as they are.

- random ops in an `eval()` forward: an `info` naming the modules (a VAE that samples, a dropout
  switched back on for MC dropout are often meant); an op given its own `generator=` is sampling
  on purpose and is not noted;
- a BatchNorm left in `train()` mode inside a model in `eval()` mode whose running statistics the
  evaluation forward changed (the version of `num_batches_tracked` moved: no device read). Whether the
  output was an evaluation result is known from what runs next: the model's next root forward (in
  `train()` mode: a trained model was evaluated; in `eval()` again with no backward between: an
  evaluation pass) or the session's end make it a `warning`, the harm measured: an evaluation result
  computed with batch statistics, and evaluation data in the statistics every later forward normalizes
  with. A backward before the model's next forward means the output fed a training step (a MoCo key
  encoder, an EMA teacher: `model_ema.eval()` then every BatchNorm back to `train()`, batch statistics
  on purpose): an `info`.

Cost: one attribute test per root forward; the mode and the version reads only in the first
`EVAL_FORWARDS` evaluation forwards of each model.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from .._findings import Category, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack
from .._modestack import push_mode, remove_mode
from ._dropout import calling_module

EVAL_FORWARDS = 3
_SAMPLERS = frozenset({
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "bernoulli", "normal",
    "multinomial", "poisson", "bernoulli_", "normal_", "uniform_", "random_", "exponential_", "geometric_",
    "cauchy_", "log_normal_", "binomial"})
_DROPOUTS = frozenset({"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
                       "feature_dropout"})


def _random_call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if kwargs.get("generator") is not None:
        return False  # its own generator: sampling on purpose
    if name in _SAMPLERS:
        return True
    if name in _DROPOUTS:
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        training = args[2] if len(args) > 2 else kwargs.get("training", True)
        return bool(training) and isinstance(p, (int, float)) and p > 0
    if name == "rrelu":
        return bool(args[3] if len(args) > 3 else kwargs.get("training", False))
    return False


class _RandomOps(TorchFunctionMode):
    """Pass-through: notes (module, op) for each random op called while it is on the stack."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[tuple[int, str], list[Any]] = {}  # (id(module), op) -> [module ref, count]

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if (name in _SAMPLERS or name in _DROPOUTS or name == "rrelu") and _random_call(name, args, kwargs):
            mod = calling_module()
            key = (id(mod), name)
            entry = self.calls.get(key)
            if entry is None:
                self.calls[key] = [weakref.ref(mod) if mod is not None else None, 1]
            else:
                entry[1] += 1
        return func(*args, **kwargs)


def _counter(m: nn.Module) -> torch.Tensor | None:
    """The buffer whose version moves when BatchNorm folds a batch into its statistics: the
    kernel updates `running_mean` without bumping its version, `num_batches_tracked += 1` does."""
    t = getattr(m, "num_batches_tracked", None)
    return t if isinstance(t, torch.Tensor) else None


def _batchnorms_in_train(model: nn.Module) -> list[tuple[str, nn.Module, int]]:
    out: list[tuple[str, nn.Module, int]] = []
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training and m.track_running_stats \
                and (t := _counter(m)) is not None:
            out.append((name, m, t._version))
    return out


class EvalRandomWatch:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.seen: dict[int, int] = {}  # id(model) -> evaluation forwards watched
        self.mode: _RandomOps | None = None
        self.model: weakref.ref[nn.Module] | None = None
        self.bns: list[tuple[str, nn.Module, int]] = []
        self.frame: UserFrame | None = None
        self.reported: set[tuple[int, str]] = set()
        # id(model) -> (model ref, label, BatchNorms moved, frame, step, grad enabled): a BatchNorm
        # finding waiting for what comes next (the model's next forward, a backward, the end)
        self.pending: dict[int, tuple[Any, ...]] = {}

    def root_forward(self, model: nn.Module) -> None:
        """Any root forward: a model with a pending BatchNorm finding runs again before any backward."""
        if id(model) in self.pending:
            self._settle(id(model), fed_training=False, next_training=model.training)

    def backward(self) -> None:
        """A backward: the pending eval() forwards' outputs fed this training step."""
        for key in list(self.pending):
            self._settle(key, fed_training=True, next_training=None)

    def end(self) -> None:
        self.drop()
        for key in list(self.pending):
            self._settle(key, fed_training=False, next_training=None)

    def forward_pre(self, model: nn.Module, label: str) -> None:
        self.drop()
        if model.training or self.seen.get(id(model), 0) >= EVAL_FORWARDS or self.session.busy:
            return
        if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            return  # eval() with gradients: a partly frozen model trained (`model.eval(); head.train()`)
        self.seen[id(model)] = self.seen.get(id(model), 0) + 1
        self.model = weakref.ref(model)
        self.bns = _batchnorms_in_train(model)
        self.frame = user_frame_from_stack(3)
        self.mode = _RandomOps()
        push_mode(self.mode)

    def forward(self, model: nn.Module, label: str) -> None:
        mode, ref = self.mode, self.model
        if mode is None or ref is None or ref() is not model:
            return
        self.drop()
        self._random(model, label, mode)
        self._stats(model, label)

    def drop(self) -> None:
        if self.mode is not None:
            remove_mode(self.mode)
            self.mode = None

    # ------------------------------------------------------------------ findings
    def _name(self, model: nn.Module, mod: nn.Module | None) -> str:
        if mod is None:
            return "?"
        for name, m in model.named_modules():
            if m is mod:
                return name or type(mod).__name__
        return type(mod).__name__

    def _random(self, model: nn.Module, label: str, mode: _RandomOps) -> None:
        if not mode.calls or (id(model), "random") in self.reported:
            return
        self.reported.add((id(model), "random"))
        found = []
        for (_, op), (ref, count) in mode.calls.items():
            mod = ref() if ref is not None else None
            found.append((self._name(model, mod), op, count, bool(mod is not None and mod.training)))
        modules = [f"{name}: {op} ×{count}" + (" (module in train() mode)" if training else "")
                   for name, op, count, training in found]
        fields = {"model": label, "count": len(found), "first": f"{found[0][0]} ({found[0][1]})"}
        evidence = {"model": label, "random_ops_by_module": modules[:8], "model_training": False,
                    "grad_enabled": torch.is_grad_enabled(),
                    "forward_line": f"{self.frame.file}:{self.frame.line}" if self.frame else None}
        self.session.add(from_catalogue(Category.SILENT, "silent.eval_random", "modes.eval_random", fields=fields,
                                        cause_key="modes.eval_random.cause", next_key="modes.eval_random.next",
                                        frame=self.frame, evidence=evidence, source_line=self.frame is not None,
                                        severity=Severity.INFO, stage=Stage.FORWARD, step=self.session.step,
                                        module=found[0][0], op=found[0][1]))

    def _stats(self, model: nn.Module, label: str) -> None:
        bns, self.bns = self.bns, []
        moved = [name for name, m, version in bns if (t := _counter(m)) is not None and t._version != version]
        if not moved or (id(model), "bn") in self.reported or id(model) in self.pending:
            return
        self.pending[id(model)] = (weakref.ref(model), label, moved, self.frame, self.session.step,
                                   torch.is_grad_enabled())

    def _settle(self, key: int, fed_training: bool, next_training: bool | None) -> None:
        _, label, moved, frame, step, grad = self.pending.pop(key)
        if (key, "bn") in self.reported:
            return
        self.reported.add((key, "bn"))
        fields = {"model": label, "count": len(moved), "first": moved[0]}
        evidence: dict[str, Any] = {
            "model": label, "model_training": False, "batchnorm_in_train_mode": moved[:8],
            "running_stats_changed_by_evaluation_forward": True, "grad_enabled": grad,
            "forward_line": f"{frame.file}:{frame.line}" if frame else None}
        if fed_training:
            evidence["output_fed_training"] = "a backward ran before the model's next forward"
        elif next_training is not None:
            evidence["next_forward"] = "train() mode: the evaluated model is trained next" if next_training \
                else "eval() mode again, no backward between: an evaluation pass"
        msg = "modes.eval_bn_updates.training" if fed_training else "modes.eval_bn_updates"
        self.session.add(from_catalogue(Category.SILENT, "silent.eval_bn_updates", msg,
                                        fields=fields, cause_key="modes.eval_bn_updates.cause",
                                        next_key=msg + ".next", frame=frame, evidence=evidence,
                                        source_line=frame is not None,
                                        severity=Severity.INFO if fed_training else Severity.WARNING,
                                        stage=Stage.FORWARD, step=step, module=moved[0]))
