"""Silent bugs: each is reproduced by a tiny real model with its exact finding; the five clean
reference loops produce no finding at all."""

from __future__ import annotations

import contextlib
import re
import sys
from collections import OrderedDict

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Category, Severity, Stage
from zoo import silent as z

ZOO = z.__file__


def _watch(model, loop, *, lr=0.05, opt_cls=torch.optim.SGD, checks=("silent",), **kw):
    opt = opt_cls(model.parameters(), lr=lr)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False,
                           checks=list(checks) if checks else "default") as s:
        loop(model, opt, **kw)
    assert torch._C._len_torch_function_stack() == 0, "the loss region was left on the mode stack"
    return s.report


def _one(report, code):
    found = report.filter(code=code)
    assert len(found) == 1, [f.code for f in report.findings]
    f = found[0]
    assert f.category is (Category.DATA if code.startswith("data.") else Category.MEMORY
                          if code == "silent.loss_graph_kept" else Category.GRADIENT
                          if code == "silent.zero_grad_missing" else Category.SILENT)
    return f


def _line_of(text: str) -> int:
    with open(ZOO) as fh:
        for i, line in enumerate(fh, 1):
            if text in line:
                return i
    raise AssertionError(text)


# ---------------------------------------------------------------------------------- 1. broadcasting
def test_seed_broadcast_public_check():
    r = torchtriage.check_loss_broadcast(torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([1.0, 2.0, 3.0]))
    f = r.primary
    assert f.code == "silent.loss_broadcast" and f.stage is Stage.LOSS and f.severity is Severity.ERROR
    assert f.message == ("prediction [3, 1] and target [3] broadcast to [3, 3] in mse: "
                         "every prediction is compared with every target")
    assert (f.evidence["broadcast_shape"], f.evidence["loss_computed"], f.evidence["loss_aligned"]) == \
        ((3, 3), "1.333333", "0.000000")
    assert f.file == __file__


@pytest.mark.parametrize("pred,target", [
    ((8, 4), (4,)),       # bias / per-channel scale
    ((8, 4), (8, 1)),     # per-sample weight
    ((8, 1), (8, 1)),     # aligned
    ((2, 3, 5), (1, 3, 1)),  # mask
])
def test_legitimate_broadcasting_is_quiet(pred, target):
    assert not torchtriage.check_loss_broadcast(torch.randn(pred), torch.randn(target))


def test_hand_written_loss_broadcast_in_session():
    report = _watch(z.RegressionMLP(), z.broadcast_hand_written_loss)
    f = _one(report, "silent.loss_broadcast")
    assert (f.step, f.stage, f.op, f.count) == (0, Stage.LOSS, "sub", 3)
    assert (f.file, f.line) == (ZOO, _line_of("loss = ((model(x) - y) ** 2).mean()"))
    assert f.evidence["prediction_shape"] == (8, 1) and f.evidence["target_shape"] == (8,)
    assert f.evidence["broadcast_shape"] == (8, 8)
    # the aligned loss is a real replay, not the computed one
    assert f.evidence["loss_computed"] != f.evidence["loss_aligned"] != "n/a"


def test_builtin_loss_broadcast_in_session():
    with pytest.warns(UserWarning, match="target size"):  # PyTorch's own warning, kept
        report = _watch(z.RegressionMLP(), z.broadcast_builtin_loss)
    f = _one(report, "silent.loss_broadcast")
    assert (f.step, f.op, f.line) == (0, "mse_loss", _line_of("loss = F.mse_loss(model(x), y)"))
    assert f.message.startswith("prediction [8, 1] and target [8] broadcast to [8, 8] in mse_loss")
    assert f.evidence["loss_computed"] != f.evidence["loss_aligned"] != "n/a"


def test_numerics_unchanged_by_the_loss_region():
    def run(watched):
        torch.manual_seed(3)
        m = z.RegressionMLP()
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        if watched:
            with torchtriage.watch(m, opt, checks=["silent"], on_anomaly="record", report=False):
                z.broadcast_hand_written_loss(m, opt, steps=4)
        else:
            z.broadcast_hand_written_loss(m, opt, steps=4)
        return [p.detach().clone() for p in m.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(run(False), run(True)))


