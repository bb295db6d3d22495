"""Session 13 (sil): figures that follow only the last batch. A BatchNorm momentum given in
TensorFlow's convention (`_dynamics/_bnmomentum.py`) and a reported running loss that the loop
never adds to (`_ledger/_unsummed.py`). Each bug is a script written as users write it, run under a
discovering session, with its exact finding; each look-alike is quiet."""

from __future__ import annotations

import textwrap

import pytest

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source, checks=None):
    return run_script("prog.py", tmp_path, checks=checks, source=textwrap.dedent(source))[0]


def _line(source: str, tag: str = "# HERE") -> int:
    return line_in(source, tag, ending=True)


def _codes(report, code):
    return [f for f in report.findings if f.code == code]


BN = "dynamics.bn_momentum_last_batch"
UNSUMMED = "silent.reported_loss_never_accumulated"

# ---------------------------------------------------------------- BatchNorm momentum in TF's convention
# (1) a conv block class, a plain loop, small noisy batches, eval at the end
BN_BLOCK = """
    import torch
    import torch.nn as nn

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, c_in, c_out):
            super().__init__()
            self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
            self.norm = nn.BatchNorm2d(c_out, momentum=0.99)  # HERE
        def forward(self, x):
            return torch.relu(self.norm(self.conv(x)))

    model = nn.Sequential(Block(3, 8), Block(8, 8), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(40):
        x = torch.randn(4, 3, 8, 8) * (1 + torch.rand(1) * 3) + torch.randn(1) * 2
        y = torch.randint(0, 2, (4,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        model(torch.randn(16, 3, 8, 8))
"""

# (2) a function-built MLP with BatchNorm1d from a config dict (Keras' default 0.9), a trainer function
BN_CONFIG = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    CFG = {"bn_momentum": 0.9, "hidden": 32}

    def make_model(cfg):
        return nn.Sequential(nn.Linear(10, cfg["hidden"]),
                             nn.BatchNorm1d(cfg["hidden"], momentum=cfg["bn_momentum"]),  # HERE
                             nn.ReLU(), nn.Linear(cfg["hidden"], 1))

    def fit(model, loader, epochs):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(epochs):
            model.train()
            for xb, yb in loader:
                loss = nn.functional.mse_loss(model(xb).squeeze(1), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()

    torch.manual_seed(1)
    x = torch.randn(96, 10) * torch.linspace(0.2, 5, 96).unsqueeze(1)
    y = x.sum(1)
    model = make_model(CFG)
    fit(model, DataLoader(TensorDataset(x, y), batch_size=6, shuffle=True), 3)
    model.eval()
    with torch.no_grad():
        print(float(nn.functional.mse_loss(model(x).squeeze(1), y)))
"""

# (3) a class trainer over a sequence model: BatchNorm1d over time, momentum=1.0 (the last batch only)
BN_TRAINER = """
    import torch
    import torch.nn as nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.bn = nn.BatchNorm1d(16, momentum=1.0)  # HERE
            self.out = nn.Linear(16, 5)
        def forward(self, tok):
            h = self.emb(tok).transpose(1, 2)
            return self.out(self.bn(h).transpose(1, 2))

    class Trainer:
        def __init__(self):
            self.model = Tagger()
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        def step(self, tok, tags):
            logits = self.model(tok)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 5), tags.reshape(-1))
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()

    torch.manual_seed(2)
    t = Trainer()
    for i in range(30):
        hi = int(torch.randint(5, 50, (1,)))
        t.step(torch.randint(0, hi, (3, 7)), torch.randint(0, 5, (3, 7)))
    t.model.eval()
    with torch.no_grad():
        t.model(torch.randint(0, 50, (8, 7)))
