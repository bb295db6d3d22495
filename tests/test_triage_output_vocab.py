"""`shape.output_width_not_vocab`: a model that feeds the ids it predicts back into its own
embedding keeps one invariant, the class axis of its logits is as wide as that embedding has
rows. A head wider than the vocabulary (a bigram logit table of the wrong width, a GRU decoder's
Linear, a transformer's lm_head) lets a sampled / argmax'ed id past the last row: the embedding
raises "index out of range in self", and the fault is the head's width, not the data. Read from
shapes the session already holds (the model's last output, its loss's input), never names.

Look-alikes keep `data.embedding_index`: a bad id in the data with a correct head, an id past the
rows of a source embedding in a model whose target vocabulary matches its head, a positional
embedding overrun by a long generation; and a correct model generates without any finding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import marked

HERE = Path(__file__)


line_of = marked(HERE)


def _alarms(s):
    return [f for f in s.report if f.severity.value in ("warning", "error")]


def _run(models, opts, fn):
    with pytest.raises(IndexError, match="index out of range in self"):
        with torchtriage.watch(models, opts, on_anomaly="record", report=False) as s:
            fn()
    (f,) = _alarms(s)
    return f


# ---------------------------------------------------------------- 1. a bigram table, class trainer
class CharTable(nn.Module):
    def __init__(self, vocab, width):
        super().__init__()
        self.table = nn.Embedding(vocab, width)

    def forward(self, ids):
        return self.table(ids)  # table lookup


class TableTrainer:
    def __init__(self, model, vocab):
        self.model, self.vocab = model, vocab
        self.opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def fit(self, steps):
        for _ in range(steps):
            x = torch.randint(0, self.vocab, (16, 6))
            y = torch.randint(0, self.vocab, (16, 6))
            logits = self.model(x)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()

    @torch.no_grad()
    def sample(self, n):
        ids = torch.zeros(4, 1, dtype=torch.long)
        for _ in range(n):
            probs = self.model(ids)[:, -1].softmax(-1)
            ids = torch.cat([ids, torch.multinomial(probs, 1)], dim=1)
        return ids


def test_bigram_table_wider_than_its_vocabulary_is_the_heads_width():
    torch.manual_seed(0)
    model = CharTable(20, 40)
    trainer = TableTrainer(model, 20)

    def go():
        trainer.fit(3)
        trainer.sample(200)

    f = _run(model, trainer.opt, go)
    assert (f.category.value, f.code, f.module) == ("shape", "shape.output_width_not_vocab", "table")
    assert (f.file, f.line) == (str(HERE), line_of("table lookup"))
    ev = f.evidence
    assert (ev["num_embeddings"], ev["output_width"], ev["output_shape"]) == (20, 40, [4, 1, 40])
    top = ev["max_index"]
    assert 20 <= top < 40 and top == ev["input[0]"].max
    assert f.message == (f"table: token id {top} is past the 20 rows of this embedding but within the 40 classes the "
                         "model itself predicts (its last output's class axis, shape [4, 1, 40]): its output head "
                         "is 40 wide, its vocabulary 20")
    assert "vocab_size" in f.next_check


# ---------------------------------------------------------------- 2. a GRU decoder, argmax fed back
class Decoder(nn.Module):
    def __init__(self, vocab, classes, hidden=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.gru = nn.GRU(16, hidden, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, tok, h=None):
        x = self.embed(tok)  # decoder embed
        y, h = self.gru(x, h)
        return F.log_softmax(self.out(y), dim=-1), h


def greedy(decoder, start, steps):
    tok, h, out = start, None, []
    for _ in range(steps):
        logp, h = decoder(tok, h)
        tok = logp[:, -1].argmax(-1, keepdim=True)
        out.append(tok)
    return torch.cat(out, 1)


def train_decoder(decoder, opt, vocab, steps):
    for _ in range(steps):
        seq = torch.randint(0, vocab, (8, 7))
        logp, _ = decoder(seq[:, :-1])
        loss = F.nll_loss(logp.reshape(-1, logp.shape[-1]), seq[:, 1:].reshape(-1))  # decoder nll
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_gru_decoder_feeding_argmax_back_into_a_smaller_embedding():
    torch.manual_seed(3)
    dec = Decoder(12, 15)
    opt = torch.optim.Adam(dec.parameters(), lr=1e-3)
    with torch.no_grad():
        dec.out.bias[12:] += 3.0  # the extra classes win the argmax at once

    def go():
        train_decoder(dec, opt, 12, 2)
        with torch.no_grad():
            greedy(dec, torch.zeros(5, 1, dtype=torch.long), 10)

    f = _run(dec, opt, go)
    assert (f.code, f.module, f.line) == ("shape.output_width_not_vocab", "embed", line_of("decoder embed"))
    ev = f.evidence
    assert (ev["num_embeddings"], ev["output_width"], ev["output_shape"]) == (12, 15, [5, 1, 15])
    assert 12 <= ev["max_index"] < 15


# ---------------------------------------------------------------- 3. a transformer with a wrong lm_head
class TinyLM(nn.Module):
    def __init__(self, vocab, head, block=16, d=32):
        super().__init__()
        self.block = block
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.body = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
        self.lm_head = nn.Linear(d, head)

    def forward(self, idx, labels=None):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))  # lm embeddings
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        logits = self.lm_head(self.body(x, src_mask=mask, is_causal=True))
        loss = None if labels is None else F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))  # lm loss
        return {"loss": loss, "logits": logits}


def generate(model, idx, n, crop=True):
    for _ in range(n):
        ctx = idx[:, -model.block:] if crop else idx
        logits = model(ctx)["logits"][:, -1]
        idx = torch.cat([idx, torch.multinomial(logits.softmax(-1), 1)], dim=1)
    return idx


def lm_steps(model, opt, vocab, steps):
    data = torch.randint(0, vocab, (400,))
    for _ in range(steps):
        starts = torch.randint(0, 400 - 17, (8,))
        x = torch.stack([data[i:i + 16] for i in starts])
        y = torch.stack([data[i + 1:i + 17] for i in starts])
        loss = model(x, y)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_transformer_lm_head_wider_than_its_token_embedding():
    torch.manual_seed(1)
    model = TinyLM(30, 48)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def go():
        lm_steps(model, opt, 30, 3)
        model.eval()
        with torch.no_grad():
            generate(model, torch.zeros(2, 1, dtype=torch.long), 60)

    f = _run(model, opt, go)
    assert (f.category.value, f.code, f.module) == ("shape", "shape.output_width_not_vocab", "tok")
    assert f.line == line_of("lm embeddings")
    ev = f.evidence
    assert (ev["num_embeddings"], ev["output_width"]) == (30, 48)
    assert 30 <= ev["max_index"] < 48


def test_width_read_from_the_loss_when_the_model_returns_no_logits():
    """A model whose forward returns only its loss: the loss's input gives the class axis."""

    class LossOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 8)
            self.head = nn.Linear(8, 14)

        def forward(self, x, y):
            logits = self.head(self.emb(x))  # loss-only embed
            return F.cross_entropy(logits.flatten(0, 1), y.flatten())

    torch.manual_seed(0)
    model = LossOnly()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def go():
        x = torch.randint(0, 10, (4, 5))
        for _ in range(2):
            loss = model(x, x)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            pred = model.head(model.emb(x)).argmax(-1)  # the head's extra classes among them
            model(pred, x)

    f = _run(model, opt, go)
    assert (f.code, f.line) == ("shape.output_width_not_vocab", line_of("loss-only embed"))
    assert (f.evidence["num_embeddings"], f.evidence["output_width"], f.evidence["output_shape"]) == (10, 14, [20, 14])
    assert 10 <= f.evidence["max_index"] < 14
    assert "the class axis of its loss's input, shape [20, 14]" in f.message