# ---------------------------------------------------------------------------------- 2. loss-input semantics
@pytest.mark.parametrize("model,loss,targets,features,code,message", [
    (z.DoubleSoftmaxClassifier, "cross_entropy", lambda: torch.randint(0, 4, (16,)), 6,
     "silent.probabilities_to_cross_entropy",
     "cross_entropy received probabilities (softmax output), "
     "but it applies log_softmax itself: softmax is applied twice"),
    (z.SigmoidBeforeLogitsLoss, "binary_cross_entropy_with_logits", lambda: torch.randint(0, 2, (16,)).float(), 5,
     "silent.sigmoid_before_logits_loss",
     "binary_cross_entropy_with_logits received probabilities (sigmoid output), but it applies sigmoid itself"),
    (z.Classifier, "nll_loss", lambda: torch.randint(0, 4, (16,)), 6,
     "silent.nll_without_log_softmax", "nll_loss received inputs that are not log-probabilities"),
    (z.LogisticRegression, "binary_cross_entropy_with_logits", lambda: torch.randint(0, 3, (16,)).float(), 5,
     "silent.class_indices_to_binary_loss",
     "binary_cross_entropy_with_logits received targets outside [0, 1]: class indices given to a binary loss"),
    (z.Classifier, "mse_loss", lambda: torch.randint(0, 4, (16, 1)).float(), 6,
     "silent.regression_on_class_labels", "mse_loss compares a 4-way output with integer class labels"),
    (z.Classifier, "cross_entropy", lambda: (torch.rand(16, 4) > 0.5).float(), 6,
     "silent.targets_not_distributions",
     "cross_entropy received probability targets whose rows do not sum to 1 (multi-hot labels?)"),
])
@pytest.mark.filterwarnings("ignore:Using a target size")  # PyTorch's own warning for the (N, 4) vs (N, 1) case
def test_loss_input_semantics_in_session(model, loss, targets, features, code, message):
    report = _watch(model(), z.classify, loss=loss, targets=targets(), features=features)
    f = _one(report, code)
    assert (f.message, f.step, f.stage, f.op) == (message, 0, Stage.LOSS, loss)
    assert (f.file, f.line) == (ZOO, _line_of("loss_value = getattr(F, loss)(model(x), targets)"))
    assert len(report.findings) == 1


def test_probabilities_finding_names_the_module_that_made_them():
    # The input's producer is traced back through views to the module whose output it is (one
    # replay of the model call with its graph); a softmax in the loop's own code keeps the loss.
    x, y = torch.randn(16, 6), torch.randint(0, 4, (16,))

    def run(model, make_input):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with torchtriage.watch(model, opt, checks=["silent"], on_anomaly="record", report=False) as s:
            for _ in range(2):
                loss = nn.CrossEntropyLoss()(make_input(model), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        return _one(s.report, "silent.probabilities_to_cross_entropy")

    stack = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4), nn.Softmax(dim=1))
    outer = nn.Sequential(OrderedDict(net=stack))
    f = run(outer, lambda m: m(x).view(16, 4))
    assert (f.module, f.evidence["made_by"], f.line) == ("net.3", "softmax (net.3)", sys._getframe().f_lineno - 9)
    f = run(z.DoubleSoftmaxClassifier(), lambda m: m(x))
    assert (f.module, f.evidence["made_by"]) == ("", "softmax (<root>)")  # the model's own forward
    assert f.evidence["made_at"] == f"silent.py:{_line_of('return torch.softmax(super().forward(x), dim=1)')}"
    f = run(z.Classifier(), lambda m: torch.softmax(m(x), dim=1))
    assert (f.module, "made_by" in f.evidence) == ("CrossEntropyLoss", False)
    # the replay changes no number of the run (a dropout's RNG included)
    trained = []
    for watched in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.5), nn.Linear(16, 4), nn.Softmax(dim=1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with (torchtriage.watch(model, opt, checks=["silent"], on_anomaly="record", report=False)
              if watched else contextlib.nullcontext()):
            for _ in range(3):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        trained.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*trained))


