"""Session 18 (d3): an evaluation pass that builds an average and reports the last batch's value
(`_ledger/_lastlogged.py`, `silent.last_batch_reported`). Each bug is a script written as users
write it, run under a discovering session, with its exact finding; each look-alike is quiet."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script

CODE = "silent.last_batch_reported"


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=None, source=textwrap.dedent(source))[0]


def _line(source: str, tag: str = "# HERE") -> int:
    return line_in(source, tag, ending=True)


def _found(report):
    return [f for f in report.findings if f.code == CODE]


# (1) a trainer class: the validation method averages the metric and logs the last batch's
TRAINER = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)

    class Logger:
        def __init__(self):
            self.rows = []
        def log_validation(self, step, metric, loss):
            self.rows.append((step, float(metric), float(loss)))

    class Trainer:
        def __init__(self, model, train_loader, val_loader):
            self.model, self.train_loader, self.val_loader = model, train_loader, val_loader
            self.opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            self.loss = nn.MSELoss()
            self.logger = Logger()
            self.step = 0

        def metric(self, pred, y):
            return (pred - y).abs().mean()

        def train_epoch(self):
            self.model.train()
            for x, y in self.train_loader:
                self.opt.zero_grad()
                self.loss(self.model(x), y).backward()
                self.opt.step()
                self.step += 1

        def validate(self):
            self.model.eval()
            metric_val, loss_val = 0.0, 0.0
            with torch.no_grad():
                for x, y in self.val_loader:
                    pred = self.model(x)
                    loss = self.loss(pred, y)
                    metric = self.metric(pred, y)
                    loss_val += loss.item()
                    metric_val += metric.item()
            metric_val /= len(self.val_loader)
            loss_val /= len(self.val_loader)
            self.logger.log_validation(self.step, metric, loss)  # HERE
            return metric_val

    x = torch.randn(240, 6)
    y = x @ torch.randn(6, 1) + 0.3 * torch.randn(240, 1) * (1 + torch.arange(240.0)[:, None] / 60)
    train = DataLoader(TensorDataset(x[:160], y[:160]), batch_size=16, shuffle=True)
    val = DataLoader(TensorDataset(x[160:], y[160:]), batch_size=16)
    trainer = Trainer(nn.Linear(6, 1), train, val)
    best = float("inf")
    for epoch in range(4):
        trainer.train_epoch()
        best = min(best, trainer.validate())
"""


def test_a_validation_that_logs_the_last_batch_metric_is_found(tmp_path):
    report = _run(tmp_path, TRAINER)
    found = _found(report)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert (f.severity.value, f.category.value, f.line) == ("warning", "silent", _line(TRAINER))
    ev = f.evidence
    assert (ev["reported_name"], ev["sum_name"], ev["reported_by"]) == ("metric", "metric_val", "log_validation")
    assert ev["pass_batches"] == 5
    assert abs(ev["last_batch_value"] - ev["pass_mean"]) >= 0.05 * abs(ev["pass_mean"])
    assert "last of the pass's 5 batches" in f.message


# (2) a plain function that returns the last batch's loss as the validation loss
RETURNED = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(1)

    def evaluate(model, loader):
        model.eval()
        total = 0
        with torch.no_grad():
            for xb, yb in loader:
                val_loss = F.cross_entropy(model(xb), yb)
                total += val_loss.item()
        print(f"mean {total / len(loader):.4f}")
        return val_loss  # HERE

    x = torch.randn(300, 8)
    yy = (x[:, 0] + 0.5 * torch.randn(300) > 0).long()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(x[:200], yy[:200]), batch_size=20, shuffle=True)
    val = DataLoader(TensorDataset(x[200:], yy[200:]), batch_size=24)
    for epoch in range(3):
        model.train()
        for xb, yb in train:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        v = evaluate(model, val)
"""


def test_a_validation_loss_returned_from_the_last_batch_is_found(tmp_path):
    report = _run(tmp_path, RETURNED)
    found = _found(report)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    assert found[0].line == _line(RETURNED)
    assert found[0].evidence["reported_by"] == "return"


def test_the_average_logged_is_quiet(tmp_path):
    fixed = TRAINER.replace("self.logger.log_validation(self.step, metric, loss)",
                            "self.logger.log_validation(self.step, metric_val, loss_val)")
    assert _found(_run(tmp_path, fixed)) == []


# look-alikes: the last training loss printed after a training epoch (steps ran during the pass),
# the last batch shown beside the average, a per-batch value with no sum after the loop
LOOKALIKES = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(2)
    x = torch.randn(200, 5)
    y = x.sum(1, keepdim=True) + torch.randn(200, 1)
    model = nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    train = DataLoader(TensorDataset(x[:150], y[:150]), batch_size=10, shuffle=True)
    val = DataLoader(TensorDataset(x[150:], y[150:]), batch_size=10)

    def train_epoch():
        running = 0.0
        for xb, yb in train:
            opt.zero_grad()
            loss = F.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            running += loss.item()
        print(f"last batch loss {loss.item():.4f}")
        return running / len(train)

    def validate():
        total = 0.0
        with torch.no_grad():
            for xb, yb in val:
                loss = F.mse_loss(model(xb), yb)
                total += loss.item()
        print(f"val {total / len(val):.4f} (last batch {loss.item():.4f})")
        return total / len(val)

    for epoch in range(3):
        train_epoch()
        validate()
"""


