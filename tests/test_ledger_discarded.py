"""Session 8: backward passes whose gradient is reset before any step applies it
(`gradient.discarded`), and `load_state_dict(strict=False)` calls that load few or none of the
model's parameters (`checkpoint.not_loaded`). Bugs written the way users write them, with the
exact finding; correct look-alikes stay quiet."""

from __future__ import annotations

import io
import pathlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    """The line of this file that carries `# <- marker`."""
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def data(n: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g)


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def discarded(report: torchtriage.Report) -> list[torchtriage.Finding]:
    return report.filter(code="gradient.discarded")


# ---------------------------------------------------------------- gradient.discarded: bugs
def test_zero_grad_before_every_backward_while_stepping_every_second_batch():
    model, (x, y) = mlp(), data()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(16):
            xb, yb = x[(i % 8) * 8:(i % 8 + 1) * 8], y[(i % 8) * 8:(i % 8 + 1) * 8]
            opt.zero_grad()  # <- reset A
            loss = F.mse_loss(model(xb), yb) / 2
            loss.backward()  # <- backward A
            if (i + 1) % 2 == 0:
                opt.step()
    [f] = discarded(s.report)
    assert (f.severity, f.line, f.op) == (Severity.WARNING, line("reset A"), "zero_grad")
    ev = f.evidence
    assert (ev["passes"], ev["applied"], ev["discarded"], ev["share_discarded"]) == (16, 8, 8, 0.5)
    assert ev["backward_line"].endswith(f":{line('backward A')}")
    assert f.message == (f"8 of 16 backward passes at test_ledger_discarded.py:{line('backward A')} had their "
                         f"gradient reset by zero_grad (test_ledger_discarded.py:{line('reset A')}) before any "
                         "optimizer step applied it, while the other 8 were applied: those batches' gradients "
                         "were computed and discarded, never used")


def test_model_zero_grad_in_place_with_a_dataloader_and_four_micro_batches():
    model, (x, y) = mlp(), data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    accumulation = 4
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(2):
            for step, (xb, yb) in enumerate(loader):
                model.zero_grad(set_to_none=False)  # <- reset B
                (F.mse_loss(model(xb), yb) / accumulation).backward()
                if (step + 1) % accumulation == 0:
                    opt.step()
    [f] = discarded(s.report)
    assert (f.line, f.evidence["applied"], f.evidence["discarded"]) == (line("reset B"), 8, 24)


def test_zero_grad_outside_the_accumulation_branch():
    model, (x, y) = mlp(), data()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(12):
            loss = F.mse_loss(model(x[i * 4:(i + 1) * 4]), y[i * 4:(i + 1) * 4])
            loss.backward()
            if (i + 1) % 3 == 0:
                opt.step()
            opt.zero_grad()  # <- reset C
    [f] = discarded(s.report)
    assert (f.line, f.evidence["applied"], f.evidence["discarded"]) == (line("reset C"), 4, 8)


# ---------------------------------------------------------------- gradient.discarded: quiet
def test_correct_accumulation_and_plain_steps_are_quiet():
    model, (x, y) = mlp(), data()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(16):
            (F.mse_loss(model(x[i * 4:(i + 1) * 4]), y[i * 4:(i + 1) * 4]) / 2).backward()
            if (i + 1) % 2 == 0:
                opt.step()
                opt.zero_grad()
        for _ in range(4):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    assert discarded(s.report) == []


def test_accumulation_that_clips_every_micro_batch_is_still_found():
    # the passes were measured by clip_grad_norm_, but the dropped ones are not the large ones
    model, (x, y) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(16):
            opt.zero_grad()  # <- reset D
            F.mse_loss(model(x[(i % 8) * 8:(i % 8 + 1) * 8]), y[(i % 8) * 8:(i % 8 + 1) * 8]).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if i % 2 == 1:
                opt.step()
    [f] = discarded(s.report)
    assert (f.line, f.evidence["applied"], f.evidence["discarded"]) == (line("reset D"), 8, 8)


def _spiky(n: int = 48, every: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = data(n)
    y[::every] *= 60.0  # a few mislabelled batches with huge targets
    return x, y


def test_norm_gate_that_skips_large_gradients_is_quiet_plain_loop():
    model, (x, y) = mlp(), _spiky()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    skipped = 0
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(24):
            loss = F.mse_loss(model(x[i * 2:(i + 1) * 2]), y[i * 2:(i + 1) * 2])
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            if norm.item() > 20.0:
                skipped += 1
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
    assert skipped >= 5
    assert discarded(s.report) == []


def test_norm_gate_under_a_grad_scaler_in_a_trainer_class_is_quiet():
    class Trainer:
        def __init__(self) -> None:
            self.model, self.data = mlp(1), _spiky(every=4)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-2, momentum=0.9)
            self.scaler = torch.amp.GradScaler("cpu")
            self.skipped = 0

        def train_step(self, i: int) -> None:
            x, y = self.data
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.mse_loss(self.model(x[i * 2:(i + 1) * 2]).float(), y[i * 2:(i + 1) * 2])
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.opt)
            norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0))
            if norm < 25.0 and norm == norm:
                self.scaler.step(self.opt)
            else:
                self.skipped += 1
            self.scaler.update()
            self.opt.zero_grad()

    t = Trainer()
    with torchtriage.watch(t.model, t.opt, on_anomaly="record", report=False) as s:
        for i in range(24):
            t.train_step(i)
    assert t.skipped >= 5
    assert discarded(s.report) == []