def test_loss_input_checks_public_and_value_based():
    probs = torch.softmax(torch.randn(8, 5), dim=1)  # no grad_fn: judged from values
    assert torchtriage.check_loss_inputs(probs, torch.randint(0, 5, (8,))).primary.evidence["max_row_sum_error"] < 1e-3
    assert not torchtriage.check_loss_inputs(torch.randn(8, 5), torch.randint(0, 5, (8,)))
    assert not torchtriage.check_loss_inputs(torch.log_softmax(torch.randn(8, 5), 1), torch.randint(0, 5, (8,)),
                                             loss="nll_loss")
    soft = torch.softmax(torch.randn(8, 5), 1)  # label-smoothing-like soft targets are fine
    assert not torchtriage.check_loss_inputs(torch.randn(8, 5), soft)
    with pytest.raises(TypeError, match="check_loss_inputs takes two tensors, got list and Tensor"):
        torchtriage.check_loss_inputs([1.0], torch.zeros(1))


def test_raw_logits_that_happen_to_lie_in_0_1_are_not_called_sigmoid_outputs():
    """A discriminator's raw logits (a plain Linear) may all lie in [0, 1] early on: the graph
    says no sigmoid made them, so binary_cross_entropy_with_logits gets no finding."""
    d = nn.Linear(8, 1)
    with torch.no_grad():
        d.weight.fill_(0.01)
        d.bias.fill_(0.5)
    x, y = torch.rand(16, 8), torch.ones(16, 1)
    logits = d(x).detach()
    assert float(logits.min()) >= 0 and float(logits.max()) <= 1
    with torchtriage.watch(d, checks=["silent"], on_anomaly="record", report=False) as s:
        F.binary_cross_entropy_with_logits(d(x), y).backward()
        F.binary_cross_entropy_with_logits(torch.sigmoid(d(x)).view(16), y.view(16)).backward()  # the bug
        bug_line = sys._getframe().f_lineno - 1
    (f,) = s.report.findings
    assert (f.code, f.evidence["input_producer"], f.step, f.stage, f.line) == (
        "silent.sigmoid_before_logits_loss", "SigmoidBackward0", 1, Stage.LOSS, bug_line)


# ---------------------------------------------------------------------------------- 3. sequences
def test_unshifted_labels_in_session():
    report = _watch(z.TinyLM(), z.lm_unshifted_labels)
    f = _one(report, "silent.labels_not_shifted")
    assert f.message == ("cross_entropy targets equal the input tokens at the same positions: "
                         "labels are not shifted for next-token prediction")
    loss_line = _line_of("loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))")
    assert (f.step, f.stage, f.line) == (0, Stage.LOSS, loss_line)
    assert f.evidence["positions_equal_to_input"] == "96/96"


def test_pad_counted_in_loss_in_session():
    report = _watch(z.TinyLM(), z.lm_pad_in_loss)
    f = _one(report, "silent.pad_in_loss")
    assert f.message == "PAD tokens (0) are counted in the loss" and f.evidence["pad_id"] == 0
    assert f.severity is Severity.WARNING and f.step == 0
    assert len(report.findings) == 1  # shifted labels: no shift finding


def test_public_token_shift():
    ids = torch.randint(1, 50, (2, 8))
    assert torchtriage.check_token_shift(ids, ids.clone()).primary.code == "silent.labels_not_shifted"
    assert not torchtriage.check_token_shift(ids[:, :-1], ids[:, 1:])
    with pytest.raises(TypeError, match="labels must be an integer tensor of token ids, got torch.float32"):
        torchtriage.check_token_shift(ids, ids.float())


