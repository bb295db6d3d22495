"""Session 11 (sil): a pass metric weighs every row once (`_ledger/_batchmeans.py`), integer data
scaled by its own type's maximum (`_silent/_intscale.py`), evaluation through another method
than forward (`_silent/_sidecall.py`), a non-finite value made from host data
(`_nonfinite/_trace.py` lift). Each bug is a script written as users write it, run under a
discovering session (what `torchtriage run` does), with its exact finding; each look-alike is
quiet."""

from __future__ import annotations

import textwrap

import pytest

from _lines import line_in
from test_ledger import alarms, run_script

ALL = None  # run_script's "default" checks


def _run(tmp_path, source, checks=ALL):
    return run_script("prog.py", tmp_path, checks=checks, source=textwrap.dedent(source))


def _line(source: str) -> int:
    return line_in(source, ending=True)


def _codes(report, code):
    return [f for f in report.findings if f.code == code]


# ---------------------------------------------------------------- mean of per-batch ratios
EVAL = """
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    for i in range(0, 64, 16):
        loss = nn.functional.cross_entropy(model(x[i:i + 16]), y[i:i + 16])
        opt.zero_grad()
        loss.backward()
        opt.step()
    test = DataLoader(TensorDataset(torch.randn(N, 6), torch.randint(0, 3, (N,))), batch_size=64)
    model.eval()
    accs, losses, correct, seen = [], [], 0, 0
    with torch.no_grad():
        for data, target in test:
            logits = model(data)
            pred = logits.argmax(dim=1)
            losses.append(nn.functional.cross_entropy(logits, target).item())
            correct += (pred == target).sum().item()
            seen += pred.size(0)
            accs += [(pred == target).sum().item() / pred.size(0)]  # HERE
    acc = np.mean(accs)
    pooled = correct / seen
    loss_mean = np.mean(losses)
"""


def test_per_batch_accuracies_averaged_over_a_pass_with_a_small_last_batch(tmp_path):
    src = EVAL.replace("N, 6", "130, 6").replace("(N,)", "(130,)")
    report, ns = _run(tmp_path, src, checks=("data_ledger",))
    [f] = _codes(report, "silent.mean_of_batch_ratios")
    assert (f.severity.value, f.category.value, f.line) == ("warning", "silent", _line(src))
    ev = f.evidence
    assert (ev["collection"], ev["batch_sizes"], ev["samples"], ev["averaged_at_line"]) == \
        ("accs", [64, 64, 2], 130, _line(src) + 1)
    assert ev["mean_of_batches"] == round(float(ns["acc"]), 6)
    assert ev["mean_over_samples"] == round(ns["pooled"], 6)
    assert abs(ev["mean_of_batches"] - ev["mean_over_samples"]) >= 0.01 * ev["mean_over_samples"]
    assert f.message.startswith("accs keeps one ratio per batch ((pred == target).sum().item() / pred.size(0)) "
                                f"and line {_line(src) + 1} averages them over the 3 batches: batches of 2 to 64 "
                                "samples weigh the same")


@pytest.mark.parametrize("variant", ["equal_batches", "pooled", "loss_items"])
def test_pass_means_that_weigh_every_row_once_are_quiet(tmp_path, variant):
    src = EVAL.replace("N, 6", "130, 6").replace("(N,)", "(130,)")
    if variant == "equal_batches":  # the same code over batches of one size: every row weighs the same
        src = EVAL.replace("N, 6", "128, 6").replace("(N,)", "(128,)")
    elif variant == "pooled":  # the fix: count, then divide once
        src = src.replace("accs += [(pred == target).sum().item() / pred.size(0)]", "accs += [0.0]")
    elif variant == "loss_items":  # a mean of batch losses (no ratio written per batch): not judged
        src = src.replace("accs += [(pred == target).sum().item() / pred.size(0)]", "accs = losses")
    report, _ = _run(tmp_path, src, checks=("data_ledger",))
    assert _codes(report, "silent.mean_of_batch_ratios") == []
    assert alarms(report) == []


