"""The evidence rules of issue 13, each from both sides: the bug as users write it is still found
(exact finding), and the correct pattern that used to draw a false alarm is quiet."""

from __future__ import annotations

import copy
import io
import pickle

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import torchtriage
from torchtriage import Severity


def _codes(report):
    return sorted((f.code, f.severity.value) for f in report)


def _watch(models, opts, loop, **kw):
    with torchtriage.watch(models, opts, on_anomaly="record", report=False, **kw) as s:
        loop()
    return s.report


def _net():
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))


# ------------------------------------------------------------------ train() mode under no_grad
def _train_then(after):
    torch.manual_seed(0)
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))

    def loop():
        for _ in range(2):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        after(model, x, y)
    return _watch(model, opt, loop)


def test_evaluation_loss_in_train_mode_warns_with_what_it_fed():
    def evaluate(model, x, y):
        with torch.no_grad():  # model.eval() forgotten
            val_loss = F.cross_entropy(model(x), y).item()
        return val_loss
    f = _train_then(evaluate).filter(code="silent.train_mode_while_evaluating")[0]
    assert (f.severity, f.step, f.evidence["outputs_fed"]) == (Severity.WARNING, 2, "loss cross_entropy")
    assert f.evidence["no_grad_forwards_in_train_mode"] == 1


def test_accuracy_in_train_mode_warns():
    def accuracy(model, x, y):
        with torch.no_grad():
            preds = model(x).argmax(1)
        return (preds == y).float().mean().item()
    f = _train_then(accuracy).filter(code="silent.train_mode_while_evaluating")[0]
    assert f.evidence["outputs_fed"] == "metric argmax"


def test_sample_grid_in_train_mode_is_quiet():
    def grid(model, x, y):
        with torch.no_grad():  # a DCGAN-style grid: the output is only drawn
            fake = model(x).detach().cpu()
        lo, hi = float(fake.min()), float(fake.max())
        return fake.clamp(lo, hi).sub(lo).div(hi - lo).mul(255).to(torch.uint8)
    assert not _train_then(grid)


def test_target_network_in_train_mode_feeding_the_training_loss_is_quiet():
    torch.manual_seed(0)
    online, target = _net(), _net()
    target.load_state_dict(online.state_dict())
    opt = torch.optim.SGD(online.parameters(), lr=0.1)
    x = torch.randn(16, 6)

    def loop():
        for _ in range(3):
            with torch.no_grad():  # BYOL / mean-teacher targets: train() mode on purpose
                t = target(x + 0.1 * torch.randn_like(x))
            loss = F.mse_loss(online(x), t)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not _watch([online, target], opt, loop)


# ------------------------------------------------------------------ PAD reads the labels
class _MaskedLM(nn.Module):
    def __init__(self, vocab=20):
        super().__init__()
        self.emb = nn.Embedding(vocab, 16)
        self.head = nn.Linear(16, vocab)

    def forward(self, input_ids, attention_mask=None):
        return self.head(self.emb(input_ids) * attention_mask[..., None])


