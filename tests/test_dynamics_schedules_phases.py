"""Session 8: schedulers made and never stepped (`dynamics.scheduler_never_stepped`), the harm of
a dynamics finding measured within its own training phase and, for the loss at the prior, from
the prior; the step clock passing to a re-created optimizer; a frozen encoder and an optimizer
built only for a checkpoint, which are no gradient errors."""

from __future__ import annotations

import json
import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from conftest import run_cli
from torchtriage import Category, Finding, Severity
from torchtriage._dynamics._harm import HarmGate
from torchtriage._dynamics._phases import Phases

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def loader(n: int = 32, batch: int = 8) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch)


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def never_stepped(report: torchtriage.Report) -> list[Finding]:
    return report.filter(code="dynamics.scheduler_never_stepped")


def train(model, opt, data, epochs, after_epoch=None, after_batch=None):
    for _ in range(epochs):
        for x, y in data:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
            if after_batch is not None:
                after_batch()
        if after_epoch is not None:
            after_epoch()


# ---------------------------------------------------------------- schedulers never stepped
def test_exponential_scheduler_made_and_never_stepped_in_a_plain_loop():
    model, data = mlp(), loader()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)  # <- sched A
        train(model, opt, data, epochs=3)
    assert sched.last_epoch == 0
    [f] = never_stepped(s.report)
    assert (f.severity, f.line, f.op, f.category) == (Severity.WARNING, line("sched A"), "ExponentialLR",
                                                      Category.SILENT)
    ev = f.evidence
    assert (ev["training_epochs"], ev["lr_whole_run"], ev["lr_after_first_change"],
            ev["scheduler_steps_to_first_change"]) == (3, ["0.001"], ["0.0005"], 1)
    assert f.message == ("the ExponentialLR scheduler was never stepped: Adam's learning rate stayed at 0.001 "
                         "for all 3 training epochs, while the schedule sets it to 0.0005 after 1 step(s)")


def test_second_optimizers_warmup_scheduler_never_stepped():
    g, d, data = mlp(), mlp(), loader()
    opt_g = torch.optim.SGD(g.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(d.parameters(), lr=0.1)
    with torchtriage.watch([g, d], [opt_g, opt_d], on_anomaly="record", report=False) as s:
        sched_g = torch.optim.lr_scheduler.StepLR(opt_g, step_size=1, gamma=0.9)
        sched_d = torch.optim.lr_scheduler.LambdaLR(opt_d, lambda e: min(1.0, (e + 1) / 5))  # <- sched B
        for _ in range(3):
            for x, y in data:
                for m, o in ((g, opt_g), (d, opt_d)):
                    o.zero_grad()
                    F.mse_loss(m(x), y).backward()
                    o.step()
            sched_g.step()  # only the first one is stepped
    assert sched_d.last_epoch == 0
    [f] = never_stepped(s.report)
    assert (f.line, f.op, f.evidence["lr_whole_run"], f.evidence["lr_after_first_change"]) == \
        (line("sched B"), "LambdaLR", ["0.02"], ["0.04"])


def test_schedulers_that_are_stepped_or_not_yet_due_are_quiet():
    data = loader()
    runs = []
    for case in ("epoch", "batch", "plateau", "not_due", "one_epoch"):
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            if case == "epoch":
                sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
                train(model, opt, data, 3, after_epoch=sched.step)
            elif case == "batch":
                sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=12)
                train(model, opt, data, 3, after_batch=sched.step)
            elif case == "plateau":
                torch.optim.lr_scheduler.ReduceLROnPlateau(opt)  # its steps need a metric
                train(model, opt, data, 3)
            elif case == "not_due":
                torch.optim.lr_scheduler.StepLR(opt, step_size=30)  # a 3-epoch run reaches no decay
                train(model, opt, data, 3)
            else:
                torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)  # stepped after the only epoch
                train(model, opt, data, 1)
        runs.append((case, [f.code for f in never_stepped(s.report)]))
    assert runs == [(c, []) for c in ("epoch", "batch", "plateau", "not_due", "one_epoch")]


# ---------------------------------------------------------------- harm within a phase, from the prior
def _prior_finding(step: int) -> Finding:
    return Finding(category=Category.SILENT, code="dynamics.loss_at_prior", message="m", severity=Severity.WARNING,
                   step=step, evidence={"prior": "0.16"})


def test_loss_at_prior_is_judged_from_the_prior_even_when_the_run_ends_soon_after():
    gate = HarmGate()
    for i in range(60):
        gate.loss(i, 0.16 + 0.001 * (i % 3))
    gate.hold(_prior_finding(60))
    for i in range(60, 66):
        gate.loss(i, 0.11 + 0.001 * (i % 2))  # below the prior: it learned
    [f] = gate.release()
    assert (f.severity, f.evidence["loss_at_finding"], f.evidence["run_kept_learning"]) == (Severity.INFO, "0.16", True)
    stuck = HarmGate()
    for i in range(70):
        stuck.loss(i, 0.16 + 0.001 * (i % 3))
    stuck.hold(_prior_finding(60))
    assert stuck.release()[0].severity is Severity.WARNING