def test_generation_only_with_no_loss_ever_read_is_found_by_its_fed_back_ids():
    """A model loaded and sampled from without training: no loss confirms its output is logits;
    the failing ids are the previous call's with one sampled id appended."""
    torch.manual_seed(2)
    model = TinyLM(30, 48)
    with pytest.raises(IndexError, match="index out of range in self"):
        with torchtriage.watch(model, on_anomaly="record", report=False) as s, torch.no_grad():
            generate(model, torch.zeros(3, 1, dtype=torch.long), 40)
    (f,) = _alarms(s)
    assert (f.code, f.module, f.line) == ("shape.output_width_not_vocab", "tok", line_of("lm embeddings"))
    assert (f.evidence["num_embeddings"], f.evidence["output_width"]) == (30, 48)


# ---------------------------------------------------------------- look-alikes: data.embedding_index
def test_bad_id_in_the_data_with_a_correct_head_stays_a_data_fault():
    torch.manual_seed(0)
    model = TinyLM(30, 30)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def go():
        lm_steps(model, opt, 30, 2)
        x = torch.randint(0, 30, (2, 8))
        x[1, 3] = 33  # a tokenizer's added token
        model(x, x)

    f = _run(model, opt, go)
    assert (f.category.value, f.code, f.module) == ("data", "data.embedding_index", "tok")
    assert "token id 33 is out of range for an embedding of 30 rows" in f.message


