"""Token streams (issue 25): language models trained on windows of one long 1-D array of token
ids. Overlap between the training and the evaluation stretch is measured as a share of the
evaluation positions (`_ledger/_streams.py`); disjoint slices stay quiet."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=("data_ledger",), source=textwrap.dedent(source))


_line = line_in


LM = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F

class TinyLM(nn.Module):
    def __init__(self, vocab=50, d=16, block=32):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.head = nn.Linear(d, vocab)
    def forward(self, idx, targets=None):
        h = self.emb(idx) + self.pos(torch.arange(idx.shape[-1]))
        logits = self.head(torch.cumsum(h, -2) / torch.arange(1, idx.shape[-1] + 1)[:, None])
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
"""

MEMMAP_GET_BATCH = LM + """
rng = np.random.default_rng(0)
data = rng.integers(0, 50, 20000).astype(np.uint16)   # the token file, as np.memmap gives it
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[%s:]
block, batch = 32, 8

def get_batch(split):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - block - 1, (batch,))
    x = torch.stack([torch.from_numpy(d[i:i + block].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(d[i + 1:i + 1 + block].astype(np.int64)) for i in ix])
    return x, y

@torch.no_grad()
def estimate_loss(model):
    model.eval()
    out = {}
    for split in ("train", "val"):
        out[split] = sum(model(*get_batch(split))[1].item() for _ in range(20)) / 20  # HERE
    model.train()
    return out

torch.manual_seed(0)
model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
for it in range(300):
    if it %% 100 == 0:
        print(estimate_loss(model))
    xb, yb = get_batch("train")
    _, loss = model(xb, yb)
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_nanogpt_get_batch_over_disjoint_slices_is_quiet(tmp_path):
    report, _ = _run(tmp_path, MEMMAP_GET_BATCH % "n")
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


def test_nanogpt_get_batch_with_a_validation_slice_inside_the_training_slice(tmp_path):
    source = MEMMAP_GET_BATCH % "n - 6000"  # the validation stretch starts 6000 tokens early
    report, _ = _run(tmp_path, source)
    [f] = [f for f in report.findings if f.code == "data.split_overlap"]
    assert (f.severity.value, f.line, f.evidence["matched"], f.evidence["window_tokens"]) == \
        ("error", _line(source), "token windows", 16)
    share = f.evidence["count"] / f.evidence["evaluation_windows"]
    assert 0.5 < share < 0.9  # 6000 of 8000 positions are training tokens; trained on: the windows drawn


DOCS_IN_SHARDS = LM + """
g = torch.Generator().manual_seed(0)
docs = [torch.randint(0, 50, (int(torch.randint(40, 120, (1,), generator=g)),), generator=g) for _ in range(400)]
held_docs = 100
valid_tokens = torch.cat(docs[:held_docs])
corpus = torch.cat(docs[%d:])                      # the training shards
shards = list(torch.split(corpus, 4096))
model = TinyLM(block=1024)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(241):
    shard = shards[step %% len(shards)]
    start = int(torch.randint(0, len(shard) - 600, (1,), generator=g))
    _, loss = model(shard[start:start + 512], shard[start + 1:start + 513])
    opt.zero_grad(); loss.backward(); opt.step()
    if step %% 60 == 0:
        with torch.no_grad():
            val_loss = sum(model(valid_tokens[i:i + 1024], valid_tokens[i + 1:i + 1025])[1].item()  # HERE
                           for i in range(0, len(valid_tokens) - 1025, 1024))