def test_look_alikes_are_quiet(tmp_path):
    assert _found(_run(tmp_path, LOOKALIKES)) == []


# (3) session 19: the same pass over loaders that are not DataLoaders. A loader class of the
# project's own (a list of batches per pass), the sum divided after the loop, the last batch logged.
OWN_LOADER = """
    import torch
    import torch.nn as nn

    torch.manual_seed(3)

    class Batches:
        def __init__(self, x, y, size, shuffle):
            self.x, self.y, self.size, self.shuffle = x, y, size, shuffle
        def __iter__(self):
            order = torch.randperm(len(self.x)) if self.shuffle else torch.arange(len(self.x))
            return iter([(self.x[order[i:i + self.size]], self.y[order[i:i + self.size]])
                         for i in range(0, len(self.x), self.size)])
        def __len__(self):
            return (len(self.x) + self.size - 1) // self.size

    class Board:
        def __init__(self):
            self.points = []
        def add_scalar(self, tag, value, step):
            self.points.append((tag, float(value), step))

    def run_validation(model, loader, board, step):
        model.eval()
        err_sum = 0.0
        with torch.no_grad():
            for xb, yb in loader:
                err = (model(xb) - yb).abs().mean()
                err_sum += err.item()
        err_sum /= len(loader)
        board.add_scalar("val/mae", err, step)  # HERE
        model.train()
        return err_sum

    x = torch.randn(260, 6)
    y = x @ torch.randn(6, 1) + 0.3 * torch.randn(260, 1) * (1 + torch.arange(260.0)[:, None] / 50)
    train, val = Batches(x[:180], y[:180], 20, True), Batches(x[180:], y[180:], 16, False)
    model = nn.Linear(6, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    board = Board()
    step = 0
    for epoch in range(3):
        for xb, yb in train:
            opt.zero_grad()
            nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
            step += 1
        run_validation(model, val, board, step)
"""


def test_a_validation_over_its_own_loader_class_that_logs_the_last_batch_is_found(tmp_path):
    report = _run(tmp_path, OWN_LOADER)
    found = _found(report)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert (f.severity.value, f.line) == ("warning", _line(OWN_LOADER))
    ev = f.evidence
    assert (ev["reported_name"], ev["sum_name"], ev["reported_by"], ev["pass_batches"]) == \
        ("err", "err_sum", "add_scalar", 5)
    assert abs(ev["last_batch_value"] - ev["pass_mean"]) >= 0.05 * abs(ev["pass_mean"])


# a variant: a generator of batches, the sum not divided, the last batch's loss returned
GENERATOR = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(4)

    def chunks(x, y, n):
        for i in range(0, len(x), n):
            yield x[i:i + n], y[i:i + n]

    def evaluate(model, x, y):
        model.eval()
        total = 0.0
        with torch.no_grad():
            for xb, yb in chunks(x, y, 25):
                loss = F.cross_entropy(model(xb), yb)
                total += loss.item()
        model.train()
        print("mean", total / 4)
        return loss  # HERE

    x = torch.randn(300, 8)
    labels = (x[:, 0] + 0.8 * torch.randn(300) > 0).long()
    labels[280:] = 1 - labels[280:]  # the last validation rows are the hard ones
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for xb, yb in chunks(x[:200], labels[:200], 20):
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        evaluate(model, x[200:], labels[200:])
"""


def test_a_generator_pass_returning_the_last_batch_loss_is_found(tmp_path):
    report = _run(tmp_path, GENERATOR)
    found = _found(report)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    assert (found[0].line, found[0].evidence["reported_by"], found[0].evidence["pass_batches"]) == \
        (_line(GENERATOR), "return", 4)


def test_own_loader_reporting_the_average_is_quiet(tmp_path):
    fixed = OWN_LOADER.replace('board.add_scalar("val/mae", err, step)', 'board.add_scalar("val/mae", err_sum, step)')
    assert _found(_run(tmp_path, fixed)) == []
    fixed = GENERATOR.replace("return loss  # HERE", "return total / 4")
    assert _found(_run(tmp_path, fixed)) == []
