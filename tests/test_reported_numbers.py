"""Session 12 (met): the weight each loss term has (`_silent/_batchtwice.py`) and the numbers a run
reports (`_ledger/_metricstate.py`). Each bug is a script written as users write it, run under a
discovering session (what `torchtriage run` does), with its exact finding; each look-alike is
quiet."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from _lines import line_in
from test_ledger import alarms, run_script


def _run(tmp_path, source, checks=None):
    return run_script("prog.py", tmp_path, checks=checks, source=textwrap.dedent(source))


def _line(source: str, tag: str = "# HERE") -> int:
    return line_in(source, tag, ending=True)


def _codes(report, code):
    return [f for f in report.findings if f.code == code]


# ---------------------------------------------------------------- a loss term divided by the batch twice
# (1) a plain loop: a multi-head regression whose auxiliary head's term is scaled per sample and
#     divided by the batch again after the sum
TWICE_PLAIN = """
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    body, head, aux = nn.Linear(8, 16), nn.Linear(16, 3), nn.Linear(16, 1)
    params = [*body.parameters(), *head.parameters(), *aux.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    for it in range(6):
        x, y, s = torch.randn(24, 8), torch.randn(24, 3), torch.randn(24, 1)
        h = torch.relu(body(x))
        bsz = x.shape[0]
        main = torch.abs(head(h) - y).sum() / bsz
        side = torch.abs(aux(h) - s) * 0.5 / bsz  # FIRST
        loss = main + side.sum() / bsz  # HERE
        opt.zero_grad()
        loss.backward()
        opt.step()
"""

# (2) a function-based trainer: a built-in loss (a mean already) divided by the batch size
TWICE_FUNCTIONAL = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    def compute_loss(model, batch):
        images, labels, boxes = batch
        logits, pred_boxes = model(images)
        cls = F.cross_entropy(logits, labels)
        reg = F.smooth_l1_loss(pred_boxes, boxes)  # FIRST
        return cls + reg / images.size(0)  # HERE

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = nn.Sequential(nn.Flatten(), nn.Linear(48, 32), nn.ReLU())
            self.cls, self.box = nn.Linear(32, 5), nn.Linear(32, 4)

        def forward(self, x):
            h = self.trunk(x)
            return self.cls(h), self.box(h)

    def train(model, loader, epochs=2):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(epochs):
            for batch in loader:
                loss = compute_loss(model, batch)
                opt.zero_grad()
                loss.backward()
                opt.step()

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 3, 4, 4), torch.randint(0, 5, (64,)), torch.randn(64, 4))
    train(Detector(), DataLoader(data, batch_size=16))
"""

# (3) a class trainer: a per-sample weight of 1/B multiplied in, then the term averaged
TWICE_CLASS = """
    import torch
    import torch.nn as nn

    class Trainer:
        def __init__(self, model, lr=0.01):
            self.model = model
            self.opt = torch.optim.SGD(model.parameters(), lr=lr)
            self.mse = nn.MSELoss(reduction="none")

        def losses(self, x, y, z):
            recon, code = self.model(x)
            w = 1.0 / x.shape[0]
            rec = self.mse(recon, y).sum(dim=1) * w  # FIRST
            reg = (code ** 2).sum(dim=1)
            return {"rec": rec.mean(), "reg": 0.01 * reg.mean()}  # HERE

        def step(self, x, y, z):
            terms = self.losses(x, y, z)
            total = sum(terms.values())
            self.opt.zero_grad()
            total.backward()
            self.opt.step()

    class AE(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.dec = nn.Linear(10, 4), nn.Linear(4, 10)

        def forward(self, x):
            c = self.enc(x)
            return self.dec(c), c

    torch.manual_seed(0)
    t = Trainer(AE())
    for _ in range(5):
        x = torch.randn(20, 10)
        t.step(x, x, None)
"""


@pytest.mark.parametrize("src,batch,lines", [
    (TWICE_PLAIN, 24, None), (TWICE_FUNCTIONAL, 16, None), (TWICE_CLASS, 20, None)],
    ids=["plain_loop", "functional_builtin_mean", "class_trainer_weight"])
def test_a_loss_term_divided_by_the_batch_size_twice(tmp_path, src, batch, lines):
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "silent.loss_term_divided_twice")
    assert (f.severity.value, f.category.value, f.line, f.step) == ("warning", "silent", _line(src), 0)
    ev = f.evidence
    assert ev["batch_size"] == batch and ev["divisions_by_batch"] == 2 and ev["batch_dims_reduced"] == 1
    assert ev["division_lines"] == sorted({_line(src, "# FIRST"), _line(src)})
    assert ev["term_weight_factor"] == pytest.approx(1 / batch)
    assert ev["term_value_divided_once"] == pytest.approx(ev["term_value"] * batch)
    assert f.message.startswith(f"a loss term is divided by the batch size ({batch}) 2 times while it is reduced "
                                f"over the batch 1 time(s) (lines {', '.join(map(str, ev['division_lines']))}): "
                                f"it enters the loss with 1/{batch} of the weight the code gives it")
    assert [a[0] for a in alarms(report)] == ["silent.loss_term_divided_twice"]


