"""Session 19: the "best" a training loop keeps in memory (`_ledger_step/_bestrecord.py`).

A running best is a comparison repeated at each evaluation; what it keeps must be the best seen.
`other.best_checkpoint_regressed` (variant never updated) when the record compared is never
assigned in the loop, so each evaluation that beats its initial value replaces the kept one;
`checkpoint.snapshot_aliased` (variant kept) when the kept "best model" is the model being trained.
Each bug is a script written as users write it (a validation loss that bottoms out early and
rises as the model memorises noisy labels), run under a discovering session; look-alikes are quiet.
"""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script

REGRESSED = "other.best_checkpoint_regressed"
ALIASED = "checkpoint.snapshot_aliased"

PRELUDE = """
    import copy
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    w = torch.randn(10, 1)
    x_train, x_val = torch.randn(48, 10), torch.randn(200, 10)
    y_train = (x_train @ w > 0).float().squeeze(1)
    y_val = (x_val @ w > 0).float().squeeze(1)
    flip = torch.rand(48) < 0.35
    y_train[flip] = 1 - y_train[flip]  # noisy training labels: the validation loss rises after epoch 1

    model = nn.Sequential(nn.Linear(10, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def train_epoch(model, opt):
        model.train()
        for i in range(0, 48, 12):
            opt.zero_grad()
            F.binary_cross_entropy_with_logits(model(x_train[i:i + 12]).squeeze(1), y_train[i:i + 12]).backward()
            opt.step()

    def evaluate(model):
        model.eval()
        with torch.no_grad():
            out = model(x_val).squeeze(1)
            loss = F.binary_cross_entropy_with_logits(out, y_val).item()
        model.train()
        return loss
"""


def _run(tmp_path, body):
    source = textwrap.dedent(PRELUDE) + textwrap.dedent(body)
    return run_script("prog.py", tmp_path, checks=None, source=source)[0], source


def _codes(report):
    return [(f.code, f.severity.value, f.line) for f in report.findings if f.severity.value != "info"]


# (1) the record compared and never updated: a plain loop keeping a deep copy of the weights
NEVER = """
    best_loss = float("inf")
    best_state = None
    for epoch in range(10):
        train_epoch(model, opt)
        val_loss = evaluate(model)
        if val_loss < best_loss:
            best_state = copy.deepcopy(model.state_dict())  # HERE
            best_epoch = epoch
    model.load_state_dict(best_state)
    print("restored epoch", best_epoch, "val", evaluate(model))
"""


def test_a_record_never_updated_keeps_the_last_evaluation(tmp_path):
    report, source = _run(tmp_path, NEVER)
    found = report.filter(code=REGRESSED)
    assert _codes(report) == [(REGRESSED, "warning", line_in(source, "# HERE", ending=True))]
    ev = found[0].evidence
    assert (ev["record"], ev["score"], ev["better"]) == ("best_loss", "val_loss", "lower")
    assert ev["kept_score"] > ev["best_score"] and ev["replacements_by_a_worse_score"] >= 3
    assert "never updated" in found[0].message


# (2) a variant: a trainer method keeps the best model object itself (higher is better), returns it
METHOD = """
    class Trainer:
        def __init__(self, model, opt):
            self.model, self.opt = model, opt

        def fit(self, epochs):
            best_score, best_model = -1.0, None
            for epoch in range(epochs):
                train_epoch(self.model, self.opt)
                score = -evaluate(self.model)
                if score > best_score:
                    best_model = copy.deepcopy(self.model)  # HERE
            return best_model

    best = Trainer(model, opt).fit(10)
    print("kept model val", evaluate(best))
"""


def test_a_trainer_method_whose_record_never_moves_is_found(tmp_path):
    report, source = _run(tmp_path, METHOD)
    assert _codes(report) == [(REGRESSED, "warning", line_in(source, "# HERE", ending=True))]