"""


@pytest.mark.parametrize("source", [BN_BLOCK, BN_CONFIG, BN_TRAINER], ids=["block", "config", "trainer"])
def test_bn_momentum_in_tf_convention_is_found(tmp_path, source):
    report = _run(tmp_path, source)
    found = _codes(report, BN)
    assert len(found) == 1, [f.code for f in report.findings]
    f = found[0]
    assert f.line == _line(source)
    assert f.severity.value == "warning"
    ev = f.evidence
    assert ev["momentum"] >= 0.9 and ev["running_stat_updates"] >= 10
    assert ev["running_mean_off_intended_in_stds"] >= 0.1
    assert "PyTorch's momentum is the weight of the NEW batch" in f.message
    assert ev["module"] in f.message


def test_bn_momentum_on_steady_inputs_is_info(tmp_path):
    # momentum 0.9 on large batches of one distribution: the last batch IS the average (no harm)
    source = BN_CONFIG.replace("batch_size=6", "batch_size=96").replace(
        "x = torch.randn(96, 10) * torch.linspace(0.2, 5, 96).unsqueeze(1)", "x = torch.randn(96, 10)").replace(
        "model = make_model(CFG)", "x = x.repeat(1, 1)\n    model = make_model(CFG)")
    report = _run(tmp_path, source)
    found = _codes(report, BN)
    assert len(found) == 1 and found[0].severity.value == "info", [(f.code, f.evidence) for f in found]


def test_bn_momentum_never_evaluated_is_info(tmp_path):
    # MAML / relation networks: momentum=1 on purpose, the model never leaves train() mode (batch statistics
    # at test time too): the running statistics are never read
    source = BN_BLOCK.replace("    model.eval()\n", "")
    report = _run(tmp_path, source)
    found = _codes(report, BN)
    assert len(found) == 1 and found[0].severity.value == "info"
    assert found[0].evidence["eval_mode_forwards"] == 0


@pytest.mark.parametrize("momentum", ["", ", momentum=0.1", ", momentum=0.01", ", momentum=0.3", ", momentum=None"])
def test_bn_momentum_pytorch_convention_is_quiet(tmp_path, momentum):
    source = BN_BLOCK.replace("nn.BatchNorm2d(c_out, momentum=0.99)", f"nn.BatchNorm2d(c_out{momentum})")
    report = _run(tmp_path, source)
    assert not _codes(report, BN)


# ---------------------------------------------------------------- a reported running loss never accumulated
# (1) a plain loop logging every k batches: the `+=` is missing
UNSUMMED_PLAIN = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    x, y = torch.randn(120, 6), torch.randint(0, 3, (120,))
    loader = DataLoader(TensorDataset(x, y), batch_size=10)
    model = nn.Linear(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    running = 0.0
    history = []
    for epoch in range(2):
        for i, (xb, yb) in enumerate(loader):
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (i + 1) % 4 == 0:
                history.append(running / 4)  # HERE
                running = 0.0
"""