QUIET = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    B = 8
    for it in range(5):
        x, y = torch.randn(B, 8), torch.randint(0, 8, (B,))
        out = model(x)
        LOSS
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
_QUIET = {
    "sum_divided_once": "loss = torch.abs(out).sum() / x.size(0)",
    "scaled_then_summed": "loss = (torch.abs(out) / B).sum()",
    "mean_only": "loss = F.cross_entropy(out, y) + 0.1 * out.pow(2).mean()",
    "sum_reduction_divided_once": "loss = F.cross_entropy(out, y, reduction='sum') / B",
    "kl_batchmean": "loss = F.kl_div(F.log_softmax(out, -1), F.softmax(torch.randn(B, 8), -1), reduction='batchmean')",
    "pairwise_sum_over_b_squared": "loss = torch.abs(out @ out.t()).sum() / B / B",
    "temperature_equal_to_batch": "loss = F.cross_entropy(out / B, y)",
    "accumulation_divisor": "loss = F.mse_loss(out, torch.zeros_like(out)) / 4",
    "vae_sum_over_batch": ("loss = (F.mse_loss(out, x, reduction='sum') "
                           "- 0.5 * torch.sum(1 + out - out.pow(2) - out.exp())) / B"),
    "single_term_mean_divided_again": "loss = F.cross_entropy(out, y, ignore_index=255); loss /= out.size(0)",
    "tokens_summed_then_per_sequence": "loss = F.cross_entropy(out.repeat(3, 1), y.repeat(3), reduction='sum') / B",
}


@pytest.mark.parametrize("loss", list(_QUIET.values()), ids=list(_QUIET))
def test_terms_normalized_once_are_quiet(tmp_path, loss):
    report, _ = _run(tmp_path, QUIET.replace("LOSS", loss))
    assert _codes(report, "silent.loss_term_divided_twice") == []


# ---------------------------------------------------------------- a stateful metric never reset
# (1) a plain loop: accuracy updated per batch, computed at each epoch's end
RESET_PLAIN = """
    import torch
    import torch.nn as nn
    import torchmetrics
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    x = torch.randn(192, 6)
    y = (x[:, 0] + x[:, 1] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = nn.Linear(6, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    acc = torchmetrics.Accuracy(task="multiclass", num_classes=2)
    for epoch in range(4):
        for xb, yb in loader:
            out = model(xb)
            loss = nn.functional.cross_entropy(out, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            acc.update(out.argmax(1), yb)
        print(epoch, float(acc.compute()))  # HERE
        RESET
"""

# (2) a function-based trainer: the metric called on each batch (forward), F1 over an evaluation
RESET_FUNCTIONAL = """
    import torch
    import torch.nn as nn
    from torchmetrics.classification import MulticlassF1Score

    def evaluate(model, batches, f1):
        model.eval()
        with torch.no_grad():
            for xb, yb in batches:
                f1(model(xb).argmax(1), yb)
        model.train()
        return f1.compute().item()  # HERE

    def fit(model, train, val, epochs):
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        f1 = MulticlassF1Score(num_classes=3, average="macro")
        history = []
        for _ in range(epochs):
            for xb, yb in train:
                loss = nn.functional.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
            history.append(evaluate(model, val, f1))
            RESET
        return history

    torch.manual_seed(1)
    def make(n):
        x = torch.randn(n, 5)
        return [(x[i:i + 20], x[i:i + 20, :3].argmax(1)) for i in range(0, n, 20)]
    print(fit(nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3)), make(200), make(100), 5))
"""