"""


def test_validation_documents_also_in_the_training_shards(tmp_path):
    source = DOCS_IN_SHARDS % 40  # documents 40..99 are in both
    report, _ = _run(tmp_path, source)
    [f] = [f for f in report.findings if f.code == "data.split_overlap"]
    assert (f.severity.value, f.line, f.evidence["matched"]) == ("error", _line(source), "token windows")
    assert f.evidence["count"] >= 0.3 * f.evidence["evaluation_windows"]


def test_validation_documents_kept_out_of_the_training_shards_are_quiet(tmp_path):
    report, _ = _run(tmp_path, DOCS_IN_SHARDS % 100)
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


PHRASES = LM + """
import random
r = random.Random(0)
subjects, verbs = ["the cat", "a dog", "my friend", "the king"], ["sees", "likes", "calls", "helps"]
objects = ["the moon", "a bird", "the river", "the queen"]
text = "".join(f"{r.choice(subjects)} {r.choice(verbs)} {r.choice(objects)}.\\n" for _ in range(1500))
chars = sorted(set(text))
data = np.array([chars.index(c) for c in text], dtype=np.uint16)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[%s:]
block, batch = 32, 8

def get_batch(split):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - block - 1, (batch,))
    x = torch.stack([torch.from_numpy(d[i:i + block].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(d[i + 1:i + 1 + block].astype(np.int64)) for i in ix])
    return x, y

torch.manual_seed(0)
model = TinyLM(vocab=len(chars))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
for it in range(200):
    if it %% 50 == 0:
        with torch.no_grad():
            print(sum(model(*get_batch("val"))[1].item() for _ in range(10)) / 10)  # HERE
    xb, yb = get_batch("train")
    _, loss = model(xb, yb)
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_a_text_of_a_few_phrases_split_into_disjoint_slices_is_quiet(tmp_path):
    # 64 sentences: any 16 characters of the held-out stretch are somewhere in the training one,
    # and also elsewhere in the held-out stretch itself: the chance rate explains the overlap.
    report, _ = _run(tmp_path, PHRASES % "n")
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


ZIPF = LM.replace("vocab=50", "vocab=2000") + """
rng = np.random.default_rng(0)
data = np.minimum(rng.zipf(1.3, 30000), 1999).astype(np.int64)   # words of a natural-like text
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[%s:]
block, batch = 32, 8

def get_batch(split):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - block - 1, (batch,))
    return torch.stack([torch.from_numpy(d[i:i + block]) for i in ix]), \\
        torch.stack([torch.from_numpy(d[i + 1:i + 1 + block]) for i in ix])

torch.manual_seed(0)
model = TinyLM(vocab=2000)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
for it in range(300):
    if it %% 100 == 0:
        with torch.no_grad():
            print(sum(model(*get_batch("val"))[1].item() for _ in range(20)) / 20)  # HERE
    xb, yb = get_batch("train")
    _, loss = model(xb, yb)
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_a_natural_like_text_with_the_validation_slice_inside_the_training_one(tmp_path):
    source = ZIPF % "n - 2000"  # 2000 of the 5000 held-out tokens are training tokens
    report, _ = _run(tmp_path, source)
    [f] = [f for f in report.findings if f.code == "data.split_overlap"]
    assert (f.severity.value, f.line, f.evidence["matched"]) == ("error", _line(source), "token windows")
    assert f.evidence["repeat_rate_across_evaluation"] < 0.05


def test_a_natural_like_text_split_into_disjoint_slices_is_quiet(tmp_path):
    report, _ = _run(tmp_path, ZIPF % "n")
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


SEQ2SEQ_WITH_LENGTHS = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F

class Seq2Seq(nn.Module):
    def __init__(self, vocab=30, d=16):
        super().__init__()
        self.emb, self.rnn, self.head = nn.Embedding(vocab, d), nn.GRU(d, d, batch_first=True), nn.Linear(d, vocab)
    def forward(self, src, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(src), lengths, batch_first=True)
        _, h = self.rnn(packed)
        return self.head(h[-1])

def make_batches(n, seed):
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(n):
        lengths = np.sort(rng.randint(3, 9, 32))[::-1].copy()   # one length per sentence, sorted
        src = np.zeros((32, lengths[0]), dtype=np.int64)
        for i, k in enumerate(lengths):
            src[i, :k] = rng.randint(4, 30, k)
        out.append((torch.tensor(src), torch.tensor(lengths), torch.tensor(src[:, 0])))
    return out

torch.manual_seed(0)
train, valid = make_batches(40, 0), make_batches(6, 1)
model = Seq2Seq()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for epoch in range(4):
    model.train()
    for src, lengths, y in train:
        loss = F.cross_entropy(model(src, lengths), y)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    with torch.no_grad():
        valid_loss = sum(F.cross_entropy(model(src, lengths), y).item() for src, lengths, y in valid)
"""


def test_a_vector_of_sentence_lengths_is_no_token_stream(tmp_path):
    # `lengths` is 1-D, of integers, 32 long: one value per sentence of the batch (values 3..8,
    # sorted), whose 16-value windows recur in every batch; no text was evaluated twice.
    report, _ = _run(tmp_path, SEQ2SEQ_WITH_LENGTHS)
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


PADDED_DOCS = """
import random, torch, torch.nn as nn, torch.nn.functional as F

class TinyLM(nn.Module):
    def __init__(self, vocab=48, d=16):
        super().__init__()
        self.emb, self.pos, self.head = nn.Embedding(vocab, d), nn.Embedding(64, d), nn.Linear(d, vocab)
    def forward(self, input_ids, attention_mask=None):
        h = self.emb(input_ids) + self.pos(torch.arange(input_ids.shape[1]))
        return self.head(torch.cumsum(h, 1) / torch.arange(1, input_ids.shape[1] + 1)[:, None])

def make_texts(n, seed, rule):
    r = random.Random(seed)
    out = []
    for _ in range(n):
        start, step = r.randint(1, 47), r.choice([1, 2, 3, 5])
        out.append([rule(r, start, step, k) for k in range(r.randint(12, 48))])
    return out

def tokenize(texts):
    ids = torch.zeros(len(texts), max(map(len, texts)), dtype=torch.long)   # right-padded with 0
    mask = torch.zeros_like(ids)
    for i, t in enumerate(texts):
        ids[i, :len(t)], mask[i, :len(t)] = torch.tensor(t), 1
    return ids, mask

RULE = %s
train_texts = make_texts(512, 0, RULE)
eval_texts = %s
torch.manual_seed(0)
model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
r = random.Random(1)
for step in range(300):
    ids, mask = tokenize(r.sample(train_texts, 16))
    logits = model(ids, attention_mask=mask)[:, :-1]
    loss = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100))
    opt.zero_grad(); loss.backward(); opt.step()
model.eval()
with torch.no_grad():
    for i in range(0, len(eval_texts), 8):
        ids, mask = tokenize(eval_texts[i:i + 8])
        eval_logits = model(ids, attention_mask=mask)  # HERE
    for text in eval_texts[:24]:  # a reference: a few texts one at a time, unpadded
        ids, mask = tokenize([text])
        eval_logits = model(ids, attention_mask=mask)
"""
PROGRESSION = "lambda r, start, step, k: (start + k * step) % 47 + 1"  # 188 distinct texts in all
NOISE = "lambda r, start, step, k: r.randint(1, 47)"


def test_padded_documents_of_a_tiny_generator_evaluated_on_new_draws_are_quiet(tmp_path):
    # Arithmetic progressions: any 16 tokens of a new text are in the training texts, and in
    # other evaluation texts too: the documents repeat each other, the overlap is chance.
    report, _ = _run(tmp_path, PADDED_DOCS % (PROGRESSION, "make_texts(96, 1, RULE)"))
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


def test_padded_documents_evaluated_from_the_training_documents(tmp_path):
    source = PADDED_DOCS % (NOISE, "train_texts[:96]")
    report, _ = _run(tmp_path, source)
    [f] = [f for f in report.findings if f.code == "data.split_overlap"]
    assert (f.severity.value, f.line, f.evidence["matched"]) == ("error", _line(source), "token windows")
    # every evaluated window was trained on; the documents share only their padding runs
    assert f.evidence["count"] > 0.9 * f.evidence["evaluation_windows"]
    assert f.evidence["repeat_rate_across_evaluation"] < 0.25
