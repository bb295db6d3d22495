"""Issue 24 (severity from harm, quiet on correct code), each rule from both sides: the correct
pattern as users write it draws no warning, and the bug the rule is for is still found, with its
exact finding."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity


def _alarms(report, code):
    return [f for f in report.filter(code=code) if f.severity in (Severity.WARNING, Severity.ERROR)]


# ------------------------------------------------------------------ our own f_locals reads
def _gan_loop(keep=None):
    """A GAN loop in a function, with modules built inline (the session watches each as a new
    model, naming it from the caller's variables)."""
    torch.manual_seed(0)
    G, D = nn.Sequential(nn.Linear(2, 8), nn.Tanh()), nn.Sequential(nn.Linear(8, 1))
    od, og = torch.optim.Adam(D.parameters(), 1e-3), torch.optim.Adam(G.parameters(), 1e-3)
    real = torch.randn(16, 8)

    def train():
        kept = []
        for i in range(12):
            if i == 3:  # a look at D's confidence, through a module built inline
                with torch.no_grad():
                    print(f"D(real) = {nn.Sigmoid()(D(real)).mean().item():.3f}")
            for _ in range(2):
                od.zero_grad()
                d_loss = nn.ReLU()(1.0 - D(real)).mean() + nn.ReLU()(1.0 + D(G(torch.randn(16, 2)).detach())).mean()
                d_loss.backward()
                od.step()
            og.zero_grad()
            g_loss = -D(G(torch.randn(16, 2))).mean()  # lives until the next iteration rebinds it
            g_loss.backward()
            og.step()
            if keep is not None:
                kept.append(g_loss)  # BUG: every step's graph kept
    with torchtriage.watch([G, D], [od, og], discover=True, on_anomaly="record", report=False) as s:
        train()
    return s.report


def test_gan_losses_alive_until_the_next_iteration_with_inline_modules_are_quiet():
    # Naming the inline Sigmoid read the training function's f_locals: before Python 3.13 that
    # dict is cached on the frame and kept that step's losses (and graphs) alive for the loop.
    assert not _alarms(_gan_loop(), "silent.loss_graph_kept")


def test_gan_losses_kept_in_a_list_are_still_a_warning():
    f = _alarms(_gan_loop(keep=True), "silent.loss_graph_kept")[0]
    assert f.severity is Severity.WARNING and f.evidence["old_loss_graphs_alive"] >= 2


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="f_locals is a live proxy from 3.13")
def test_reading_a_training_functions_locals_does_not_keep_its_loss_alive():
    import weakref

    from torchtriage._frames import released_locals

    def train_step():
        loss = torch.ones(3, requires_grad=True).sum()
        assert released_locals(sys._getframe())["loss"] is loss  # naming a model discovered here
        ref = weakref.ref(loss)
        loss = None  # the next iteration rebinds it
        gone = ref() is None  # (`frame.f_locals` kept it in the frame's cached dict)
        return gone, loss

    assert train_step() == (True, None)


# ------------------------------------------------------------------ a loss computed inside forward
class Tagger(nn.Module):
    """A token classifier that computes its loss inside forward, as HF models do (`labels=`)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 16, padding_idx=0)
        self.out = nn.Linear(16, 3)

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.out(self.emb(input_ids))
        loss = F.cross_entropy(logits.view(-1, 3), labels.view(-1)) if labels is not None else None
        return loss, logits


def _batches(pad_label):
    """Batches of one shape whose padding differs (right-padded with id 0); the labels of the
    padding are `pad_label` (-100: ignored by the loss), and the tag 0 ("O") is frequent."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(4):
        ids = torch.randint(1, 20, (8, 10), generator=g)
        labels = torch.randint(0, 3, (8, 10), generator=g)
        labels[labels == 2] = 0
        lengths = torch.randint(4, 10, (8,), generator=g)
        mask = torch.arange(10)[None, :] < lengths[:, None]
        ids[~mask] = 0
        labels[~mask] = pad_label
        out.append({"input_ids": ids, "attention_mask": mask.long(), "labels": labels})
    return out


def _tagger_run(pad_label):
    torch.manual_seed(0)
    model = Tagger()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batches = _batches(pad_label)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        model.eval()
        with torch.no_grad():  # an evaluation before training, several batches of one shape
            for b in batches:
                model(**b)
        model.train()
        for _ in range(2):
            for b in batches:
                loss, _ = model(**b)
                loss.backward()
                opt.step()
                opt.zero_grad()
    return s.report


def test_ignored_labels_of_padding_in_a_loss_inside_forward_are_quiet():
    # The loss inside forward runs before the call returns: the step's recorded call is an
    # earlier batch, whose padding is not this batch's.
    assert not _alarms(_tagger_run(-100), "silent.pad_in_loss")