# (3) a class trainer with Lightning-like epoch hooks: a regression error in a MetricCollection
RESET_CLASS = """
    import torch
    import torch.nn as nn
    from torchmetrics import MeanAbsoluteError, MetricCollection

    class Regressor:
        def __init__(self):
            self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05)
            self.metrics = MetricCollection({"mae": MeanAbsoluteError()})

        def training_step(self, x, y):
            pred = self.net(x).squeeze(1)
            loss = nn.functional.mse_loss(pred, y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.metrics.update(pred.detach(), y)

        def on_train_epoch_end(self):
            logs = {k: v.item() for k, v in self.metrics.compute().items()}  # HERE
            RESET
            return logs

    torch.manual_seed(2)
    x = torch.randn(240, 4)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0])
    r = Regressor()
    for epoch in range(5):
        for i in range(0, 240, 24):
            r.training_step(x[i:i + 24], y[i:i + 24])
        print(r.on_train_epoch_end())
"""


def _reset(src, reset=""):
    return src.replace("RESET", reset or "pass")


@pytest.mark.parametrize("src,metric,computes,group", [
    (RESET_PLAIN, "MulticlassAccuracy", 4, 6), (RESET_FUNCTIONAL, "MulticlassF1Score", 5, 5),
    (RESET_CLASS, "MeanAbsoluteError", 5, 10)], ids=["plain_loop", "functional_forward", "class_collection"])
def test_a_metric_computed_each_epoch_and_never_reset(tmp_path, src, metric, computes, group):
    src = _reset(src)
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "silent.metric_never_reset")
    assert (f.severity.value, f.category.value, f.line) == ("warning", "silent", _line(src))
    ev = f.evidence
    assert (ev["metric"], ev["computes"], ev["resets"]) == (metric, computes, 0)
    assert ev["updates_since_previous_compute"] == group and ev["updates_in_last_compute"] == computes * group
    k = f.message.split("compute #")[1].split(" ")[0]
    i = int(k) - 1
    reported, own = ev["reported_values"], ev["values_over_each_group"]
    assert len(reported) == len(own) == computes and reported[0] == own[0]
    assert abs(reported[i] - own[i]) >= 0.01 * abs(own[i])
    assert f.message.startswith(f"metric {metric} is computed {computes} times and never reset: its compute #{k} "
                                f"reports {reported[i]:.4g} over all {(i + 1) * group} updates")


@pytest.mark.parametrize("src,reset", [
    (RESET_PLAIN, "acc.reset()"), (RESET_FUNCTIONAL, "f1.reset()"), (RESET_CLASS, "self.metrics.reset()")],
    ids=["plain_loop", "functional_forward", "class_collection"])
def test_a_metric_reset_each_epoch_is_quiet(tmp_path, src, reset):
    report, _ = _run(tmp_path, _reset(src, reset))
    assert _codes(report, "silent.metric_never_reset") == []


RUNNING = """
    import torch
    import torch.nn as nn
    import torchmetrics

    torch.manual_seed(0)
    model = nn.Linear(6, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    VARIANT
"""
_RUNNING = {
    # a running figure shown every few batches, reset at the epoch's end
    "running_reset_at_epoch_end": """
    acc = torchmetrics.Accuracy(task="multiclass", num_classes=2)
    for epoch in range(3):
        for i in range(8):
            xb = torch.randn(16, 6); yb = (xb[:, 0] > 0).long()
            out = model(xb); loss = nn.functional.cross_entropy(out, yb)
            opt.zero_grad(); loss.backward(); opt.step()
            acc(out, yb)
            if i % 2 == 1:
                print("running acc", acc.compute().item())
        acc.reset()
""",
    # a fresh metric object each epoch
    "new_metric_each_epoch": """
    for epoch in range(3):
        acc = torchmetrics.Accuracy(task="multiclass", num_classes=2)
        for i in range(8):
            xb = torch.randn(16, 6); yb = (xb[:, 0] > 0).long()
            out = model(xb); loss = nn.functional.cross_entropy(out, yb)
            opt.zero_grad(); loss.backward(); opt.step()
            acc.update(out, yb)
        print(acc.compute().item())
""",
    # reset before the epoch's first update
    "reset_at_epoch_start": """
    acc = torchmetrics.Accuracy(task="multiclass", num_classes=2)
    for epoch in range(3):
        acc.reset()
        for i in range(8):
            xb = torch.randn(16, 6); yb = (xb[:, 0] > 0).long()
            out = model(xb); loss = nn.functional.cross_entropy(out, yb)
            opt.zero_grad(); loss.backward(); opt.step()
            acc.update(out, yb)
        print(acc.compute().item())
""",
    # computed once, at the end of the run: a figure over the whole run, asked for as such
    "computed_once": """
    acc = torchmetrics.Accuracy(task="multiclass", num_classes=2)
    for epoch in range(3):
        for i in range(8):
            xb = torch.randn(16, 6); yb = (xb[:, 0] > 0).long()
            out = model(xb); loss = nn.functional.cross_entropy(out, yb)
            opt.zero_grad(); loss.backward(); opt.step()
            acc.update(out, yb)
    print(acc.compute().item(), acc.compute().item())
""",
}