# (3) the kept best model is the live model: it follows every later step
ALIAS = """
    best_loss, best_model = float("inf"), model
    for epoch in range(10):
        train_epoch(model, opt)
        val_loss = evaluate(model)
        if val_loss < best_loss:
            best_loss = val_loss
            best_model = model  # HERE
    print("best model val", evaluate(best_model))
"""


def test_a_best_model_kept_by_reference_is_found(tmp_path):
    report, source = _run(tmp_path, ALIAS)
    assert _codes(report) == [(ALIASED, "warning", line_in(source, "# HERE", ending=True))]
    ev = report.filter(code=ALIASED)[0].evidence
    assert ev["rejected_evaluations_after"] >= 3 and ev["parameter_writes_since_selection"] > 0


# (4) a variant: the state_dict() kept by reference and written to disk after the loop (no load)
ALIAS_DICT = """
    import os, sys
    best = {"loss": float("inf")}
    best_weights = None
    for epoch in range(10):
        train_epoch(model, opt)
        val_loss = evaluate(model)
        if val_loss < best["loss"]:
            best["loss"] = val_loss
            best_weights = model.state_dict()  # HERE
    torch.save(best_weights, os.path.join(sys.argv[1], "best.pt"))
"""


def test_a_best_state_dict_kept_by_reference_and_saved_is_found(tmp_path):
    report, source = _run(tmp_path, ALIAS_DICT)
    assert _codes(report) == [(ALIASED, "warning", line_in(source, "# HERE", ending=True))]


# look-alikes: the fixed loops, early stopping, a reference kept while the model only improved
FIXED = [
    NEVER.replace("best_state = copy.deepcopy(model.state_dict())  # HERE",
                  "best_state = copy.deepcopy(model.state_dict())\n            best_loss = val_loss"),
    METHOD.replace("best_model = copy.deepcopy(self.model)  # HERE",
                   "best_model = copy.deepcopy(self.model)\n                    best_score = score"),
    ALIAS.replace("best_model = model  # HERE", "best_model = copy.deepcopy(model)"),
    ALIAS_DICT.replace("best_weights = model.state_dict()  # HERE",
                       "best_weights = {k: v.clone() for k, v in model.state_dict().items()}"),
    """
    best_loss, wait, best_state = float("inf"), 0, None
    for epoch in range(30):
        train_epoch(model, opt)
        val_loss = evaluate(model)
        if val_loss < best_loss - 1e-4:
            best_loss, wait = val_loss, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            wait += 1
            if wait >= 3:
                break
    model.load_state_dict(best_state)
    """,
    """
    import os, sys
    path = os.path.join(sys.argv[1], "best.pt")
    best_loss, best_model = float("inf"), model
    for epoch in range(10):
        train_epoch(model, opt)
        val_loss = evaluate(model)
        if val_loss < best_loss:
            best_loss = val_loss
            best_model = model
            torch.save(model.state_dict(), path)
    best_model.load_state_dict(torch.load(path))  # the saved best is read back before the report
    print(evaluate(best_model))
    """,
    """
    best_loss, best_model = float("inf"), model
    for epoch in range(2):  # the loss still falls: the last model is the best one
        train_epoch(model, opt)
        val_loss = evaluate(model)
        if val_loss < best_loss:
            best_loss = val_loss
            best_model = model
    print(evaluate(best_model))
    """,
]


def test_look_alikes_are_quiet(tmp_path):
    for body in FIXED:
        report, _ = _run(tmp_path, body)
        assert _codes(report) == [], body