def test_norm_gate_in_a_function_trainer_with_a_nonfinite_guard_is_quiet():
    def fit(model: nn.Module, opt: torch.optim.Optimizer, batches: list, limit: float) -> int:
        dropped = 0
        for xb, yb in batches:
            opt.zero_grad()
            F.mse_loss(model(xb), yb).backward()
            total = torch.nn.utils.clip_grad_norm_(list(model.parameters()), 0.5)
            if not torch.isfinite(total) or total > limit:
                dropped += 1
                continue
            opt.step()
        return dropped

    model, (x, y) = mlp(2), _spiky(every=3)
    batches = [(x[i:i + 2], y[i:i + 2]) for i in range(0, 48, 2)]
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        assert fit(model, opt, batches, 10.0) >= 5
    assert discarded(s.report) == []


def test_gan_generator_pass_that_fills_the_discriminators_grads_is_quiet():
    torch.manual_seed(0)
    g, d = nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(g.parameters(), 1e-3), torch.optim.Adam(d.parameters(), 1e-3)
    real = torch.randn(16, 8)
    with torchtriage.watch([g, d], [opt_g, opt_d], on_anomaly="record", report=False) as s:
        for _ in range(8):
            fake = g(torch.randn(16, 4))
            d.zero_grad()
            loss_d = F.softplus(d(fake.detach())).mean() + F.softplus(-d(real)).mean()
            loss_d.backward()
            opt_d.step()
            g.zero_grad()
            F.softplus(-d(fake)).mean().backward()  # also fills d's .grad, reset by d.zero_grad()
            opt_g.step()
    assert discarded(s.report) == []


def test_sam_like_two_passes_on_one_line_and_a_saliency_backward_are_quiet():
    model, (x, y) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(8):
            for phase in range(2):
                opt.zero_grad()
                F.mse_loss(model(x), y).backward()
                if phase == 0:  # SAM's first pass: move to the worst point with the gradient
                    with torch.no_grad():
                        for p in model.parameters():
                            p.add_(0.01 * p.grad)
                else:
                    opt.step()
            xs = x[:4].clone().requires_grad_(True)  # a saliency map: its own backward line
            model(xs).sum().backward()
            model.zero_grad()
    assert discarded(s.report) == []


def test_lbfgs_closure_evaluations_are_quiet():
    model, (x, y) = mlp(), data()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)

    def closure():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        return loss

    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            opt.step(closure)
    assert discarded(s.report) == []


class MicrobatchDP(torch.optim.SGD):
    """DP-SGD by hand: each example's gradient is clipped into a buffer, then reset by the
    optimizer itself; step() applies the buffer."""

    def __init__(self, params, lr: float, clip: float = 1.0) -> None:
        super().__init__(params, lr=lr)
        self.clip = clip
        self.acc = [torch.zeros_like(p) for g in self.param_groups for p in g["params"]]

    def microbatch_step(self) -> None:
        params = [p for g in self.param_groups for p in g["params"]]
        norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in params))
        for a, p in zip(self.acc, params):
            a.add_(p.grad * min(1.0, self.clip / (float(norm) + 1e-6)))
        self.zero_grad()

    def step(self, closure=None):
        for a, p in zip(self.acc, [p for g in self.param_groups for p in g["params"]]):
            p.grad = a.clone()
            a.zero_()
        return super().step(closure)


def test_an_optimizer_that_reads_and_resets_per_example_gradients_itself_is_quiet():
    model, (x, y) = mlp(), data()
    opt = MicrobatchDP(model.parameters(), lr=0.05)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(4):
            for j in range(8):
                k = i * 8 + j
                F.mse_loss(model(x[k:k + 1]), y[k:k + 1]).backward()
                opt.microbatch_step()
            opt.step()
    assert discarded(s.report) == []


# ---------------------------------------------------------------- checkpoint.not_loaded
class Net(nn.Module):
    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.body(x))


def saved(obj) -> dict:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return torch.load(io.BytesIO(buf.getvalue()), map_location="cpu")


def loads(report: torchtriage.Report) -> list[torchtriage.Finding]:
    return report.filter(code="checkpoint.not_loaded")


