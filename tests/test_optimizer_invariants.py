"""Session 17: what every parameter and optimizer must satisfy, written the way users write it.

  * a layer swapped for a new module after the optimizer was built (a pruning / quantization
    wrapper): its new parameters get gradients and are in no optimizer (`gradient.not_in_optimizer`,
    the grad-sink watch walks again when the model's parameters change);
  * a frozen parameter without a grad that an optimizer step moves (`gradient.frozen_moved`);
  * an optimizer stepped again on the gradients it already applied (`gradient.step_repeated`);
  * a step counter that advances by more than one per step (`silent.step_counter`);
  * an optimizer `load_state_dict` that raised, swallowed, then training on an empty state
    (`other.optimizer_load_failed`);
  * an empty no-decay group whose name test names nothing in this model: info, not a warning.

Each with the look-alikes correct code writes."""

from __future__ import annotations

import logging
import math
import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def batches(n: int = 30, d: int = 8, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = torch.randn(16, d, generator=g)
        yield x, x.sum(1, keepdim=True)


def watch(models, train, *opts) -> torchtriage.Report:
    with torchtriage.watch(models, *opts, on_anomaly="record", report=False, discover=True) as s:
        train()
    return s.report


def codes(report: torchtriage.Report, code: str, severity: Severity | None = None) -> list:
    return [f for f in report.filter(code=code) if severity is None or f.severity is severity]


def alarms(report: torchtriage.Report, *codes_: str) -> list:
    return [f for f in report if f.code in codes_ and f.severity is not Severity.INFO]


# ---------------------------------------------------------------- layer replaced after the optimizer
class Masked(nn.Linear):
    """A pruning wrapper: a new Linear whose weight is masked."""

    def __init__(self, lin: nn.Linear) -> None:
        super().__init__(lin.in_features, lin.out_features)
        self.weight.data.copy_(lin.weight.data)
        self.bias.data.copy_(lin.bias.data)
        self.register_buffer("mask", (lin.weight.abs() > lin.weight.abs().median()).float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight * self.mask, self.bias)


def swap_linears(model: nn.Sequential) -> None:
    for i, m in enumerate(model):
        if isinstance(m, nn.Linear) and i > 0:
            model[i] = Masked(m)


def prune_and_finetune(rebuild: bool) -> torchtriage.Report:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))

    def train() -> None:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # <- sgd-built
        for phase in range(2):
            if phase == 1:
                swap_linears(model)
                if rebuild:
                    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            model.train()
            for x, y in batches(40):
                loss = F.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            model.eval()  # (the run ends in eval(): the mode at the walks is the one that counts)
            with torch.no_grad():
                model(torch.randn(4, 8))
    return watch([model], train)


def test_layers_replaced_after_the_optimizer_was_built_are_named():
    [f] = alarms(prune_and_finetune(rebuild=False), "gradient.not_in_optimizer")
    assert f.severity is Severity.WARNING
    assert set(f.evidence["parameters"]) >= {"model.2.weight", "model.4.weight"}
    assert f.evidence["module_mode"] == "train" and f.evidence["optimizers"] == 1
    assert f.evidence["module_types"] == ["Masked"]
    assert f.evidence["optimizer_holds_parameters_the_model_replaced"] == 4  # the old Linears' weights and biases


def test_optimizer_rebuilt_after_the_replacement_is_quiet():
    assert not alarms(prune_and_finetune(rebuild=True), "gradient.not_in_optimizer")


# ---------------------------------------------------------------- frozen, no grad, moved by the optimizer
class ZeroFillSGD(torch.optim.Optimizer):
    """An optimizer that fills a missing grad with zeros ("keeps ranks in sync") and decays every
    tensor it holds, or skips tensors without a grad as torch's optimizers do."""

    def __init__(self, params, lr: float, weight_decay: float, fill: bool) -> None:
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})
        self.fill = fill

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    if not self.fill:
                        continue
                    p.grad = torch.zeros_like(p)
                p.mul_(1 - group["lr"] * group["weight_decay"])  # <- decay
                p.add_(p.grad, alpha=-group["lr"])