def test_check_causal():
    ids = torch.randint(0, 32, (2, 10))
    assert not torchtriage.check_causal(z.TinyLM(), ids)
    f = torchtriage.check_causal(z.LeakyAttentionLM(), ids).primary
    assert f.code == "silent.attention_sees_future" and f.stage is Stage.FORWARD
    assert f.message == ("outputs at position 0 changed when only tokens from position 5 on changed: "
                         "the model sees the future")
    with pytest.raises(ValueError, match=r"position=9 is outside 0..8"):
        torchtriage.check_causal(z.TinyLM(), ids, position=9)


def test_check_causal_names_the_op_where_the_future_enters():
    ids = torch.randint(0, 32, (2, 10))
    f = torchtriage.check_causal(z.LeakyAttentionLM(), ids).primary
    # the scores are not masked: the softmax over the keys is the first op whose outputs at the
    # earlier positions change while its inputs there do not
    assert (f.file, f.line, f.module, f.op) == (ZOO, _line_of("att = torch.softmax(scores, dim=-1)"), "", "softmax")
    assert f.evidence["leaks_in"] == "softmax (<root>)"
    f = torchtriage.check_causal(z.EncoderLM(causal=False), ids[:, :8] % 20).primary
    assert (f.file, f.module, f.op) == (__file__, "enc.layers.0.self_attn", "EncoderLM")