def _mlm_run(labels_of):
    torch.manual_seed(0)
    model = _MaskedLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(4, 20, (4, 10))
    ids[:, 7:] = 0  # PAD id 0 at the end of each row
    labels = labels_of(ids)

    def loop():
        for _ in range(2):
            mask = (ids != 0).long()  # a mask computed from the ids
            logits = model(input_ids=ids, attention_mask=mask)
            loss = F.cross_entropy(logits.view(-1, 20), labels.view(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return _watch(model, opt, loop)


def test_pad_labels_at_masked_positions_are_an_error():
    report = _mlm_run(lambda ids: ids.clone())  # labels = ids: PAD targets counted
    f = report.filter(code="silent.pad_in_loss")[0]
    assert (f.severity, f.evidence["pad_targets_counted"]) == (Severity.ERROR, "12/40")


def test_mlm_random_replacement_with_pad_in_inputs_is_quiet():
    def labels_of(ids):
        labels = torch.full_like(ids, -100)
        labels[:, :3] = ids[:, :3]  # the masked positions keep their original token
        ids[0, 1] = 0  # the collator's random replacement drew the PAD id at a labelled position
        return labels
    assert not _mlm_run(labels_of).filter(code="silent.pad_in_loss")


# ------------------------------------------------------------------ graphs kept across steps
def _regression(keep):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randn(8, 1)

    def loop():
        kept = []
        for i in range(5):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            keep(kept, i, loss)
    return _watch(model, opt, loop)


def test_accumulated_loss_graphs_are_a_warning():
    """Their number grows with the steps: memory wasted (the numbers are right), so a warning."""
    f = _regression(lambda kept, i, loss: kept.append(loss)).filter(code="silent.loss_graph_kept")[0]
    assert (f.severity, f.step, f.evidence["from_steps"]) == (Severity.WARNING, 3, [0, 1])


def test_gan_loss_built_after_both_backwards_lives_one_iteration_quietly():
    from corpus import examples_dcgan

    # errD = errD_real + errD_fake after both backward calls, alive until the next iteration;
    # watch() without optimizers: each of the three backward calls of an iteration is a step.
    models, _, train = examples_dcgan.build()
    with torchtriage.watch(models, on_anomaly="record", report=False) as s:
        train()
    assert s.steps_seen >= 6
    assert not s.report.filter(code="silent.loss_graph_kept")


# ------------------------------------------------------------------ strangers
def test_reentrant_checkpoint_inputs_are_no_strangers():
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    model = nn.ModuleDict({"inp": nn.Linear(4, 8), "block": block, "out": nn.Linear(8, 1)})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            h = self.m["inp"](x)
            h = checkpoint(self.m["block"], h, use_reentrant=True)
            return self.m["out"](h)
    net = Net()

    def loop():
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(net(torch.randn(4, 4)), torch.randn(4, 1)).backward()
            opt.step()
    assert _codes(_watch(net, opt, loop)) == []


def test_a_stranger_leaf_is_still_reported():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loop():
        for _ in range(2):
            scale = torch.ones(1, requires_grad=True)  # re-created each step, in no optimizer
            opt.zero_grad()
            F.mse_loss(model(torch.randn(4, 4)) * scale, torch.randn(4, 1)).backward()
            opt.step()
    # Issue 11: a leaf no optimizer holds, made outside any model, is at most info (a saliency
    # input is one); re-created each step, its .grad does not pile up
    assert ("gradient.leaf_not_registered", "info") in _codes(_watch(model, opt, loop))


def test_raw_tensor_held_by_an_optimizer_is_no_stranger_and_no_stale_optimizer():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    log_alpha = torch.zeros(1, requires_grad=True)  # SAC's entropy temperature
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    a_opt = torch.optim.Adam([log_alpha], lr=1e-3)

    def loop():
        for _ in range(3):
            x = torch.randn(4, 4)
            loss = F.mse_loss(model(x), torch.randn(4, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            alpha_loss = -(log_alpha.exp() * (model(x).detach() + 1.0)).mean()
            a_opt.zero_grad()
            alpha_loss.backward()
            a_opt.step()
    assert _codes(_watch(model, [opt, a_opt], loop)) == []


# ------------------------------------------------------------------ the model still saves
def test_whole_model_pickles_and_deep_copies_under_watch():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loop():
        for _ in range(5):  # past the analysis window: the session keeps root hooks only
            opt.zero_grad()
            F.mse_loss(model(torch.randn(4, 4)), torch.randn(4, 1)).backward()
            opt.step()
        buf = io.BytesIO()
        torch.save(model, buf)  # pytorch/examples super_resolution saves the whole model
        copy.deepcopy(model)(torch.randn(2, 4))
        return buf
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        buf = loop()
        hooked = len(model._forward_pre_hooks)
    assert s.report.ok
    buf.seek(0)
    restored = torch.load(buf, weights_only=False)
    assert torch.equal(restored(torch.ones(1, 4)), model(torch.ones(1, 4)))
    assert hooked >= 1 and pickle.loads(pickle.dumps(model)) is not None