@pytest.mark.parametrize("variant", list(_RUNNING.values()), ids=list(_RUNNING))
def test_metrics_reset_or_computed_once_are_quiet(tmp_path, variant):
    src = RUNNING.replace("    VARIANT\n", textwrap.indent(textwrap.dedent(variant), "    "))
    report, _ = _run(tmp_path, src)
    assert _codes(report, "silent.metric_never_reset") == []


# ---------------------------------------------------------------- metrics scored per batch and added up
# (1) a plain loop: a rare positive class, F1 per validation batch appended and averaged
BATCHF1_PLAIN = """
    import numpy as np
    import torch
    import torch.nn as nn
    from sklearn.metrics import f1_score
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    x = torch.randn(320, 4)
    y = (x[:, 0] > 1.0).long()
    train = DataLoader(TensorDataset(x[:240], y[:240]), batch_size=16, shuffle=True)
    val = DataLoader(TensorDataset(x[240:], y[240:]), batch_size=16)
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for epoch in range(4):
        for xb, yb in train:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        scores = []
        with torch.no_grad():
            for xb, yb in val:
                scores.append(f1_score(yb.numpy(), model(xb).argmax(1).numpy(), zero_division=0))  # HERE
        print(epoch, "val f1", np.mean(scores))
"""

# (2) a function-based evaluation: ROC AUC per batch summed and divided by the number of batches
BATCHAUC_FUNCTIONAL = """
    import torch
    import torch.nn as nn
    from sklearn import metrics
    from torch.utils.data import DataLoader, TensorDataset

    def evaluate(model, loader):
        total = 0.0
        with torch.no_grad():
            for xb, yb in loader:
                p = torch.sigmoid(model(xb)).squeeze(1)
                total += metrics.roc_auc_score(yb.numpy(), p.numpy())  # HERE
        return total / len(loader)

    def main():
        torch.manual_seed(3)
        x = torch.randn(400, 3)
        y = ((x[:, 0] + 0.5 * torch.randn(400)) > 0).float()
        order = torch.argsort(x[:, 1])  # batches sorted by a feature: each holds both classes
        val = DataLoader(TensorDataset(x[order], y[order]), batch_size=40)
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            for i in range(0, 400, 50):
                loss = nn.functional.binary_cross_entropy_with_logits(model(x[i:i + 50]).squeeze(1), y[i:i + 50])
                opt.zero_grad()
                loss.backward()
                opt.step()
            print(epoch, evaluate(model, val))

    main()
"""

# (3) a class-based tracker: per-class recall of each batch added into an array
BATCHRECALL_CLASS = """
    import numpy as np
    import torch
    import torch.nn as nn
    from sklearn.metrics import recall_score
    from torch.utils.data import DataLoader, TensorDataset

    class Tracker:
        def __init__(self, n):
            self.recall = np.zeros(n)
            self.n = 0

        def add(self, target, pred):
            r = recall_score(target, pred, labels=[0, 1, 2], average=None, zero_division=0)
            self.recall += r  # HERE
            self.n += 1

        def result(self):
            return self.recall / self.n

    torch.manual_seed(5)
    x = torch.randn(300, 6)
    y = torch.where(x[:, 0] > 1.2, 2, (x[:, 1] > 0).long())
    loader = DataLoader(TensorDataset(x, y), batch_size=25, shuffle=True)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for epoch in range(3):
        tr = Tracker(3)
        for xb, yb in loader:
            out = model(xb)
            loss = nn.functional.cross_entropy(out, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tr.add(yb.numpy(), out.argmax(1).numpy())
        print(epoch, tr.result())
"""