def finetune_frozen(opt_kind: str) -> tuple[torchtriage.Report, nn.Module, dict]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 1))
    for p in model[:2].parameters():
        p.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}

    def train() -> None:
        if opt_kind == "adamw":
            opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        else:
            opt = ZeroFillSGD(model.parameters(), lr=0.05, weight_decay=0.1, fill=opt_kind == "fill")
        for x, y in batches(30):
            opt.zero_grad(set_to_none=True)
            F.mse_loss(model(x), y).backward()
            opt.step()  # <- frozen-step
    report = watch([model], train)
    return report, model, before


def test_an_optimizer_that_decays_frozen_tensors_without_a_grad():
    report, model, before = finetune_frozen("fill")
    [f] = codes(report, "gradient.frozen_moved")
    assert f.severity is Severity.WARNING and f.line == line("frozen-step")
    # (the LayerNorm's bias is 0: decay leaves it where it is; measured, so not counted)
    assert f.evidence["grad_before_step"] is None and f.evidence["count"] == 3
    assert f.parameter == "0.weight" and f.evidence["weight_decay"] == "0.1"
    moved = max(float((p - before[n]).abs().max()) for n, p in model.named_parameters() if n in before)
    assert f.evidence["max_change_since"] > 0 and moved > f.evidence["max_change_since"] * 0.5


def test_frozen_tensors_skipped_by_the_optimizer_are_quiet():
    for kind in ("skip", "adamw"):
        report, model, before = finetune_frozen(kind)
        assert not codes(report, "gradient.frozen_moved"), kind
        assert all(torch.equal(p, before[n]) for n, p in model.named_parameters() if n in before)


# ---------------------------------------------------------------- one optimizer step per backward
class StepWrapper:
    """A training-step decorator that runs backward and steps the optimizer itself."""

    def __init__(self, opt: torch.optim.Optimizer) -> None:
        self.opt = opt

    def __call__(self, fn):
        def run(*args):
            self.opt.zero_grad(set_to_none=True)
            loss = fn(*args)
            loss.backward()
            self.opt.step()  # <- wrapper-step
            return loss
        return run


def double_step(loop_steps_too: bool) -> torchtriage.Report:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def train() -> None:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        step_fn = StepWrapper(opt)(lambda x, y: F.mse_loss(model(x), y))
        for x, y in batches(30):
            step_fn(x, y)
            if loop_steps_too:
                opt.step()  # <- loop-step
    return watch([model], train)


def test_an_optimizer_stepped_by_a_wrapper_and_by_the_loop():
    [f] = codes(double_step(True), "gradient.step_repeated")
    assert f.severity is Severity.WARNING and f.line == line("loop-step")
    assert f.evidence["repeats_that_moved_parameters"] >= 10
    assert f.evidence["other_step_line"].endswith(f":{line('wrapper-step')}")


def test_one_step_per_backward_accumulation_and_closures_are_quiet():
    assert not codes(double_step(False), "gradient.step_repeated")
    torch.manual_seed(0)
    model = nn.Linear(8, 1)

    def accumulate() -> None:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i, (x, y) in enumerate(batches(40)):
            (F.mse_loss(model(x), y) / 4).backward()
            if i % 4 == 3:
                opt.step()
                opt.zero_grad()
    assert not codes(watch([model], accumulate), "gradient.step_repeated")

    def lbfgs() -> None:
        opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)
        for x, y in batches(10):
            def closure(x=x, y=y):
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                return loss
            opt.step(closure)
    assert not codes(watch([model], lbfgs), "gradient.step_repeated")


# ---------------------------------------------------------------- step counter: one per step
class CountingAdam(torch.optim.Optimizer):
    """Adam with the group's step counter; `per_param` increments it inside the parameter loop."""

    def __init__(self, params, lr: float, per_param: bool) -> None:
        super().__init__(params, {"lr": lr, "betas": (0.9, 0.999), "eps": 1e-8})
        self.per_param = per_param

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            group.setdefault("step", 0)
            b1, b2 = group["betas"]
            if not self.per_param:
                group["step"] += 1
            for p in group["params"]:
                if p.grad is None:
                    continue
                if self.per_param:
                    group["step"] += 1  # <- counter
                st = self.state[p]
                if not st:
                    st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
                st["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                t = group["step"]
                size = group["lr"] * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                p.addcdiv_(st["m"], st["v"].sqrt().add_(group["eps"]), value=-size)


def counted(per_param: bool | None) -> torchtriage.Report:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))

    def train() -> None:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3) if per_param is None else \
            CountingAdam(model.parameters(), lr=1e-3, per_param=per_param)
        for x, y in batches(30):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()  # <- counted-step
    return watch([model], train)