# (5) the epoch chosen on the test loader, which is evaluated again to report the result
ON_TEST = """
    from torch.utils.data import DataLoader, TensorDataset

    train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=12, shuffle=True)
    test_loader = DataLoader(TensorDataset(x_val, y_val), batch_size=50)

    def fit(model, epochs):
        best_loss, best_wts = 10.0, copy.deepcopy(model.state_dict())
        for epoch in range(epochs):
            model.train()
            for xb, yb in train_loader:
                opt.zero_grad()
                F.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb).backward()
                opt.step()
            model.eval()
            running = 0.0
            for xb, yb in test_loader:
                running += F.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb).item() * len(xb)
            test_loss = running / len(test_loader.dataset)
            if test_loss < best_loss:  # HERE
                best_loss = test_loss
                best_wts = copy.deepcopy(model.state_dict())
        model.load_state_dict(best_wts)
        return model

    def report(model):
        model.eval()
        correct = 0
        with torch.no_grad():
            for xb, yb in test_loader:
                correct += ((model(xb).squeeze(1) > 0).float() == yb).sum().item()
        return correct / len(test_loader.dataset)

    model = fit(model, 8)
    print("test accuracy", report(model))
"""


def test_an_epoch_chosen_on_the_test_split_that_is_then_reported_is_found(tmp_path):
    report, source = _run(tmp_path, ON_TEST)
    found = report.filter(code="data.test_selected")
    assert [(f.severity.value, f.category.value, f.line) for f in found] == \
        [("warning", "data", line_in(source, "# HERE", ending=True))]
    ev = found[0].evidence
    assert (ev["score"], ev["summed_over"]) == ("test_loss", "test_loader")
    assert ev["selected_score"] < ev["last_score"] and ev["passes_over_it_after_selection"] >= 1


def test_a_choice_on_validation_with_the_test_reported_once_is_quiet(tmp_path):
    fixed = ON_TEST.replace("""    test_loader = DataLoader(TensorDataset(x_val, y_val), batch_size=50)""",
                            """    val_loader = DataLoader(TensorDataset(x_val[:100], y_val[:100]), batch_size=50)
    test_loader = DataLoader(TensorDataset(x_val[100:], y_val[100:]), batch_size=50)""")
    fixed = fixed.replace("for xb, yb in test_loader:\n                running",
                          "for xb, yb in val_loader:\n                running")
    fixed = fixed.replace("test_loss = running / len(test_loader.dataset)",
                          "test_loss = running / len(val_loader.dataset)")
    assert "val_loader:\n                running" in fixed
    report, _ = _run(tmp_path, fixed)
    assert report.filter(code="data.test_selected") == []
    # the best test score printed during training, never evaluated again: no second look at the split
    once = ON_TEST.replace('print("test accuracy", report(model))', 'print("best test loss seen")')
    report, _ = _run(tmp_path, once)
    assert report.filter(code="data.test_selected") == []



# (6) a variant: the score comes from a function given the test loader (early stopping on it), and the
# same loader reports the restored model
BY_CALL = """
    from torch.utils.data import DataLoader, TensorDataset

    def score(model, loader):
        model.eval()
        total, n = 0.0, 0
        with torch.no_grad():
            for xb, yb in loader:
                total += F.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb, reduction="sum").item()
                n += len(xb)
        return total / n

    train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=12, shuffle=True)
    test_loader = DataLoader(TensorDataset(x_val, y_val), batch_size=50)
    best, best_sd, bad = 1e9, None, 0
    for epoch in range(8):
        model.train()
        for xb, yb in train_loader:
            opt.zero_grad()
            F.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb).backward()
            opt.step()
        loss = score(model, test_loader)
        if loss < best:  # HERE
            best = loss
            best_sd = copy.deepcopy(model.state_dict())
            bad = 0
        else:
            bad += 1
    model.load_state_dict(best_sd)
    print("test loss", score(model, test_loader))
"""


def test_early_stopping_on_the_test_loader_through_a_function_is_found(tmp_path):
    report, source = _run(tmp_path, BY_CALL)
    found = report.filter(code="data.test_selected")
    assert [(f.severity.value, f.line) for f in found] == [("warning", line_in(source, "# HERE", ending=True))]
    assert found[0].evidence["summed_over"] == "test_loader"