@pytest.mark.parametrize("src,metric,batches,samples", [
    (BATCHF1_PLAIN, "f1_score", 5, 80), (BATCHAUC_FUNCTIONAL, "roc_auc_score", 10, 400),
    (BATCHRECALL_CLASS, "recall_score", 12, 300)], ids=["plain_append_mean", "functional_auc_sum", "class_per_class"])
def test_a_metric_scored_per_batch_and_added_up(tmp_path, src, metric, batches, samples):
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "silent.metric_averaged_over_batches")
    assert (f.severity.value, f.category.value, f.line) == ("warning", "silent", _line(src))
    ev = f.evidence
    assert (ev["metric"], ev["batches"], ev["samples"], ev["accumulated_at_line"]) == (
        metric, batches, samples, _line(src))
    b, o = np.asarray(ev["mean_of_batches"]), np.asarray(ev["over_the_pass"])
    i = ev.get("class", 0)
    assert abs(b.reshape(-1)[i] - o.reshape(-1)[i]) >= 0.01 * abs(o.reshape(-1)[i])
    assert f.message.startswith(f"{metric}" + (f" (class {i})" if "class" in ev else "") + " is scored per batch")


BATCH_QUIET = """
    import numpy as np
    import torch
    import torch.nn as nn
    from sklearn.metrics import accuracy_score, f1_score
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    x = torch.randn(320, 4)
    y = (x[:, 0] > 1.0).long()
    train = DataLoader(TensorDataset(x[:240], y[:240]), batch_size=16, shuffle=True)
    val = DataLoader(TensorDataset(x[240:], y[240:]), batch_size=16)
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for epoch in range(3):
        for xb, yb in train:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        VARIANT
"""
_BATCH_QUIET = {
    # the pass's predictions collected, the metric computed once
    "collected_then_scored": """
        ts, ps = [], []
        with torch.no_grad():
            for xb, yb in val:
                ts.append(yb.numpy()); ps.append(model(xb).argmax(1).numpy())
        print(f1_score(np.concatenate(ts), np.concatenate(ps), zero_division=0))
""",
    # accuracy per batch over batches of one size: the mean of the batches is the mean of the rows
    "accuracy_equal_batches": """
        acc = 0.0
        with torch.no_grad():
            for xb, yb in val:
                acc += accuracy_score(yb.numpy(), model(xb).argmax(1).numpy())
        print(acc / len(val))
""",
    # a per-batch score logged as it is, never added up
    "per_batch_logged": """
        with torch.no_grad():
            for i, (xb, yb) in enumerate(val):
                s = f1_score(yb.numpy(), model(xb).argmax(1).numpy(), zero_division=0)
                print("batch", i, s)
""",
}


@pytest.mark.parametrize("variant", list(_BATCH_QUIET.values()), ids=list(_BATCH_QUIET))
def test_metrics_scored_over_the_pass_are_quiet(tmp_path, variant):
    src = BATCH_QUIET.replace("        VARIANT\n", textwrap.indent(textwrap.dedent(variant), "        "))
    report, _ = _run(tmp_path, src)
    assert _codes(report, "silent.metric_averaged_over_batches") == []