def test_a_step_counter_advanced_once_per_parameter():
    [f] = codes(counted(True), "silent.step_counter")
    assert f.severity is Severity.WARNING and f.line == line("counted-step")
    assert f.evidence["advance_per_step"] == [6.0] and f.evidence["counter"] == "param_groups[0]['step']"
    assert f.evidence["step_size_error"] >= 0.1 and f.op == "CountingAdam"


def test_step_counters_that_count_steps_are_quiet():
    assert not codes(counted(False), "silent.step_counter")
    assert not codes(counted(None), "silent.step_counter")  # torch's Adam: state[p]['step'] tensors


# ---------------------------------------------------------------- a failed optimizer load, swallowed
def resume_two_optimizers(tmp_path: pathlib.Path, swapped: bool) -> torchtriage.Report:
    torch.manual_seed(0)
    enc = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    dec = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def fit(opt_e, opt_d, n):
        for x, y in batches(n):
            loss = F.mse_loss(dec(enc(x)), y)
            opt_e.zero_grad()
            opt_d.zero_grad()
            loss.backward()
            opt_e.step()
            opt_d.step()

    def load(opt, path):
        try:
            opt.load_state_dict(torch.load(path))  # <- opt-load
        except Exception as e:
            logging.getLogger("resume").warning("could not load optimizer state: %s", e)

    def train() -> None:
        opt_e, opt_d = torch.optim.AdamW(enc.parameters()), torch.optim.AdamW(dec.parameters())
        fit(opt_e, opt_d, 10)
        torch.save(opt_e.state_dict(), tmp_path / "enc.pt")
        torch.save(opt_d.state_dict(), tmp_path / "dec.pt")
        opt_e, opt_d = torch.optim.AdamW(enc.parameters()), torch.optim.AdamW(dec.parameters())
        load(opt_e, tmp_path / ("dec.pt" if swapped else "enc.pt"))  # <- load-enc
        load(opt_d, tmp_path / ("enc.pt" if swapped else "dec.pt"))  # <- load-dec
        fit(opt_e, opt_d, 10)
    return watch([enc, dec], train)


def test_swapped_optimizer_states_whose_load_error_is_swallowed(tmp_path):
    found = codes(resume_two_optimizers(tmp_path, swapped=True), "other.optimizer_load_failed")
    [f] = found  # (both failed loads are one line: said once)
    assert f.severity is Severity.WARNING and f.line == line("opt-load")
    assert f.evidence["called_from"] == f"test_optimizer_invariants.py:{line('load-enc')}"
    assert f.evidence["states_in_loaded_dict"] == 4 and f.evidence["optimizer_parameters"] == 2
    assert f.evidence["steps_after_load"] >= 3


def test_optimizer_states_loaded_into_their_own_optimizers_are_quiet(tmp_path):
    assert not codes(resume_two_optimizers(tmp_path, swapped=False), "other.optimizer_load_failed")


# ---------------------------------------------------------------- empty no-decay group, names of another model
def test_an_empty_group_for_tensors_this_model_does_not_have_is_an_info():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    quantizer_keys = ["alpha", "step_size"]  # a quantizer's learned scales: none in this model

    def train() -> None:
        named = list(model.named_parameters())
        opt = torch.optim.SGD([
            {"params": [p for n, p in named if any(k in n for k in quantizer_keys)], "weight_decay": 0.0},
            {"params": [p for n, p in named if not any(k in n for k in quantizer_keys)], "weight_decay": 1e-4}],
            lr=0.01, momentum=0.9)
        for x, y in batches(20):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    found = codes(watch([model], train), "dynamics.empty_param_group")
    assert [f.severity for f in found] == [Severity.INFO]
