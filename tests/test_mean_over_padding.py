"""A plain mean over a loss zeroed by a padding mask (`silent.mean_over_padding`): `(loss * mask).mean()`
on a right-padded batch counts the padded positions in the denominator. Written the ways users
write it, and the masked means that stay quiet."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from _lines import line_in, run_silent
from torchtriage import Category, Severity

_line = line_in


def _run(model, loop, discover=False):
    return run_silent(model, loop, "silent.mean_over_padding", discover)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.rnn = nn.GRU(8, 8, batch_first=True)
        self.out = nn.Linear(8, 5)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.out(h)


def _tag_batch(g):
    lengths = torch.randint(3, 13, (8,), generator=g)
    lengths[0] = 12
    ids = torch.randint(1, 20, (8, 12), generator=g)
    mask = (torch.arange(12)[None, :] < lengths[:, None]).float()
    ids = ids * mask.long()
    tags = torch.randint(0, 5, (8, 12), generator=g)
    return ids, tags, mask


# ------------------------------------------ 1. a sequence tagger, per-token CE masked by hand
def _tagging(model, opt, fixed=False):
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        ids, tags, mask = _tag_batch(g)
        logits = model(ids)
        tok = F.cross_entropy(logits.reshape(-1, 5), tags.reshape(-1), reduction="none").view(8, 12)
        loss = (tok * mask).sum() / mask.sum() if fixed else (tok * mask).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_tagger_loss_averaged_over_padded_tokens():
    torch.manual_seed(0)
    found = _run(Tagger(), _tagging)
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING and f.category is Category.SILENT and f.op == "mean"
    assert f.line == _line(_tagging, "else (tok * mask).mean()")
    ev = f.evidence
    assert tuple(ev["mask_shape"]) == (8, 12) and ev["padded_axis"] == 1
    assert 0.1 <= ev["padded_fraction"] < 0.9 and ev["rows_with_padding"] >= 1


def test_tagger_loss_divided_by_the_real_tokens_is_quiet():
    torch.manual_seed(0)
    assert not _run(Tagger(), lambda m, o: _tagging(m, o, fixed=True))


# ----------- 2. time-major regression (T, B, D) with a broadcast (T, B, 1) mask, torch.mean(...)
def seq_mse(pred, target, valid):
    return torch.mean((pred - target) ** 2 * valid)


def _regress(model, opt, loss_fn=seq_mse):
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        lengths = torch.randint(2, 10, (6,), generator=g)
        lengths[0] = 10
        x = torch.randn(10, 6, 3, generator=g)
        valid = (torch.arange(10)[:, None] < lengths[None, :]).float().unsqueeze(-1)
        y = torch.randn(10, 6, 3, generator=g) * valid
        loss = loss_fn(model(x), y, valid)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_time_major_mse_with_a_broadcast_mask():
    torch.manual_seed(0)
    found = _run(nn.Linear(3, 3), _regress)
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING
    assert f.line == _line(seq_mse, "return torch.mean((pred - target) ** 2 * valid)")
    assert tuple(f.evidence["mask_shape"]) == (10, 6, 1) and f.evidence["padded_axis"] == 0


def test_time_major_mse_over_the_valid_steps_is_quiet():
    torch.manual_seed(0)

    def fixed(pred, target, valid):
        return ((pred - target) ** 2 * valid).sum() / (valid.sum() * pred.shape[-1])
    assert not _run(nn.Linear(3, 3), lambda m, o: _regress(m, o, fixed))


# ------------------------------------------------------- masked means that are not padding
def _other_masks(model, opt, kind):
    g = torch.Generator().manual_seed(2)
    for _ in range(4):
        x = torch.randn(8, 8, generator=g)
        err = (model(x) - x) ** 2
        if kind == "random":  # a random keep-mask (masked reconstruction): no prefix structure
            m = (torch.rand(8, 8, generator=g) < 0.5).float()
        elif kind == "causal":  # a lower-triangular pair mask: lengths 1..T
            m = torch.tril(torch.ones(8, 8))
        elif kind == "causal_batched":  # the pair mask repeated over a batch of pair-loss maps
            err = (model(x)[:, :, None] - x[:, None, :]) ** 2
            m = torch.tril(torch.ones(8, 8)).expand(8, 8, 8).clone()
        else:  # every row full length: nothing padded
            m = torch.ones(8, 8)
        loss = (err * m).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_random_triangular_and_full_masks_are_quiet():
    for kind in ("random", "causal", "causal_batched", "full"):
        torch.manual_seed(0)
        assert not _run(nn.Linear(8, 8), lambda m, o, k=kind: _other_masks(m, o, k)), kind


# ------------- 3. a per-token loss module with the default mean, on a model that reads padded ids
class TokenScorer(nn.Module):
    def __init__(self, pad=0):
        super().__init__()
        self.pad = pad
        self.emb = nn.Embedding(30, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(16, 1)

    def forward(self, ids):
        h = self.enc(self.emb(ids), src_key_padding_mask=ids == self.pad)
        return torch.sigmoid(self.head(h))


def _padded_ids(g, rows=16, width=20, full=False):
    lengths = torch.full((rows,), width) if full else torch.randint(4, width + 1, (rows,), generator=g)
    ids = torch.randint(2, 30, (rows, width), generator=g)
    return ids.masked_fill(torch.arange(width)[None, :] >= lengths[:, None], 0)


def _replaced_tokens(model, opt, fixed=False, full=False):
    crit = nn.BCELoss(reduction="none") if fixed else nn.BCELoss()
    g = torch.Generator().manual_seed(3)
    for _ in range(4):
        ids = _padded_ids(g, full=full)
        labels = (torch.rand(ids.shape, generator=g) < 0.8).float()
        probs = model(ids)
        per_token = crit(probs.view(-1), labels.view(-1))
        if fixed:
            real = (ids != 0).view(-1).float()
            per_token = (per_token * real).sum() / real.sum()
        opt.zero_grad()
        per_token.backward()
        opt.step()


def test_bce_module_with_the_default_mean_over_padded_tokens():
    torch.manual_seed(0)
    found = _run(TokenScorer(), _replaced_tokens)
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING and f.op == "binary_cross_entropy"
    assert f.line == _line(_replaced_tokens, "per_token = crit(probs.view(-1), labels.view(-1))")
    assert f.evidence["pad_id"] == 0 and f.evidence["padded_fraction"] >= 0.1


def test_bce_averaged_over_real_tokens_or_on_unpadded_ids_is_quiet():
    torch.manual_seed(0)
    assert not _run(TokenScorer(), lambda m, o: _replaced_tokens(m, o, fixed=True))
    torch.manual_seed(0)
    assert not _run(TokenScorer(), lambda m, o: _replaced_tokens(m, o, full=True))


# ------- 4. per-phoneme duration regression (F.mse_loss, mean) on left-aligned padded phonemes
class Durations(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 12, padding_idx=1)
        self.out = nn.Linear(12, 1)

    def forward(self, phonemes):
        return self.out(torch.relu(self.emb(phonemes))).squeeze(-1)


def _durations(model, opt):
    g = torch.Generator().manual_seed(4)
    for _ in range(4):
        lengths = torch.randint(5, 25, (12,), generator=g)
        ph = torch.randint(2, 40, (12, 24), generator=g)
        ph = ph.masked_fill(torch.arange(24)[None, :] >= lengths[:, None], 1)
        target = torch.rand(12, 24, generator=g) * (ph != 1)
        loss = F.mse_loss(model(ph), target)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_duration_mse_over_padded_phonemes_functional_loop():
    torch.manual_seed(0)
    found = _run(Durations(), _durations, discover=True)
    assert len(found) == 1
    f = found[0]
    assert f.line == _line(_durations, "loss = F.mse_loss(model(ph), target)")
    assert f.evidence["pad_id"] == 1