def test_check_causal_tolerance_is_the_outputs_rounding():
    # a fixed atol would be below one bfloat16 step and far above a float32 leak of 1e-5
    ids = torch.randint(0, 32, (2, 16), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    assert not torchtriage.check_causal(z.TinyLM().to(torch.bfloat16), ids)
    assert torchtriage.check_causal(z.LeakyAttentionLM().to(torch.bfloat16), ids).primary is not None


def test_check_causal_needs_an_output_per_position():
    class LastOnly(nn.Module):  # minGPT's forward without targets: the logits of the last position
        def __init__(self):
            super().__init__()
            self.lm = z.TinyLM()

        def forward(self, ids):
            return self.lm(ids)[:, [-1]]

    with pytest.raises(ValueError, match=r"output \[2, 1, 32\] has no position axis of length 10"):
        torchtriage.check_causal(LastOnly(), torch.randint(0, 32, (2, 10)))


def test_check_padding():
    ids, mask = z.padded_tokens()
    assert not torchtriage.check_padding(z.TinyLM(causal=False), ids, 0, mask)
    model = z.PadLeakingLM()
    model.train()
    f = torchtriage.check_padding(model, ids, 0, mask).primary
    assert f.code == "silent.padding_leaks"
    assert (f.message
            == "outputs at real tokens changed when only PAD (0) positions changed: padding leaks into the model")
    assert model.training  # mode restored
    with pytest.raises(ValueError, match="input_ids hold no pad_id=99"):
        torchtriage.check_padding(model, ids, 99)


# ---------------------------------------------------------------------------------- 4. loop mistakes
class _Seq2Seq(nn.Module):
    def __init__(self, vocab=40, d=16):
        super().__init__()
        self.src_emb, self.tgt_emb = nn.Embedding(vocab, d), nn.Embedding(vocab, d)
        self.enc, self.dec = nn.GRU(d, d, batch_first=True), nn.GRU(d, d, batch_first=True)
        self.out = nn.Linear(d, vocab)

    def forward(self, src, tgt_in=None, decoder_input_ids=None, attention_mask=None):
        _, h = self.enc(self.src_emb(src))
        y, _ = self.dec(self.tgt_emb(tgt_in if tgt_in is not None else decoder_input_ids), h)
        return self.out(y)


def _correction_data():
    """Error correction: the source is the target with 5% of its tokens corrupted."""
    g = torch.Generator().manual_seed(0)
    tgt = torch.randint(3, 40, (8, 12), generator=g)
    src = torch.where(torch.rand(tgt.shape, generator=g) < 0.05, torch.randint(3, 40, tgt.shape, generator=g), tgt)
    return src, tgt, torch.cat([torch.ones(8, 1, dtype=torch.long), tgt[:, :-1]], 1)


@pytest.mark.parametrize("call", ["positional", "keyword", "decoder_reads_target", "lm_with_positional_mask"])
def test_labels_not_shifted_with_two_token_inputs(call):
    """A correction / denoising seq2seq's target nearly equals its source, correctly: the decoder
    reads the shifted target. Compared with what the decoder reads, an unshifted target is caught."""
    src, tgt, tgt_in = _correction_data()
    model = _Seq2Seq()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with torchtriage.watch(model, opt, checks=["silent"], on_anomaly="record", report=False) as s:
        for _ in range(2):
            opt.zero_grad()
            if call == "positional":
                logits = model(src, tgt_in)
            elif call == "keyword":
                logits = model(src, decoder_input_ids=tgt_in)
            elif call == "decoder_reads_target":
                logits = model(src, tgt)
            else:  # an LM-style call with a 0/1 mask as the second argument; labels unshifted
                logits = model(tgt, None, tgt, torch.ones_like(tgt))
            F.cross_entropy(logits.reshape(-1, 40), tgt.reshape(-1)).backward()
            opt.step()
    codes = [f.code for f in s.report]
    if call in ("positional", "keyword"):
        assert codes == []
    else:
        assert codes == ["silent.labels_not_shifted"]


def test_zero_grad_missing():
    report = _watch(z.RegressionMLP(), z.no_zero_grad)
    f = _one(report, "silent.zero_grad_missing")
    assert (f.step, f.stage, f.parameter, f.count) == (1, Stage.BACKWARD, "net.0.weight", 2)
    assert f.file == ZOO and f.op == "backward"
    assert f.message == "gradients accumulate across steps: nothing zeroed them after the optimizer step"


def test_gradient_accumulation_is_not_missing_zero_grad():
    def loop(model, opt, steps=3):
        x, y = z.regression_data()
        for _ in range(steps):
            for micro in range(2):  # accumulate 2 micro-batches, then step and zero
                F.mse_loss(model(x[micro::2]).squeeze(-1), y[micro::2]).backward()
            opt.step()
            opt.zero_grad(set_to_none=False)

    assert not _watch(z.RegressionMLP(), loop)


def test_zero_grad_missing_under_accumulation_is_caught():
    def loop(model, opt, steps=3):
        x, y = z.regression_data()
        for _ in range(steps):
            for micro in range(2):  # accumulates 2 micro-batches, but never zeroes
                F.mse_loss(model(x[micro::2]).squeeze(-1), y[micro::2]).backward()
            opt.step()

    f = _one(_watch(z.RegressionMLP(), loop), "silent.zero_grad_missing")
    assert (f.step, f.parameter, f.count) == (1, "net.0.weight", 2)


def test_dcgan_update_order_is_not_missing_zero_grad():
    """The G step's backward adds into D's grads after D stepped; netD.zero_grad() clears them
    before D's next backward, so D never steps on them."""
    G, D = nn.Sequential(nn.Linear(2, 4), nn.Tanh()), nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
    od, og = torch.optim.Adam(D.parameters(), 1e-3), torch.optim.Adam(G.parameters(), 1e-3)
    real = torch.randn(8, 4)
    with torchtriage.watch([G, D], [od, og], checks=["silent"], on_anomaly="record", report=False) as s:
        for _ in range(3):
            D.zero_grad()
            F.binary_cross_entropy(D(real).view(-1), torch.ones(8)).backward()
            fake = G(torch.randn(8, 2))
            F.binary_cross_entropy(D(fake.detach()).view(-1), torch.zeros(8)).backward()
            od.step()
            G.zero_grad()
            F.binary_cross_entropy(D(fake).view(-1), torch.ones(8)).backward()
            og.step()
    assert not s.report, [f.code for f in s.report]


def test_dcgan_without_discriminator_zero_grad_is_caught():
    G, D = nn.Sequential(nn.Linear(2, 4), nn.Tanh()), nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
    od, og = torch.optim.Adam(D.parameters(), 1e-3), torch.optim.Adam(G.parameters(), 1e-3)
    real = torch.randn(8, 4)
    with torchtriage.watch([G, D], [od, og], checks=["silent"], on_anomaly="record", report=False) as s:
        for _ in range(3):
            F.binary_cross_entropy(D(real).view(-1), torch.ones(8)).backward()  # D never zeroed
            fake = G(torch.randn(8, 2))
            F.binary_cross_entropy(D(fake.detach()).view(-1), torch.zeros(8)).backward()
            od.step()
            G.zero_grad()
            F.binary_cross_entropy(D(fake).view(-1), torch.ones(8)).backward()
            og.step()
    f = _one(s.report, "silent.zero_grad_missing")
    assert (f.step, f.parameter) == (1, "0.weight")


def test_loss_graph_kept_across_steps():
    report = _watch(z.RegressionMLP(), z.loss_graph_kept)
    f = _one(report, "silent.loss_graph_kept")
    assert (f.step, f.severity) == (3, Severity.WARNING)
    assert f.evidence["from_steps"] == [0, 1]
    assert "a smaller batch will not fix it" in f.cause
    # the line that keeps the graphs, not the line that made the loss
    total_line = _line_of("total += loss  # keeps every step's graph alive")
    assert (f.file, f.line) == (ZOO, total_line)
    assert f.evidence["loss_made_at"] == f"silent.py:{total_line - 3}"


@pytest.mark.parametrize("keep,holder", [
    ("total = total + loss", True),
    ("total = 0.9 * total + 0.1 * loss", True),
    ("kept.append(loss)", False),  # no torch op holds them: the line that made the loss
])
def test_loss_graph_kept_names_the_accumulating_line(keep, holder):
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    src = ("def loop(model, opt, x, y):\n    total, kept = torch.zeros(()), []\n    for _ in range(5):\n"
           "        opt.zero_grad()\n        loss = F.mse_loss(model(x), y)\n        (loss / 2).backward()\n"
           f"        opt.step()\n        {keep}\n")
    scope = {"torch": torch, "F": F}
    exec(compile(src, __file__ + "-loop.py", "exec"), scope)  # a file of its own: lines 5 and 8
    with torchtriage.watch(model, opt, checks=["silent"], on_anomaly="record", report=False) as s:
        scope["loop"](model, opt, x, y)
    f = _one(s.report, "silent.loss_graph_kept")
    assert (f.file, f.line) == (__file__ + "-loop.py", 8 if holder else 5)
    assert ("loss_made_at" in f.evidence) is holder


def test_eval_mode_while_training():
    report = _watch(z.SmallCNN(), z.eval_mode_while_training)
    f = _one(report, "silent.eval_mode_while_training")
    assert (f.step, f.stage, f.module, f.severity) == (0, Stage.FORWARD, "", Severity.WARNING)
    assert f.message == "model is trained while in eval() mode"
    assert f.evidence["modules_affected"] == ["features.1 (BatchNorm2d)", "drop (Dropout p=0.2)"]


def _probe_model(head_dropout):
    backbone = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2)).requires_grad_(False)
    head = nn.Sequential(nn.Dropout(0.5), nn.Linear(16, 3)) if head_dropout else nn.Linear(16, 3)
    return nn.Sequential(OrderedDict(backbone=backbone, head=head))