# ---------------------------------------------------------------- integer data scale
SCALE = """
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    images = [(torch.rand(3, 8, 8) * MAXV).round().to(DTYPE) for _ in range(8)]
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(4):
        batch = []
        for img in images[2 * step:2 * step + 2]:
            x = img.to(dtype=torch.float32)
            x = x / DIV  # HERE
            batch.append(x * 2 - 1)
        loss = model(torch.stack(batch)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def _scale(maxv, dtype, div):
    return SCALE.replace("MAXV", str(maxv)).replace("DTYPE", dtype).replace("DIV", str(div))


def test_16_bit_data_divided_by_the_8_bit_maximum(tmp_path):
    src = _scale(65535, "torch.uint16", 255)
    report, ns = _run(tmp_path, src)
    [f] = _codes(report, "data.int_scaled_as_narrower")
    assert (f.severity.value, f.category.value, f.line, f.step) == ("warning", "data", _line(src), 0)
    ev = f.evidence
    top = int(ns["images"][0].double().max())
    assert (ev["dtype"], ev["divisor"], ev["dtype_max"], ev["data_max"]) == ("uint16", 255, 65535, top)
    assert ev["result_max"] == round(top / 255, 4) and ev["elements"] == 192
    assert f.message == (f"uint16 data divided by 255, the maximum of 8-bit data: its values reach {top} (its type "
                         f"holds up to 65535), so the result reaches {top / 255:.3g} instead of staying in [0, 1]")


@pytest.mark.parametrize("maxv,dtype,div", [(255, "torch.uint8", 255), (65535, "torch.uint16", 65535),
                                            (255, "torch.uint16", 255), (65535, "torch.int32", 65535)],
                         ids=["uint8_by_255", "uint16_by_its_max", "uint16_holding_8_bit_values", "int32_16_bit"])
def test_integer_data_divided_by_its_own_range_is_quiet(tmp_path, maxv, dtype, div):
    report, _ = _run(tmp_path, _scale(maxv, dtype, div))
    assert _codes(report, "data.int_scaled_as_narrower") == []
    assert alarms(report) == []


# ---------------------------------------------------------------- evaluation through another method
GENERATE = """
    import torch
    import torch.nn as nn

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3))
            self.head = nn.Linear(16, 4)

        def forward(self, x, y):
            return nn.functional.cross_entropy(self.head(self.encoder(x)), y)

        def generate(self, x):
            return self.head(self.encoder(x)).argmax(-1)

    torch.manual_seed(0)
    model = Seq2Seq()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    accs = []
    for epoch in range(3):
        model.train()
        for i in range(0, 32, 8):
            loss = model(x[i:i + 8], y[i:i + 8])
            opt.zero_grad()
            loss.backward()
            opt.step()
        EVAL_MODE
        with torch.no_grad():
            pred = model.generate(x)  # HERE
        accs.append((pred == y).float().mean().item())
"""


def test_generate_under_no_grad_in_train_mode_is_an_evaluation_with_dropout_on(tmp_path):
    src = GENERATE.replace("EVAL_MODE", "pass")
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "silent.train_mode_while_evaluating")
    assert (f.severity.value, f.line) == ("warning", _line(src))
    assert f.evidence["outputs_fed"] == "metric argmax"
    assert f.evidence["modules_affected"] == ["encoder.2 (Dropout p=0.3)"]
    assert f.message == "model is evaluated while in train() mode"


@pytest.mark.parametrize("variant", ["eval_mode", "features_for_a_target"])
def test_side_calls_in_eval_mode_or_feeding_no_metric_are_quiet(tmp_path, variant):
    if variant == "eval_mode":  # the fix
        src = GENERATE.replace("EVAL_MODE", "model.eval()")
    else:  # a no-grad train-mode pass whose output is a regression target (no metric, no evaluation loss)
        src = GENERATE.replace("EVAL_MODE", "pass").replace(
            "pred = model.generate(x)  # HERE", "target = model.encoder(x) * 0.5").replace(
            "accs.append((pred == y).float().mean().item())", "accs.append(target.sum().item())")
    report, _ = _run(tmp_path, src)
    assert _codes(report, "silent.train_mode_while_evaluating") == []
    assert alarms(report) == []


# ---------------------------------------------------------------- non-finite host data
HOST = """
    import numpy as np
    import torch
    import torch.nn as nn

    class BalancedLoss(nn.Module):
        def __init__(self, counts):
            super().__init__()
            self.counts = counts

        def forward(self, logits, y):
            with np.errstate(divide="ignore", invalid="ignore"):
                w = self.counts.sum() / self.counts
                w = w / w.sum()
            weight = torch.tensor(w, dtype=torch.float32)  # HERE
            return (nn.functional.cross_entropy(logits, y, reduction="none") * weight[y]).sum()

    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    criterion = BalancedLoss(np.array(COUNTS, dtype=np.float64))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
        loss = criterion(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_nan_class_weights_computed_in_numpy_are_located_where_they_become_a_tensor(tmp_path):
    src = HOST.replace("COUNTS", "[5.0, 3.0, 0.0]")
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "numerical.nonfinite_host_value")
    assert (f.severity.value, f.line, f.step, f.op) == ("error", _line(src), 0, "aten::lift_fresh")
    assert (f.evidence["nan"], f.evidence["+inf"], f.evidence["-inf"]) == (1, 0, 0)  # 8 / [5, 3, 0] / its sum
    assert f.message.startswith("NaN entered the step from host data: aten::lift_fresh (torch.tensor / as_tensor / "
                                "from_numpy)")
    assert f.message.endswith("made a tensor already holding 1 NaN and 0 Inf of 3 values (step 0)")


def test_finite_host_weights_are_quiet(tmp_path):
    report, _ = _run(tmp_path, HOST.replace("COUNTS", "[5.0, 3.0, 2.0]"))
    assert _codes(report, "numerical.nonfinite_host_value") == []
    assert alarms(report) == []