def test_dataparallel_checkpoint_loaded_non_strict_into_the_bare_model():
    trained = nn.DataParallel(Net())
    ckpt = saved({"model": trained.state_dict(), "epoch": 3})
    model = Net()
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        model.load_state_dict(ckpt["model"], strict=False)  # <- load A
        model.eval()
        with torch.no_grad():
            model(torch.randn(4, 8))
    [f] = loads(s.report)
    assert (f.category.value, f.severity, f.line, f.module, f.op) == \
        ("other", Severity.ERROR, line("load A"), "Net", "load_state_dict")
    ev = f.evidence
    assert (ev["parameters"], ev["parameters_loaded"], ev["prefix_in_state_dict"], ev["prefix_in_model"],
            ev["keys_the_prefix_fixes"]) == (6, 0, "module.", "", 6)
    assert f.message == ("load_state_dict(strict=False) set 0 of Net's 6 parameters: 6 unexpected keys "
                         "(e.g. 'module.body.0.weight') are its 6 missing keys under another prefix "
                         "(strip 'module.', add ''); the parameters not loaded keep their random initialization")


def test_inner_network_checkpoint_loaded_into_a_lightning_style_wrapper():
    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Net()

    state = saved(Net().state_dict())
    wrapper = Wrapper()
    with torchtriage.watch(wrapper, on_anomaly="record", report=False) as s:
        result = wrapper.load_state_dict(state, strict=False)  # <- load B
    assert len(result.missing_keys) == 6
    [f] = loads(s.report)
    assert (f.line, f.evidence["prefix_in_state_dict"], f.evidence["prefix_in_model"]) == (line("load B"), "", "model.")


def test_state_dict_of_another_model_loads_nothing():
    other = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    model = Net()
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        model.load_state_dict(other.state_dict(), strict=False)  # <- load C
    [f] = loads(s.report)
    assert (f.line, f.evidence["parameters_loaded"], f.evidence["prefix_in_state_dict"]) == (line("load C"), 0, None)
    assert f.message.startswith("load_state_dict(strict=False) set 0 of Net's 6 parameters: none of the state "
                                "dict's keys matched")


def test_partial_loads_that_strict_false_is_for_are_quiet():
    pretrained = Net(classes=1000).state_dict()
    model = Net(classes=4)
    backbone = {k: v for k, v in pretrained.items() if not k.startswith("head.")}
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        model.load_state_dict(backbone, strict=False)  # a new head: its keys are missing
        extra = dict(Net().state_dict(), **{"ema." + k: v for k, v in Net().state_dict().items()})
        model.load_state_dict(extra, strict=False)  # an EMA copy besides: unexpected keys only
        model.load_state_dict(Net().state_dict())  # strict
        model.body.load_state_dict(Net().body.state_dict(), strict=False)
    assert loads(s.report) == []


def test_ddp_checkpoint_loaded_strictly_into_the_bare_model_names_the_prefix():
    trained = nn.DataParallel(Net())  # DDP's state_dict() has the same 'module.' keys
    ckpt = saved({"model": trained.state_dict(), "epoch": 3})
    model = Net()

    def resume(model, ckpt):
        try:
            model.load_state_dict(ckpt["model"])  # <- load D
        except:  # noqa: E722  (the user's fallback, which raises again)
            model.load_state_dict(ckpt)

    with pytest.raises(RuntimeError, match="Unexpected key"):
        with torchtriage.watch(model, on_anomaly="record", report=False) as s:
            resume(model, ckpt)
    [f] = loads(s.report)
    assert (f.category.value, f.severity, f.line, f.module, f.op) == \
        ("other", Severity.ERROR, line("load D"), "Net", "load_state_dict")
    ev = f.evidence
    assert (ev["raised"], ev["parameters_loaded"], ev["prefix_in_state_dict"], ev["keys_the_prefix_fixes"]) == \
        (True, 0, "module.", 6)
    assert f.message == ("load_state_dict raised for Net: the state dict holds its weights under another prefix "
                         "(strip 'module.', add ''): 6 of its 6 unexpected keys (e.g. 'module.body.0.weight') are "
                         "Net's 6 missing keys with the same shapes; none of its 6 parameters could be set")
    assert "DistributedDataParallel" in f.cause
    # the exception that ended it (the fallback's) reads as a state-dict mismatch, not an optimizer's
    [t] = s.report.filter(code="other.state_dict_keys")
    assert t.message == ("model.load_state_dict: the state dict does not fit Net: 6 missing keys, 2 unexpected "
                         "keys, 0 size mismatches")
    assert (t.category.value, t.line) == ("other", line("load D") + 2)


def test_strict_loads_that_raise_for_other_reasons_are_left_to_the_exception():
    model = Net()
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        for bad in ({"epoch": 3, "model": {}}, Net(classes=10).state_dict(),
                    nn.Sequential(nn.Conv2d(3, 4, 3)).state_dict()):
            try:
                model.load_state_dict(bad)
            except RuntimeError:
                pass
        model.load_state_dict({k.removeprefix("module."): v  # the fix: the prefix stripped
                               for k, v in nn.DataParallel(Net()).state_dict().items()})
    assert loads(s.report) == []