@pytest.mark.parametrize("head_dropout", [False, True])
def test_eval_mode_with_frozen_stochastic_backbone(head_dropout):
    """Linear probing: eval() is right for a frozen backbone's batch norm and dropout, wrong
    for dropout in the trained head."""
    model = _probe_model(head_dropout)
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    with torchtriage.watch(model, opt, checks=["silent"], on_anomaly="record", report=False) as s:
        model.eval()
        for _ in range(2):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    if not head_dropout:
        assert not s.report, [f.code for f in s.report]
    else:
        f = _one(s.report, "silent.eval_mode_while_training")
        assert f.evidence["modules_affected"] == ["head.0 (Dropout p=0.5)"]


def test_train_mode_while_evaluating():
    report = _watch(z.SmallCNN(), z.train_mode_while_evaluating)
    f = _one(report, "silent.train_mode_while_evaluating")
    assert (f.step, f.stage, f.line) == (2, Stage.FORWARD, _line_of("model(x).argmax(1)"))
    assert f.message == "model is evaluated while in train() mode"


def test_target_leak_and_loss_collapse():
    report = _watch(nn.Linear(4, 1), z.target_leaked_into_input, lr=0.5)
    leak = _one(report, "data.target_in_input")  # the label leaking into the inputs: a data fault
    assert (leak.step, leak.stage, leak.evidence["matching_column"]) == (0, Stage.DATA, 3)
    assert leak.category is Category.DATA
    assert leak.message == "the loss target equals input column 3 of the model"
    collapse = _one(report, "silent.loss_collapse")
    assert collapse.severity is Severity.WARNING and collapse.step == 3
    assert collapse.message == "the loss fell to about 0 within 3 steps"