# (2) a function-based trainer returning the epoch loss: assigned instead of added
UNSUMMED_FUNCTIONAL = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    def train_epoch(model, loader, opt):
        model.train()
        epoch_loss = 0
        for xb, yb in loader:
            pred = model(xb).squeeze(-1)
            loss = nn.functional.mse_loss(pred, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            epoch_loss = loss.item()
        return epoch_loss / len(loader)  # HERE

    torch.manual_seed(1)
    x = torch.randn(64, 4)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    for epoch in range(3):
        print(f"epoch {epoch}: {train_epoch(model, loader, opt):.4f}")
"""

# (3) a class trainer with a per-sample mean: the sum is never added to, the count is
UNSUMMED_CLASS = """
    import logging
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    log = logging.getLogger("trainer")

    class Trainer:
        def __init__(self, model, loader):
            self.model, self.loader = model, loader
            self.opt = torch.optim.Adam(model.parameters(), lr=1e-2)

        def run_epoch(self, epoch):
            total_loss, seen = 0.0, 0
            for images, labels in self.loader:
                out = self.model(images)
                loss = nn.functional.cross_entropy(out, labels)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                seen += images.size(0)
            mean_loss = total_loss / seen  # HERE
            log.info("epoch %d loss %.4f", epoch, mean_loss)

    torch.manual_seed(2)
    data = TensorDataset(torch.randn(90, 1, 4, 4), torch.randint(0, 2, (90,)))
    t = Trainer(nn.Sequential(nn.Flatten(), nn.Linear(16, 2)), DataLoader(data, batch_size=9))
    for e in range(2):
        t.run_epoch(e)
"""


# (4) a validation-style function whose accumulator is reset inside the loop
UNSUMMED_RESET = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    def fit_one(net, loader, optimizer):
        for xb, yb in loader:
            batch_loss = 0.0
            out = net(xb)
            loss = nn.functional.binary_cross_entropy_with_logits(out.squeeze(1), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batch_loss += loss.item()
        avg = batch_loss / len(loader)  # HERE
        print("train loss", avg)

    torch.manual_seed(3)
    x = torch.randn(80, 5)
    y = (x[:, 0] > 0).float()
    net = nn.Linear(5, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(2):
        fit_one(net, DataLoader(TensorDataset(x, y), batch_size=10), optimizer)
"""


@pytest.mark.parametrize("source,kind", [(UNSUMMED_PLAIN, "never changes from 0"),
                                         (UNSUMMED_RESET, "reset to 0 at every batch"),
                                         (UNSUMMED_FUNCTIONAL, "assigned, not added, each batch"),
                                         (UNSUMMED_CLASS, "never changes from 0")],
                         ids=["plain", "reset", "functional", "class"])
def test_running_loss_never_accumulated_is_found(tmp_path, source, kind):
    report = _run(tmp_path, source)
    found = _codes(report, UNSUMMED)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert f.line == _line(source)
    assert f.severity.value == "warning"
    assert f.evidence["kind"] == kind
    assert f.evidence["pass_losses"] >= 2 and f.evidence["pass_loss_mean"] > 0
    assert "harm" in f.evidence
    if kind == "never changes from 0":
        assert f.evidence["reported_value"] == 0
        assert "is only ever set to 0" in f.message
    elif kind == "reset to 0 at every batch":
        assert "sets batch_loss to 0 at every batch" in f.message
        assert f.evidence["reported_value"] == pytest.approx(f.evidence["live_value"] / 8)
    else:
        assert "instead of adding to it" in f.message
        assert f.evidence["reported_value"] == pytest.approx(f.evidence["live_value"] / 8)


ACCUMULATORS = {
    "augassign": "running += loss.item()",
    "assign_sum": "running = running + loss.item()",
    "weighted": "running += loss.item() * xb.size(0) / 10",
    "detached_tensor": "running += loss.detach()",
    "float_call": "running = float(running) + float(loss.item())",
}


@pytest.mark.parametrize("line", list(ACCUMULATORS.values()), ids=list(ACCUMULATORS))
def test_accumulators_written_in_other_styles_are_quiet(tmp_path, line):
    source = UNSUMMED_PLAIN.replace("            opt.step()\n            if",
                                    f"            opt.step()\n            {line}\n            if")
    report = _run(tmp_path, source)
    assert not _codes(report, UNSUMMED), [f.message for f in _codes(report, UNSUMMED)]


LOOKALIKES = {
    # the last loss printed as such (not divided by a count)
    "last_loss_printed": UNSUMMED_FUNCTIONAL.replace("return epoch_loss / len(loader)  # HERE",
                                                     "return epoch_loss"),
    # a mean of a list of losses
    "list_mean": UNSUMMED_FUNCTIONAL.replace("epoch_loss = 0\n", "losses = []\n").replace(
        "epoch_loss = loss.item()", "losses.append(loss.item())").replace(
        "return epoch_loss / len(loader)  # HERE", "return sum(losses) / len(loader)"),
    # a per-batch value scaled by its own constant (gradient accumulation), not a running mean
    "per_batch_scaled": UNSUMMED_FUNCTIONAL.replace("return epoch_loss / len(loader)  # HERE",
                                                    "return epoch_loss / 2"),
    # a running sum copied into another name each batch, divided after the loop
    "copied_running_sum": UNSUMMED_FUNCTIONAL.replace(
        "epoch_loss = 0\n", "epoch_loss = 0\n        running = 0.0\n").replace(
        "epoch_loss = loss.item()", "running += loss.item()\n            epoch_loss = running"),
    # a per-batch figure reset and reported inside the loop
    "reset_reported_per_batch": UNSUMMED_RESET.replace(
        "            batch_loss += loss.item()\n        avg = batch_loss / len(loader)  # HERE\n"
        "        print(\"train loss\", avg)",
        "            batch_loss += loss.item()\n            print(\"batch loss\", batch_loss / len(yb))"),
    # the class trainer, fixed
    "class_fixed": UNSUMMED_CLASS.replace(
        "seen += images.size(0)", "seen += images.size(0)\n                total_loss += loss.item() * images.size(0)"),
}


@pytest.mark.parametrize("source", list(LOOKALIKES.values()), ids=list(LOOKALIKES))
def test_lookalikes_are_quiet(tmp_path, source):
    report = _run(tmp_path, source)
    assert not _codes(report, UNSUMMED), [f.message for f in _codes(report, UNSUMMED)]
