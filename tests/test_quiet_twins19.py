"""Session 19: correct programs that read as defects (three fixed twins), and the defects beside them.

* `gradient.unregistered_tensor`: a tensor kept as a plain attribute with requires_grad=True is
  a defect only when nothing trains it. A differentiable architecture search keeps its
  architecture weights outside `parameters()` on purpose and hands them to an optimizer of their
  own (built after the model); a hand-written update trains them too. Judged at the end.
* `gradient.cut_detach`: `p.data.normal_()` / `init.zeros_(m.bias.data)` / `p.data[mask] = 0`
  write a parameter's values (an initialization, a hand update): a `.data` read that the next op
  writes in place cuts no path to any loss. A `.data` that the forward reads still does.
* `checkpoint.mostly_init`: a best checkpoint chosen early by a validation score is close to the
  initialization for a good reason: the loaded weights are the model's own weights at an earlier
  step (a point of its trajectory), not a copy that lagged behind training (an EMA's).
"""

from __future__ import annotations

import copy
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
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def codes(report: torchtriage.Report) -> list[str]:
    return [f.code for f in report.findings]


# ---------------------------------------------------------------- architecture weights kept apart
class Cell(nn.Module):
    """A DARTS-like cell: a softmax over candidate ops mixes their outputs."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.ops = nn.ModuleList([nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Identity()])
        self.head = nn.Linear(8, 1)
        alphas = (1e-3 * torch.randn(2, 3)).requires_grad_(True)
        if how == "list":
            self._arch = [alphas[0].detach().clone().requires_grad_(True),
                          alphas[1].detach().clone().requires_grad_(True)]
        else:
            self.alphas = alphas  # <- plain alphas

    def arch_parameters(self) -> list[torch.Tensor]:
        return list(self._arch) if hasattr(self, "_arch") else [self.alphas]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.arch_parameters()
        w = F.softmax(torch.stack(a) if len(a) > 1 else a[0], dim=-1)
        for row in w:
            x = sum(wi * op(x) for wi, op in zip(row, self.ops))
        return self.head(x)


def _search(how: str, update: str) -> torchtriage.Report:
    torch.manual_seed(0)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    with torchtriage.watch(on_anomaly="record", report=False, discover=True) as s:
        model = Cell(how)
        weights = torch.optim.SGD(model.parameters(), lr=0.05)
        arch = torch.optim.Adam(model.arch_parameters(), lr=3e-3) if update == "optimizer" else None
        for i in range(12):
            xb, yb = x[i % 4 * 16:(i % 4 + 1) * 16], y[i % 4 * 16:(i % 4 + 1) * 16]
            if update != "never":  # the architecture step (first-order DARTS)
                loss = F.mse_loss(model(xb), yb)
                grads = torch.autograd.grad(loss, model.arch_parameters())
                if arch is not None:
                    for a, g in zip(model.arch_parameters(), grads):
                        a.grad = g
                    arch.step()
                else:
                    with torch.no_grad():
                        for a, g in zip(model.arch_parameters(), grads):
                            a -= 3e-3 * g
            weights.zero_grad()
            F.mse_loss(model(xb), yb).backward()
            weights.step()
    return s.report


@pytest.mark.parametrize("how,update", [("attribute", "optimizer"), ("attribute", "by_hand"), ("list", "optimizer")])
def test_architecture_weights_trained_apart_are_quiet(how, update):
    report = _search(how, update)
    assert "gradient.unregistered_tensor" not in codes(report), [(f.code, f.parameter) for f in report.findings]


def test_architecture_weights_nothing_trains_are_unregistered():
    [f] = _search("attribute", "never").filter(code="gradient.unregistered_tensor")
    assert f.severity is Severity.ERROR and f.parameter == "alphas"


# ---------------------------------------------------------------- `.data` written, `.data` read
class Scale(nn.Module):
    """A learned per-channel output scale."""

    def __init__(self, read_data: bool) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(1, 1, 1, 1))
        self.read_data = read_data

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.read_data:  # the gain read as data: it gets no gradient
            return x * self.gain.data  # <- read
        return x * self.gain


class Matting(nn.Module):
    """An encoder pretrained first on its own, then a decoder trained with it; initialized by hand."""

    def __init__(self, read_data: bool = False) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.decoder = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1),
                                     Scale(read_data))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.data.normal_(0, 0.1)
                nn.init.zeros_(m.bias.data)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data[:] = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


def _matting(read_data: bool, pretrain: bool = True) -> torchtriage.Report:
    torch.manual_seed(0)
    x, y = torch.randn(16, 3, 12, 12), torch.rand(16, 1, 12, 12)
    with torchtriage.watch(on_anomaly="record", report=False, discover=True) as s:
        net = Matting(read_data)
        if pretrain:  # the decoder is not called: its parameters get no gradient on these steps
            head = nn.Linear(8, 2)
            pre = torch.optim.Adam(list(net.parameters()) + list(head.parameters()), lr=1e-3)
            for _ in range(6):
                pre.zero_grad()
                F.cross_entropy(head(net.encoder(x).mean((2, 3))), torch.arange(16) % 2).backward()
                pre.step()
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        for _ in range(6):
            opt.zero_grad()
            F.mse_loss(torch.sigmoid(net(x)), y).backward()
            opt.step()
    return s.report


def test_parameters_initialized_through_data_are_no_cut():
    report = _matting(False)
    assert "gradient.cut_detach" not in codes(report), [(f.code, f.parameter, f.line) for f in report.findings]


def test_a_weight_read_through_data_in_forward_is_still_a_cut():
    [f] = _matting(True, pretrain=False).filter(code="gradient.cut_detach")
    assert f.line == line("read") and f.evidence["parameters"] == ["decoder.3.gain"]


# ---------------------------------------------------------------- the best checkpoint, chosen early
def _early_stopping(keep: str) -> torchtriage.Report:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 16, generator=g), torch.randint(0, 2, (40,), generator=g)
    xv, yv = torch.randn(40, 16, generator=g), torch.randint(0, 2, (40,), generator=g)  # labels unrelated
    with torchtriage.watch(on_anomaly="record", report=False, discover=True) as s:
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        best_acc, best, buffer = -1.0, None, io.BytesIO()
        for epoch in range(15):
            for i in range(0, 40, 4):
                opt.zero_grad()
                F.cross_entropy(model(x[i:i + 4]), y[i:i + 4]).backward()
                opt.step()
            with torch.no_grad():
                acc = (model(xv).argmax(1) == yv).float().mean().item() - 0.01 * epoch  # the first epochs win
            if acc > best_acc:
                best_acc = acc
                if keep == "deepcopy":
                    best = copy.deepcopy(model.state_dict())
                else:
                    buffer.seek(0)
                    torch.save(model.state_dict(), buffer)
        if keep != "deepcopy":
            buffer.seek(0)
            best = torch.load(buffer)
        model.load_state_dict(best)
    return s.report


@pytest.mark.parametrize("keep", ["deepcopy", "saved"])
def test_an_early_best_checkpoint_restored_is_quiet(keep):
    assert "checkpoint.mostly_init" not in codes(_early_stopping(keep))