@pytest.mark.parametrize("values", [[5.0, 0.001, 5.2, 4.9, 5.1, 5.0], [5.0, 2.0, 0.0001, 0.00001, -0.02, 0.00001]],
                         ids=["touches_zero_once", "signed_loss"])
def test_loss_touching_zero_is_not_a_collapse(values):
    """Several networks on one step clock (a GAN's G loss near 0 on one step) or a signed
    objective (a WGAN critic) pass through ~0 without collapsing."""
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 4)
    with torchtriage.watch(model, opt, checks=["silent"], on_anomaly="record", report=False) as s:
        for v in values:
            opt.zero_grad()
            (model(x).mean() * 1e-9 + v).backward()
            opt.step()
    assert not s.report.filter(code="silent.loss_collapse")


def test_check_training_loop_public():
    model = z.RegressionMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = z.regression_data()

    def step(i):
        F.mse_loss(model(x).squeeze(-1), y).backward()
        opt.step()

    report = torchtriage.check_training_loop(step, model=model, optimizer=opt, steps=3)
    assert [f.code for f in report.findings] == ["silent.zero_grad_missing"]
    with pytest.raises(ValueError, match="steps must be a positive int, got 0"):
        torchtriage.check_training_loop(step, model=model, steps=0)


# ---------------------------------------------------------------------------------- 5. overflow
def test_exp_overflow_public_seed_and_margin():
    f = torchtriage.check_exp_overflow(torch.tensor([1000.0, 1001.0])).primary
    assert ((f.code, f.evidence["direct_all_finite"], f.evidence["stable_sum"])
            == ("silent.exp_overflow", False, "1.000000"))
    near = torchtriage.check_exp_overflow(torch.tensor([[80.0, 1.0]])).primary  # finite, 8.7 below the limit
    assert near.severity is Severity.WARNING and near.evidence["exp_overflowed"] is False
    assert near.message == "exp input reaches 80.0 in float32, 8.03 below the overflow limit 88.72"
    assert not torchtriage.check_exp_overflow(torch.tensor([[10.0, 1.0]]))
    assert (torchtriage.check_exp_overflow(torch.tensor([[9.0, 1.0]], dtype=torch.float16)).primary.evidence["limit"]
            == 11.09)


def test_hand_written_softmax_near_overflow_in_session():
    report = _watch(z.HandWrittenSoftmaxNearOverflow(), z.near_overflow_softmax)
    f = _one(report, "silent.exp_overflow")
    assert (f.step, f.stage, f.op, f.severity) == (0, Stage.FORWARD, "exp", Severity.WARNING)
    assert 68 < f.evidence["x_max"] < 74 and f.evidence["consumer"] == "Div"
    assert re.fullmatch(r"exp input reaches \d+\.\d+ in float32, \d+\.\d+ below the overflow limit 88\.72", f.message)