# ---------------------------------------------------------------- a running mean in mixed units
# (1) a plain loop: batch means summed, divided by the dataset's size
UNITS_PLAIN = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    x = torch.randn(256, 5)
    y = x.sum(1, keepdim=True)
    train_loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.MSELoss()
    for epoch in range(3):
        epoch_loss = 0.0
        for xb, yb in train_loader:
            loss = criterion(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            epoch_loss += loss.item()
        print(epoch, epoch_loss / len(train_loader.dataset))  # HERE
"""

# (2) a function-based epoch: the loop counts samples itself
UNITS_FUNCTIONAL = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    def train_epoch(model, loader, opt):
        total, seen = 0.0, 0
        for images, labels in loader:
            logits = model(images)
            loss = F.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.detach()
            seen += len(labels)
        return float(total / seen)  # HERE

    torch.manual_seed(1)
    data = TensorDataset(torch.randn(200, 8), torch.randint(0, 4, (200,)))
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(2):
        print(train_epoch(model, DataLoader(data, batch_size=20, shuffle=True), opt))
"""

# (3) a class trainer: a sum-reduced loss averaged over the steps
UNITS_CLASS = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    class Trainer:
        def __init__(self, model):
            self.model = model
            self.crit = nn.L1Loss(reduction="sum")
            self.opt = torch.optim.SGD(model.parameters(), lr=0.001)

        def fit_epoch(self, loader):
            running, steps = 0.0, 0
            for x, y in loader:
                loss = self.crit(self.model(x), y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                running += loss.item()
                steps += 1
            return running / steps  # HERE

    torch.manual_seed(2)
    x = torch.randn(160, 3)
    t = Trainer(nn.Linear(3, 2))
    for epoch in range(2):
        print(t.fit_epoch(DataLoader(TensorDataset(x, x[:, :2] * 2), batch_size=16)))
"""

# (4) iterations drawn from a generator over the loader; the figure also multiplied by another loader's length
UNITS_GENERATOR = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    def batches(loader, n):
        i = 0
        while True:
            for b in loader:
                if i >= n:
                    return
                yield b
                i += 1

    torch.manual_seed(3)
    train = DataLoader(TensorDataset(torch.randn(300, 4), torch.randint(0, 2, (300,))), batch_size=25, shuffle=True)
    val = DataLoader(TensorDataset(torch.randn(100, 4), torch.randint(0, 2, (100,))), batch_size=25)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    run, n = 0.0, 0
    for it, (x, y) in enumerate(batches(train, 30)):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += y.size(0)
        run += loss.item()
        if (it + 1) % 10 == 0:
            print("train_loss", run / n * len(val))  # HERE
            run, n = 0.0, 0
"""


@pytest.mark.parametrize("src,total,denom,counts,factor", [
    (UNITS_PLAIN, "epoch_loss", "len(train_loader.dataset)", "samples", 1 / 32),
    (UNITS_FUNCTIONAL, "total", "seen", "samples", 1 / 20),
    (UNITS_CLASS, "running", "steps", "batches", 16.0),
    (UNITS_GENERATOR, "run", "n", "samples", 4 / 25)], ids=["plain_dataset_len", "functional_loop_count",
                                                            "class_sum_over_steps", "generator_other_loader"])
def test_a_running_mean_in_mixed_units(tmp_path, src, total, denom, counts, factor):
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "silent.reported_mean_units")
    assert (f.severity.value, f.category.value, f.line) == ("warning", "silent", _line(src))
    ev = f.evidence
    assert (ev["sum"], ev["denominator"], ev["denominator_counts"]) == (total, denom, counts)
    assert ev["factor"] == pytest.approx(factor, rel=1e-4)
    assert f.message.startswith(f"{total} sums ")
    assert f"the reported mean is {factor:.3g} times the mean of what was summed" in f.message


_UNITS_QUIET = {
    "means_over_batches": ("epoch_loss += loss.item()", "epoch_loss / len(train_loader)"),
    "sums_over_samples": ("epoch_loss += loss.item() * xb.size(0)", "epoch_loss / len(train_loader.dataset)"),
    "sums_with_a_size_name": ("bs = xb.shape[0]; epoch_loss += loss.item() * bs",
                              "epoch_loss / len(train_loader.dataset)"),
}


@pytest.mark.parametrize("add,div", list(_UNITS_QUIET.values()), ids=list(_UNITS_QUIET))
def test_running_means_in_one_unit_are_quiet(tmp_path, add, div):
    src = UNITS_PLAIN.replace("epoch_loss += loss.item()", add).replace(
        "epoch_loss / len(train_loader.dataset)", div)
    report, _ = _run(tmp_path, src)
    assert _codes(report, "silent.reported_mean_units") == []
    assert _codes(report, "data.mean_denominator") == []


def test_a_sum_reduced_loss_over_the_samples_is_quiet(tmp_path):
    src = UNITS_CLASS.replace("steps += 1", "steps += x.size(0)")
    report, _ = _run(tmp_path, src)
    assert _codes(report, "silent.reported_mean_units") == []