def test_bad_id_past_the_head_width_stays_a_data_fault():
    torch.manual_seed(0)
    model = CharTable(20, 40)
    trainer = TableTrainer(model, 20)

    def go():
        trainer.fit(2)
        model(torch.tensor([[3, 45]]))

    f = _run(model, trainer.opt, go)
    assert (f.code, f.evidence.get("output_width")) == ("data.embedding_index", None)


def test_source_embedding_of_a_model_whose_target_vocabulary_matches_its_head():
    """Two vocabularies: the head predicts the target's (16), a bad source id (12 < 16) is data."""

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.src = nn.Embedding(10, 8)
            self.tgt = nn.Embedding(16, 8)
            self.head = nn.Linear(8, 16)

        def forward(self, s, t):
            return self.head(self.src(s).mean(1, keepdim=True) + self.tgt(t))

    torch.manual_seed(0)
    model = Seq2Seq()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def go():
        s, t = torch.randint(0, 10, (4, 5)), torch.randint(0, 16, (4, 6))
        loss = F.cross_entropy(model(s, t).transpose(1, 2), t)
        loss.backward()
        opt.step()
        s[2, 2] = 12
        model(s, t)

    f = _run(model, opt, go)
    assert (f.code, f.module) == ("data.embedding_index", "src")


def test_positional_embedding_overrun_by_an_uncropped_generation_stays_a_data_fault():
    torch.manual_seed(0)
    model = TinyLM(30, 30, block=8)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def go():
        with torch.no_grad():
            generate(model, torch.zeros(1, 1, dtype=torch.long), 12, crop=False)

    f = _run(model, opt, go)
    assert (f.code, f.module) == ("data.embedding_index", "pos")
    assert "token id 8 is out of range for an embedding of 8 rows" in f.message


def test_without_a_session_the_reading_is_unchanged():
    model = CharTable(20, 40)
    try:
        model(torch.tensor([[25]]))
    except IndexError as exc:
        (f,) = torchtriage.triage_exception(exc)
    assert f.code == "data.embedding_index"