# ---------------------------------------------------------------------------------- clean loops
@pytest.mark.parametrize("model,loop,kw", [
    (z.RegressionMLP, z.clean_mlp_regression, {}),
    (z.Classifier, z.clean_classifier, {}),
    (z.TinyLM, z.clean_causal_lm, {}),
    (z.SmallCNN, z.clean_cnn_batchnorm, {}),
    (z.Classifier, z.clean_mixed_precision, {}),
], ids=["mlp_regression", "classifier", "causal_lm", "cnn_batchnorm", "mixed_precision"])
def test_clean_reference_loops_produce_no_finding(model, loop, kw):
    report = _watch(model(), loop, checks=None, **kw)
    assert report.findings == (), [f"{f.code}: {f.message}" for f in report.findings]


def test_clean_causal_lm_passes_the_probes():
    ids, mask = z.padded_tokens()
    lm = z.TinyLM()
    assert not torchtriage.check_causal(lm, ids)
    assert not torchtriage.check_padding(lm, ids, 0, mask)
    labels = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    assert not torchtriage.check_token_shift(ids[:, :-1], labels)


def test_session_cleans_up_the_region_on_exception():
    model = z.RegressionMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(KeyError):
        with torchtriage.watch(model, opt, checks=["silent"], on_anomaly="record", report=False):
            model(torch.randn(4, 4))  # region entered here
            raise KeyError("user error in the loss code")
    assert torch._C._len_torch_function_stack() == 0


def test_catalogue_languages_match():
    from torchtriage._catalogue import catalogue, fields_of

    cat = catalogue()
    keys = [k for k in cat["en"] if k.startswith(("silent.", "lab."))]
    for k in keys:
        assert k in cat["zh"], k
        assert fields_of(cat["en"][k]) == fields_of(cat["zh"][k]), k


def test_token_tagging_with_a_frequent_tag_is_not_pad():
    """NER-style tags: "O" (0) dominates and ends most rows, but sits under varied input tokens."""
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Embedding(32, 8), nn.Linear(8, 3)

        def forward(self, ids):
            return self.head(self.emb(ids))

    def loop(model, opt, steps=2):
        g = torch.Generator().manual_seed(8)
        ids = torch.randint(1, 32, (8, 12), generator=g)
        tags = (torch.rand(8, 12, generator=g) < 0.2).long() * torch.randint(1, 3, (8, 12), generator=g)
        tags[:, -3:] = 0
        for _ in range(steps):
            opt.zero_grad()
            F.cross_entropy(model(ids).reshape(-1, 3), tags.reshape(-1)).backward()
            opt.step()

    assert not _watch(Tagger(), loop)


@pytest.mark.parametrize("loss,target", [
    ("cross_entropy", lambda: torch.randint(0, 4, (16,))),
    ("cross_entropy", lambda: torch.softmax(torch.randn(16, 4), 1)),
    ("nll_loss", lambda: torch.randint(0, 4, (16,))),
])
def test_non_finite_loss_inputs_draw_no_semantic_verdict(loss, target):
    # NaN logits: every comparison is false, so a value judge would see "probabilities" or "not
    # log-probabilities"; the NaN is the numerical check's finding, not a meaning of the data
    logits = torch.full((16, 4), float("nan"))
    report = torchtriage.check_loss_inputs(logits, target(), loss=loss)
    assert [f.code for f in report.findings] == []
    logits[0, 0] = 0.25  # still non-finite elsewhere
    assert torchtriage.check_loss_inputs(logits, target(), loss=loss).findings == ()


def test_a_verdict_on_the_targets_stands_beside_non_finite_logits():
    # the regression-on-labels evidence is the targets' values, which are finite
    logits = torch.full((16, 4), float("nan"))
    report = torchtriage.check_loss_inputs(logits, torch.randint(0, 4, (16, 1)).float(), loss="mse_loss")
    assert [f.code for f in report.findings] == ["silent.regression_on_class_labels"]