# ------------------------------------------------------------------ parameters no loss uses
class WithSpare(nn.Module):
    """A regressor that owns a head the loop never calls (built for another objective)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 1)
        self.spare = nn.Linear(4, 4)

    def forward(self, x):
        return self.body(x)


def _spare_run(lr, steps=40, only_spare=False):
    torch.manual_seed(0)
    model = WithSpare()
    params = model.spare.parameters() if only_spare else model.parameters()
    opt = torch.optim.SGD(params, lr=lr)
    x = torch.randn(64, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(steps):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    return s.report


def test_a_module_never_called_in_a_run_that_learns_is_info():
    (f,) = _spare_run(lr=0.05).filter(code="gradient.unused")
    assert (f.module, f.severity, f.evidence["run_kept_learning"]) == ("spare", Severity.INFO, True)
    assert f.evidence["loss_last"] < f.evidence["loss_first"]
    assert f.evidence["optimizer_trains_nothing_else"] is False


def test_a_module_never_called_in_a_run_that_does_not_learn_is_a_warning():
    (f,) = _spare_run(lr=0.0).filter(code="gradient.unused")
    assert (f.module, f.severity, f.evidence["run_kept_learning"]) == ("spare", Severity.WARNING, False)


def test_a_module_never_called_that_is_all_its_optimizer_holds_is_a_warning():
    (f,) = _spare_run(lr=0.05, only_spare=True).filter(code="gradient.unused")
    assert (f.module, f.severity, f.evidence["optimizer_trains_nothing_else"]) == ("spare", Severity.WARNING, True)


class FunctionalAttention(nn.Module):
    """`nn.MultiheadAttention` reads `out_proj`'s parameters without calling the module; the
    whole encoder runs under no_grad for its first updates (a frozen warm-up)."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 1)
        self.updates = 0

    def forward(self, x):
        with torch.set_grad_enabled(self.updates >= 3):
            h, _ = self.attn(x, x, x)
        return self.head(h.mean(1))


def test_parameters_used_functionally_and_reached_after_a_frozen_warmup_are_quiet():
    torch.manual_seed(0)
    model = FunctionalAttention()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(16, 5, 8), torch.randn(16, 1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(8):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
            model.updates += 1
    assert not [f for f in s.report.filter(category="gradient") if f.severity is not Severity.INFO]


# ------------------------------------------------------------------ a loss that falls to ~0
def _collapse_run(lr):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x = torch.randn(32, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])  # a small set a model fits exactly
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(25):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    return s.report


def test_a_loss_memorised_over_many_updates_is_info():
    (f,) = _collapse_run(lr=0.3).filter(code="silent.loss_collapse")
    assert f.severity is Severity.INFO and f.step > 5


def test_a_loss_that_collapses_within_a_few_updates_is_still_a_warning():
    from zoo import silent as z

    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        z.target_leaked_into_input(model, opt)
    (f,) = s.report.filter(code="silent.loss_collapse")
    assert (f.severity, f.step) == (Severity.WARNING, 3)


# ------------------------------------------------------------------ batches fetched in groups
def _ledger_run(source):
    import runpy
    import tempfile
    from pathlib import Path

    from torchtriage._session import Session

    path = Path(tempfile.mkdtemp()) / "loop.py"
    path.write_text(source)
    with Session(discover=True, on_anomaly="record", report=False, checks=["data_ledger"]) as s:
        runpy.run_path(str(path), run_name="__main__")
    return s.report


_GROUPED = (Path(__file__).parent / "zoo" / "ledger" / "clean_grouped_fetch.py").read_text()


_AHEAD = """
def ahead(loader):  # one batch fetched ahead of the loop (accelerate's DataLoaderShard)
    it = iter(loader)
    nxt = next(it)
    for b in it:
        yield nxt
        nxt = b
    yield nxt
"""


@pytest.mark.parametrize("one_ahead", [False, True])
def test_micro_batches_fetched_a_cycle_at_a_time_are_trained(one_ahead):
    source = _GROUPED.replace("accum = 4\n", "accum = 4\n" + _AHEAD).replace(
        "it = iter(train_loader)", "it = ahead(train_loader)") if one_ahead else _GROUPED
    assert not _alarms(_ledger_run(source), "data.coverage_lost")


def test_a_cycle_that_trains_one_of_its_fetched_batches_still_loses_coverage():
    bug = _GROUPED.replace("for xb, yb in batches:", "for xb, yb in batches[-1:]:  # BUG: the last only")
    (f,) = _alarms(_ledger_run(bug), "data.coverage_lost")
    assert (f.severity, f.evidence["lost_samples"], f.evidence["samples"]) == (Severity.WARNING, 576, 768)


# ------------------------------------------------------------------ next-token loss inside forward
class TinyLM(nn.Module):
    """nanoGPT's calling convention: `logits, loss = model(idx, targets)`."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(12, 16)
        self.head = nn.Linear(16, 12)

    def forward(self, idx, targets=None):
        logits = self.head(self.emb(idx))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, 12), targets.view(-1), ignore_index=-1)
        return logits, loss


def _lm_run(shift):
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randint(0, 12, (8, 9))
    x, y = (data[:, :-1], data[:, 1:]) if shift else (data[:, :-1], data[:, :-1])
    x, y = x.contiguous(), y.contiguous()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            _, loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


def test_shifted_targets_passed_to_the_model_are_quiet():
    # the targets argument is the loss's target, not a decoder's input to compare it with
    assert not _alarms(_lm_run(shift=True), "silent.labels_not_shifted")
