"""Framework integrations end to end: a tiny Lightning fit and a tiny HF Trainer run, with a
NaN (a finding) and clean (no finding); hooks removed afterwards; missing-framework errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

from torchtriage import Finding, Report
from torchtriage._checker import Checker


class NonFiniteLoss(Checker):
    """A test check: flags a non-finite loss when backward starts (reads the value: tests only)."""

    name = "test_nonfinite_loss"

    def on_backward(self, roots, grads):
        loss = roots[0]
        if not bool(torch.isfinite(loss.detach()).all()):
            self.session.add(Finding("numerical", "numerical.test_loss", f"loss is {loss.item()}",
                                     stage="loss", step=self.session.step))


def _data(n=16):
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))


# ---------------------------------------------------------------------- lightning
def _lightning_module(nan_at_step):
    L = pytest.importorskip("lightning")

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.mse_loss(self(x), y)
            if nan_at_step is not None and self.global_step == nan_at_step:
                loss = loss * torch.log(torch.zeros(()))  # -inf * loss: the bug under test
            return loss

        def forward(self, x):
            return self.net(x)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return L, Tiny()


def _fit(L, module, callback, steps=3):
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[callback])
    loader = torch.utils.data.DataLoader(_data(), batch_size=4)
    trainer.fit(module, loader)
    return trainer


def test_lightning_callback_reports_the_nan_loss(tmp_path):
    pytest.importorskip("lightning")
    from torchtriage.integrations.lightning import TriageCallback

    L, module = _lightning_module(nan_at_step=1)
    cb = TriageCallback(checks=[NonFiniteLoss()], json=tmp_path / "r.json", html=tmp_path / "r.html")
    assert cb.report is None
    _fit(L, module, cb)
    report = cb.report
    assert [(f.code, f.step, f.stage.value, f.message) for f in report.findings] == [
        ("numerical.test_loss", 1, "loss", "loss is -inf")]
    assert report.meta["steps"] == 3
    assert report.meta["models"]["Tiny"] == {"": "Tiny", "net": "Sequential", "net.0": "Linear",
                                             "net.1": "ReLU", "net.2": "Linear"}
    from torchtriage.report import load_json

    assert load_json(tmp_path / "r.json").primary.code == "numerical.test_loss"
    assert "numerical.test_loss" in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_lightning_callback_clean_module_has_no_finding():
    pytest.importorskip("lightning")
    from torchtriage.integrations.lightning import TriageCallback

    L, module = _lightning_module(nan_at_step=None)
    cb = TriageCallback(checks=[NonFiniteLoss()])
    _fit(L, module, cb)
    assert cb.report.findings == () and cb.report.meta["steps"] == 3


def test_lightning_callback_closes_the_session_when_fit_raises():
    pytest.importorskip("lightning")
    from torchtriage.integrations.lightning import TriageCallback

    L, module = _lightning_module(nan_at_step=None)

    def boom(batch, batch_idx):
        raise RuntimeError("boom in training_step")

    module.training_step = boom
    cb = TriageCallback(checks=[NonFiniteLoss()])
    with pytest.raises(RuntimeError, match="^boom in training_step$"):
        _fit(L, module, cb)
    assert isinstance(cb.report, Report)  # closed; the autouse fixture checks no hook is left


def test_lightning_callback_rejects_bad_options():
    pytest.importorskip("lightning")
    from torchtriage.integrations.lightning import TriageCallback

    with pytest.raises(ValueError, match="on_anomaly"):
        TriageCallback(on_anomaly="explode")
    with pytest.raises(TypeError, match=r"^json=3: expected a file path \(str or os.PathLike\) or None$"):
        TriageCallback(json=3)


# ---------------------------------------------------------------------- transformers
def _gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                        bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return transformers, transformers.GPT2LMHeadModel(config)


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n=8, length=8):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _train(transformers, model, cb, tmp_path, steps=2):
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=steps,
                                          per_device_train_batch_size=4, report_to=[], save_strategy="no",
                                          logging_strategy="no", use_cpu=True, disable_tqdm=True,
                                          dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens(), callbacks=[cb])
    trainer.train()
    return trainer


def test_hf_trainer_callback_clean_run_has_no_finding(tmp_path):
    transformers, model = _gpt2()
    from torchtriage.integrations.hf import TriageTrainerCallback

    with TriageTrainerCallback(checks=[NonFiniteLoss()]) as cb:
        _train(transformers, model, cb, tmp_path)
    report = cb.report
    assert report.findings == () and report.meta["steps"] == 2
    layout = report.meta["models"]["GPT2LMHeadModel"]
    assert layout["transformer.h.1.attn"] == "GPT2Attention" and layout["lm_head"] == "Linear"


def test_hf_trainer_callback_reports_a_nan_loss(tmp_path):
    transformers, model = _gpt2()
    from torchtriage.integrations.hf import TriageTrainerCallback

    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("nan")  # tied to the embedding: every logit row is NaN
    with TriageTrainerCallback(checks=[NonFiniteLoss()]) as cb:
        _train(transformers, model, cb, tmp_path, steps=1)
    assert [(f.code, f.step, f.message) for f in cb.report.findings] == [("numerical.test_loss", 0, "loss is nan")]


def test_hf_callback_context_manager_closes_on_error(tmp_path):
    transformers, model = _gpt2()
    from torchtriage.integrations.hf import TriageTrainerCallback

    with pytest.raises(RuntimeError, match="^stop$"):
        with TriageTrainerCallback(checks=[NonFiniteLoss()]) as cb:
            cb.on_train_begin(None, None, None, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
            raise RuntimeError("stop")
    assert isinstance(cb.report, Report)


# ---------------------------------------------------------------------- missing framework
@pytest.mark.parametrize("module, extra", [("lightning", "lightning"), ("hf", "hf")])
def test_missing_framework_names_the_extra(module, extra):
    framework = {"lightning": "lightning", "hf": "transformers"}[module]
    code = textwrap.dedent(f"""
        import sys
        sys.modules[{framework!r}] = None  # simulate the framework not being installed
        try:
            import torchtriage.integrations.{module}
        except ImportError as e:
            print(e, e.__cause__, e.__suppress_context__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == (f"{framework} is not installed; install it with: "
                                  f"pip install 'torchtriage[{extra}]' None True"), out.stderr


# ---------------------------------------------------------------------- closure-driven steps
class _Order(Checker):
    name = "order"

    def __init__(self):
        super().__init__()
        self.events = []

    def on_step_begin(self, step):
        self.events.append("begin")

    def on_backward(self, roots, grads):
        self.events.append("backward")

    def on_optimizer_step_pre(self, optimizer):
        self.events.append(f"opt_pre:{self.session.stage.value}")

    def on_step_end(self, step):
        self.events.append("end")


def test_closure_step_announces_the_optimizer_after_the_closure():
    # LBFGS (and Lightning) run forward and backward inside step(closure).
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.LBFGS(model.parameters(), max_iter=3)
    x, y = torch.randn(8, 3), torch.randn(8, 1)

    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    order = _Order()
    import torchtriage

    with torchtriage.watch(model, opt, checks=[order], report=False) as s:
        opt.step(closure)
    assert order.events[:3] == ["begin", "backward", "opt_pre:optimizer"]
    assert order.events.count("opt_pre:optimizer") == 1 and order.events[-1] == "end"
    assert s.report.meta["steps"] == 1


def test_lightning_step_order_is_forward_backward_optimizer():
    pytest.importorskip("lightning")
    from torchtriage.integrations.lightning import TriageCallback

    L, module = _lightning_module(nan_at_step=None)
    order = _Order()
    _fit(L, module, TriageCallback(checks=[order]), steps=2)
    assert order.events == ["begin", "backward", "opt_pre:optimizer", "end"] * 2
