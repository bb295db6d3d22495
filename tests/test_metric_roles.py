"""Session 17 (metrics): a per-batch list averaged every pass but never emptied
(`_ledger/_unreset.py`, `silent.metric_never_reset`) and a scikit-learn metric given the
predictions as y_true (`_ledger/_metricroles.py`, `silent.metric_arguments_swapped`). Each bug is
written as users write it and asserts its exact finding; each look-alike is quiet."""

from __future__ import annotations

import textwrap

import pytest

from test_ledger import run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, source=textwrap.dedent(source))


def _line(source: str, tag: str = "# HERE") -> int:
    return next(i for i, line in enumerate(textwrap.dedent(source).splitlines(), 1) if line.rstrip().endswith(tag))


def _codes(report, code):
    return [f for f in report.findings if f.code == code]


# ---------------------------------------------------------------- a per-batch list never emptied
UNRESET = """
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    x = torch.randn(256, 6)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    INIT_OUTSIDE
    for epoch in range(4):
        INIT_INSIDE
        for xb, yb in loader:
            out = model(xb)
            loss = nn.functional.cross_entropy(out, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            KEEP
        acc = MEAN  # HERE
        print(epoch, acc)
"""
_KEEPS = {
    "append_accuracy": ("accs.append((out.argmax(1) == yb).float().mean().item())", "np.mean(accs)"),
    "plus_list_loss": ("accs += [loss.item()]", "sum(accs) / len(accs)"),
}


def _unreset(keep: str, mean: str, inside: bool) -> str:
    src = UNRESET.replace("KEEP", keep).replace("MEAN", mean)
    return src.replace("INIT_OUTSIDE", "pass" if inside else "accs = []").replace(
        "INIT_INSIDE", "accs = []" if inside else "pass")


@pytest.mark.parametrize("keep,mean", list(_KEEPS.values()), ids=list(_KEEPS))
def test_a_per_batch_list_never_emptied(tmp_path, keep, mean):
    src = _unreset(keep, mean, inside=False)
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "silent.metric_never_reset")
    assert (f.severity.value, f.category.value, f.line) == ("warning", "silent", _line(src))
    ev = f.evidence
    assert ev["collection"] == "accs" and ev["pass_batches"] == 8 and ev["values_kept"] % 8 == 0
    assert ev["values_kept"] > 8 and ev["earlier_values"] == ev["values_kept"] - 8
    assert abs(ev["mean_reported"] - ev["mean_of_this_pass"]) >= 0.01 * abs(ev["mean_of_this_pass"])
    assert ev["created_at_line"] == _line(src, "accs = []")


@pytest.mark.parametrize("keep,mean", list(_KEEPS.values()), ids=list(_KEEPS))
def test_a_per_batch_list_emptied_each_epoch_is_quiet(tmp_path, keep, mean):
    report, _ = _run(tmp_path, _unreset(keep, mean, inside=True))
    assert _codes(report, "silent.metric_never_reset") == []


# a history kept over the whole run and averaged once after training: meant to cover the run
HISTORY = """
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    x, y = torch.randn(128, 4), torch.randn(128, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    history = []
    for epoch in range(3):
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            history.append(loss.item())
        print(epoch, np.mean(history[-len(loader):]))
    print("run mean", np.mean(history))
"""


def test_a_run_history_averaged_after_training_is_quiet(tmp_path):
    report, _ = _run(tmp_path, HISTORY)
    assert _codes(report, "silent.metric_never_reset") == []


# ---------------------------------------------------------------- sklearn metric arguments swapped
SWAPPED = """
    import numpy as np
    import torch
    import torch.nn as nn
    from sklearn import metrics
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(1)
    x = torch.randn(600, 5)
    y = torch.where(x[:, 0] > 0.8, 2, torch.where(x[:, 1] > 0.3, 1, 0))
    train = DataLoader(TensorDataset(x[:450], y[:450]), batch_size=30, shuffle=True)
    val = DataLoader(TensorDataset(x[450:], y[450:]), batch_size=50)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def evaluate():
        preds, golds = [], []
        with torch.no_grad():
            for xb, yb in val:
                logits = model(xb)
                PRED
                golds.extend(yb.tolist())
        CALL
        return score

    for epoch in range(2):
        for xb, yb in train:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(epoch, evaluate())
"""
_PREDS = {
    "argmax_weighted_f1": ("preds.extend(torch.argmax(logits, dim=1).tolist())",
                           "score = metrics.f1_score(\n            preds,  # HERE\n"
                           "            golds, average='weighted')",
                           "f1_score"),
    "max_indices_precision": ("_, p = logits.max(1)\n                preds += p.tolist()",
                              "score = metrics.precision_score(preds, golds, average='macro', zero_division=0)  # HERE",
                              "precision_score"),
}


def _swapped(pred: str, call: str) -> str:
    return SWAPPED.replace("PRED", pred).replace("CALL", call)


@pytest.mark.parametrize("pred,call,metric", list(_PREDS.values()), ids=list(_PREDS))
def test_predictions_given_as_y_true(tmp_path, pred, call, metric):
    src = _swapped(pred, call)
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "silent.metric_arguments_swapped")
    assert (f.severity.value, f.category.value, f.line, f.op) == ("warning", "silent", _line(src), metric)
    ev = f.evidence
    assert (ev["metric"], ev["y_true_given"], ev["y_pred_given"], ev["rows"]) == (metric, "preds", "golds", 150)
    assert abs(ev["value_reported"] - ev["value_in_order"]) >= 0.01


_QUIET_CALLS = {
    # the arguments in order
    "in_order": "score = metrics.f1_score(golds, preds, average='weighted')",
    # swapped, but the metric is symmetric in them: the number is right
    "symmetric_micro": "score = metrics.f1_score(preds, golds, average='micro')",
    "symmetric_accuracy": "score = metrics.accuracy_score(preds, golds)",
    # named arguments
    "keywords": "score = metrics.f1_score(y_pred=preds, y_true=golds, average='weighted')",
}


@pytest.mark.parametrize("call", list(_QUIET_CALLS.values()), ids=list(_QUIET_CALLS))
def test_metric_arguments_in_order_or_symmetric_are_quiet(tmp_path, call):
    report, _ = _run(tmp_path, _swapped(_PREDS["argmax_weighted_f1"][0], call))
    assert _codes(report, "silent.metric_arguments_swapped") == []