def test_a_spike_in_a_teachers_training_is_judged_by_the_teachers_losses():
    teacher, student = nn.Linear(4, 1), nn.Linear(4, 1)
    opt_t, opt_s = torch.optim.SGD(teacher.parameters(), 0.1), torch.optim.SGD(student.parameters(), 0.1)
    phases = Phases()
    gate = HarmGate(phases.end_of)
    spike = Finding(category=Category.GRADIENT, code="dynamics.exploding_gradients", message="m",
                    severity=Severity.WARNING, step=30)
    for i in range(50):  # the teacher: its loss falls to ~0.01
        assert phases.stepped(opt_t, i) is False
        gate.loss(i, 1.0 / (i + 1) + 0.01)
        if i == 30:
            gate.hold(spike)
    for i in range(50, 80):  # then the student, a new model, starts high
        assert phases.stepped(opt_s, i) is (i == 50)
        gate.loss(i, 0.9)
    [f] = gate.release()
    assert (f.severity, f.evidence["training_ended_at_step"], f.evidence["run_kept_learning"]) == \
        (Severity.INFO, 49, True)


def test_an_optimizer_re_created_at_an_lr_drop_takes_over_the_step_clock():
    model, data = mlp(), loader()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    held = [opt]  # the first one stays referenced (an engine's state, a closure)
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        for epoch in range(3):
            if epoch == 2:
                opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
            train(model, opt, data, 1)
        steps = (s.step, s.steps_seen)
    assert (steps, len(held)) == ((11, 12), 1)  # without the hand-over: step 8 for the last 4 batches


# ---------------------------------------------------------------- gradient: frozen encoder, inert optimizer
def test_an_encoder_in_eval_that_no_optimizer_holds_is_an_info():
    torch.manual_seed(0)
    encoder, decoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU()), nn.Linear(16, 8)
    encoder.eval()
    opt = torch.optim.Adam(decoder.parameters(), lr=1e-3)
    x = torch.randn(16, 8)
    with torchtriage.watch([encoder, decoder], opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            opt.zero_grad()
            feats = encoder(x)
            (F.mse_loss(decoder(feats), x) + feats.pow(2).mean()).backward()
            opt.step()
    [f] = s.report.filter(code="gradient.not_in_optimizer")
    assert (f.severity, f.evidence["whole_model_in_eval"], f.evidence["parameters"]) == \
        (Severity.INFO, True, ["0.weight", "0.bias"])
    encoder.train()  # the same model in train(): a model the optimizer forgot
    with torchtriage.watch([encoder, decoder], opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            opt.zero_grad()
            feats = encoder(x)
            (F.mse_loss(decoder(feats), x) + feats.pow(2).mean()).backward()
            opt.step()
    [f] = s.report.filter(code="gradient.not_in_optimizer")
    assert f.severity is Severity.ERROR


def test_a_model_and_optimizer_built_only_to_write_a_first_checkpoint_are_quiet(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, torch.nn as nn, torch.nn.functional as F\n"
        "def main():\n"
        "    torch.manual_seed(0)\n"
        "    model = nn.Sequential(nn.Linear(8, 16), nn.LSTM(16, 8, batch_first=True))\n"
        "    optim = torch.optim.Adam(model.parameters())\n"
        "    checkpoint = {'model': model.state_dict(), 'optim': optim.state_dict()}\n"
        "    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))\n"
        "    opt = torch.optim.Adam(net.parameters())\n"
        "    x, y = torch.randn(32, 8), torch.randn(32, 1)\n"
        "    for _ in range(6):\n"
        "        opt.zero_grad()\n"
        "        F.mse_loss(net(x), y).backward()\n"
        "        opt.step()\n"
        "    return checkpoint\n"
        "main()\n")
    out = tmp_path / "r.json"
    proc = run_cli("run", "--json", str(out), str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = [(f["code"], f["severity"]) for f in json.loads(out.read_text())["findings"]
             if f["severity"] != "info"]
    assert found == []


def test_a_meta_net_whose_grad_is_set_by_hand_is_trained_not_cut(tmp_path):
    # Reptile: each meta-iteration trains a clone, then sets meta.grad = meta - fast by hand and
    # steps the meta optimizer; no backward reaches the meta-net, its clone's state_dict() detaches
    script = tmp_path / "reptile.py"
    script.write_text(REPTILE)
    out = tmp_path / "r.json"
    proc = run_cli("run", "--json", str(out), str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [f["code"] for f in json.loads(out.read_text())["findings"] if f["severity"] != "info"] == []


REPTILE = """import torch, torch.nn as nn, torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.body(x)

    def clone(self):
        c = Net()
        c.load_state_dict(self.state_dict())
        return c


def main():
    torch.manual_seed(0)
    meta = Net()
    meta_opt = torch.optim.SGD(meta.parameters(), lr=0.5)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for _ in range(30):
        fast = meta.clone()
        opt = torch.optim.Adam(fast.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(fast(x), y).backward()
            opt.step()
        for p, q in zip(meta.parameters(), fast.parameters()):
            p.grad = (p.detach() - q.detach()).clone()
        meta_opt.step()


main()
"""
