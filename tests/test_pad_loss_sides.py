"""Padding counted in a token loss (`silent.pad_in_loss`), whichever side the rows are padded on
and whether the loss is `cross_entropy` or `nll_loss` on log-probabilities; a model that reads its
whole input (a correction encoder) is not told its labels are unshifted. Look-alikes stay quiet."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from _lines import line_in
from torchtriage import Severity
from torchtriage._session import Session

PAD = 0


_line = line_in


def _run(model, loop):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with Session(model, opt, on_anomaly="record", report=False, checks=["silent"]) as s:
        loop(model, opt)
    return s.report


def _rows(g, n=8, t=16, vocab=30, left=True, lo=3, hi=7):
    ids = torch.full((n, t), PAD, dtype=torch.long)
    for i in range(n):
        k = int(torch.randint(lo, hi, (1,), generator=g))
        tok = torch.randint(4, vocab, (k,), generator=g)
        if left:
            ids[i, t - k:] = tok
        else:
            ids[i, :k] = tok
    return ids


# ---------------------------------------------- 1. a correction encoder, nll_loss, left padding
class Corrector(nn.Module):
    def __init__(self, vocab=30, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 1)
        self.out = nn.Linear(d, vocab)

    def forward(self, ids, mask):
        h = self.enc(self.emb(ids), src_key_padding_mask=mask == 0)
        return torch.log_softmax(self.out(h), -1)


def _correct(model, opt, ignore=None):
    g = torch.Generator().manual_seed(0)
    crit = nn.NLLLoss() if ignore is None else nn.NLLLoss(ignore_index=ignore)
    for _ in range(3):
        clean = _rows(g)
        noisy = clean.clone()
        noisy[(torch.rand(clean.shape, generator=g) < 0.15) & (clean != PAD)] = 5
        mask = (noisy != PAD).long()
        loss = crit(model(noisy, mask).transpose(1, 2), clean)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_correction_encoder_left_padding_nll():
    torch.manual_seed(0)
    r = _run(Corrector(), _correct)
    assert not r.filter(code="silent.labels_not_shifted"), [f.code for f in r.findings]  # it reads the whole input
    (f,) = r.filter(code="silent.pad_in_loss")
    assert f.severity is Severity.WARNING and f.op == "nll_loss"
    assert f.line == _line(_correct, "loss = crit(")
    assert f.evidence["pad_id"] == PAD and f.evidence["rows_starting_with_pad"] == 1.0
    assert f.evidence["share_of_target_tokens"] > 0.5


def test_correction_encoder_with_ignore_index_is_quiet():
    torch.manual_seed(0)
    r = _run(Corrector(), lambda m, o: _correct(m, o, ignore=PAD))
    assert not r.filter(code="silent.pad_in_loss") and not r.filter(code="silent.labels_not_shifted")


# --------------------------------------------- 2. a causal GRU LM, cross_entropy, left padding
class GruLM(nn.Module):
    def __init__(self, vocab=30, d=16):
        super().__init__()
        self.emb, self.rnn, self.head = nn.Embedding(vocab, d), nn.GRU(d, d, batch_first=True), nn.Linear(d, vocab)

    def forward(self, ids):
        return self.head(self.rnn(self.emb(ids))[0])


def _lm(model, opt, *, pad_label=PAD):
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        ids = _rows(g, t=20)
        labels = ids[:, 1:].clone()
        labels[ids[:, 1:] == PAD] = pad_label
        logits = model(ids)[:, :-1]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_causal_lm_left_padding_cross_entropy():
    torch.manual_seed(0)
    r = _run(GruLM(), _lm)
    (f,) = r.filter(code="silent.pad_in_loss")
    assert f.severity is Severity.WARNING and f.line == _line(_lm, "loss = F.cross_entropy(")
    assert f.evidence["rows_starting_with_pad"] == 1.0


def test_causal_lm_pad_labels_set_to_ignore_index_is_quiet():
    torch.manual_seed(0)
    assert not _run(GruLM(), lambda m, o: _lm(m, o, pad_label=-100)).filter(code="silent.pad_in_loss")


# ------------------------------------------ 3. a tagger trainer, right padding, NLLLoss module
class Tagger(nn.Module):
    def __init__(self, vocab=30, tags=5, d=16):
        super().__init__()
        self.emb, self.rnn = nn.Embedding(vocab, d), nn.LSTM(d, d, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * d, tags)

    def forward(self, ids):
        return F.log_softmax(self.head(self.rnn(self.emb(ids))[0]), dim=-1)


class TagTrainer:
    def __init__(self, model, opt):
        self.model, self.opt, self.crit = model, opt, nn.NLLLoss()

    def step(self, ids, tags):
        out = self.model(ids)
        loss = self.crit(out.reshape(-1, out.shape[-1]), tags.reshape(-1))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()


def _tag(model, opt):
    g = torch.Generator().manual_seed(2)
    tr = TagTrainer(model, opt)
    for _ in range(3):
        ids = _rows(g, left=False, t=18, lo=4, hi=9)
        tags = torch.randint(1, 5, ids.shape, generator=g)
        tags[ids == PAD] = PAD  # the pad tag shares the pad id and nothing removes it
        tr.step(ids, tags)


def test_tagger_right_padding_nll_module_in_a_trainer():
    torch.manual_seed(0)
    (f,) = _run(Tagger(), _tag).filter(code="silent.pad_in_loss")
    assert f.line == _line(TagTrainer.step, "loss = self.crit(") and f.evidence["rows_ending_in_pad"] == 1.0


# -------------------------------------------------------------------------------- look-alikes
def test_rows_all_starting_with_a_cls_token_are_not_padding():
    def loop(model, opt):
        g = torch.Generator().manual_seed(3)
        for _ in range(3):
            ids = torch.randint(4, 30, (8, 12), generator=g)
            ids[:, 0] = 1  # [CLS] on every row, no padding
            logits = model(ids)[:, :-1]
            F.cross_entropy(logits.reshape(-1, 30), ids[:, 1:].reshape(-1)).backward()
            opt.step()
            opt.zero_grad()
    torch.manual_seed(0)
    assert not _run(GruLM(), loop).filter(code="silent.pad_in_loss")


def test_sequence_classification_with_nll_is_quiet():
    class Clf(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.EmbeddingBag(30, 8), nn.Linear(8, 3)

        def forward(self, ids):
            return F.log_softmax(self.head(self.emb(ids)), -1)

    def loop(model, opt):
        g = torch.Generator().manual_seed(4)
        for _ in range(3):
            ids = _rows(g)
            y = torch.zeros(8, dtype=torch.long)  # one class dominates the targets
            F.nll_loss(model(ids), y).backward()
            opt.step()
            opt.zero_grad()
    torch.manual_seed(0)
    assert not _run(Clf(), loop).findings