def test_feature_encoder_wider_than_its_vocabulary_with_a_bad_batch_stays_a_data_fault():
    """An encoder returning features (64 wide) over a vocabulary of 20, its classifier a separate
    model: a batch with id 30 is the data's fault, though 30 < 64."""

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(20, 16)
            self.rnn = nn.GRU(16, 64, batch_first=True)

        def forward(self, x):
            return self.rnn(self.emb(x))[0]

    torch.manual_seed(0)
    enc, head = Encoder(), nn.Linear(64, 3)
    opt = torch.optim.Adam([*enc.parameters(), *head.parameters()], lr=1e-3)

    def go():
        for bad in (False, False, True):
            x, y = torch.randint(0, 20, (4, 6)), torch.randint(0, 3, (4,))
            if bad:
                x[1, 2] = 30
            loss = F.cross_entropy(head(enc(x)[:, -1]), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    f = _run([enc, head], opt, go)
    assert (f.code, f.module) == ("data.embedding_index", "emb")


def test_tagger_taking_its_labels_in_forward_stays_a_data_fault():
    """Labels passed to forward (copied before the loss, mostly one tag): compared with themselves
    they match unshifted, so they are not read as token ids shifted by one."""

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(30, 16)
            self.tag = nn.Linear(16, 5)

        def forward(self, x, tags):
            logits = self.tag(self.emb(x))
            return F.cross_entropy(logits.flatten(0, 1), tags.flatten().clone())

    torch.manual_seed(0)
    model = Tagger()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(IndexError, match="out of bounds"):
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            x = torch.randint(0, 30, (4, 20))
            tags = torch.zeros(4, 20, dtype=torch.long)
            tags[0, 3], tags[1, 7], tags[3, 9] = 2, 7, 1
            model(x, tags).backward()
    (f,) = _alarms(s)
    assert f.code == "data.target_range"


# ---------------------------------------------------------------- clean: a correct model generates
def test_correct_models_train_and_generate_without_a_finding():
    torch.manual_seed(0)
    lm = TinyLM(30, 30)
    lm_opt = torch.optim.AdamW(lm.parameters(), lr=3e-4)
    table = CharTable(20, 20)
    trainer = TableTrainer(table, 20)
    dec = Decoder(12, 12)
    dec_opt = torch.optim.Adam(dec.parameters(), lr=1e-3)
    with torchtriage.watch([lm, table, dec], [lm_opt, trainer.opt, dec_opt], on_anomaly="record",
                           report=False) as s:
        lm_steps(lm, lm_opt, 30, 2)
        trainer.fit(2)
        train_decoder(dec, dec_opt, 12, 2)
        with torch.no_grad():
            assert generate(lm, torch.zeros(2, 1, dtype=torch.long), 40).max() < 30
            assert trainer.sample(60).max() < 20
            assert greedy(dec, torch.zeros(3, 1, dtype=torch.long), 10).max() < 12
    assert _alarms(s) == []


# ---------------------------------------------------------------- a head narrower than the vocabulary
def test_lm_head_narrower_than_the_vocabulary_refuses_a_shifted_target_inside_forward():
    torch.manual_seed(0)
    model = TinyLM(30, 24)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    with pytest.raises(IndexError, match="out of bounds"):
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            lm_steps(model, opt, 30, 2)
    (f,) = _alarms(s)
    assert (f.category.value, f.code, f.line) == ("shape", "shape.output_width_not_vocab", line_of("lm loss"))
    ev = f.evidence
    assert (ev["num_embeddings"], ev["output_width"], ev["output_shape"], ev["embedding"]) == (30, 24, [128, 24], "tok")
    assert 24 <= ev["max_index"] < 30
    assert f.message.startswith(f"TinyLM: target id {ev['max_index']} is a row of the input embedding tok (30 rows) "
                                "but past the 24 classes of the logits the loss reads (shape [128, 24])")
    assert f.message.endswith("its output head is 24 wide, its vocabulary 30")


def test_gru_head_narrower_than_its_vocabulary_loss_in_a_function_trainer():
    torch.manual_seed(0)
    dec = Decoder(12, 9)
    opt = torch.optim.Adam(dec.parameters(), lr=1e-3)
    with pytest.raises(IndexError, match="out of bounds"):
        with torchtriage.watch(dec, opt, on_anomaly="record", report=False) as s:
            train_decoder(dec, opt, 12, 2)
    (f,) = _alarms(s)
    assert (f.code, f.line) == ("shape.output_width_not_vocab", line_of("decoder nll"))
    assert (f.evidence["num_embeddings"], f.evidence["output_width"], f.evidence["embedding"]) == (12, 9, "embed")


def test_hf_style_labels_shifted_inside_forward_with_a_narrow_head():
    """labels=input_ids, the model shifts them itself (logits[:, :-1] against labels[:, 1:])."""

    class CausalLM(nn.Module):
        def __init__(self, vocab, head):
            super().__init__()
            self.wte = nn.Embedding(vocab, 16)
            self.lm_head = nn.Linear(16, head, bias=False)

        def forward(self, input_ids, labels=None):
            logits = self.lm_head(self.wte(input_ids))
            if labels is None:
                return (logits,)
            shift = logits[:, :-1].reshape(-1, logits.size(-1))
            return (F.cross_entropy(shift, labels[:, 1:].reshape(-1), ignore_index=-100), logits)  # hf loss

    torch.manual_seed(0)
    model = CausalLM(50, 40)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(IndexError, match="out of bounds"):
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            for _ in range(3):
                batch = torch.randint(0, 50, (4, 12))
                labels = batch.clone()
                labels[:, :2] = -100  # a prompt not trained on
                loss = model(batch, labels=labels)[0]
                opt.zero_grad()
                loss.backward()
                opt.step()
    (f,) = _alarms(s)
    assert (f.code, f.line) == ("shape.output_width_not_vocab", line_of("hf loss"))
    assert (f.evidence["num_embeddings"], f.evidence["output_width"], f.evidence["embedding"]) == (50, 40, "wte")


def test_tagger_with_a_tag_past_its_classes_stays_a_data_fault():
    """Targets that are tags, not the input ids shifted: a bad label, whatever the vocabulary."""

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(30, 16)
            self.tag = nn.Linear(16, 5)

        def forward(self, x):
            return self.tag(self.emb(x))

    torch.manual_seed(0)
    model = Tagger()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(IndexError, match="out of bounds"):
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            x = torch.randint(0, 30, (4, 6))
            tags = torch.randint(0, 5, (4, 6))
            tags[2, 1] = 7
            F.cross_entropy(model(x).flatten(0, 1), tags.flatten()).backward()
    (f,) = _alarms(s)
    assert f.code == "data.target_range"
