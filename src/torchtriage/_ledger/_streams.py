"""Token streams (issue 25): a language model trained on windows cut out of one long 1-D array of
token ids (``data[i:i + block]`` at random offsets, a shard sliced by hand), and evaluated on
another stretch of tokens.

Such a sample is no row: two windows that share most of their positions start at different
offsets, so their row digests differ even when the validation text is inside the training
text. Here a hand-fed input of integer token ids, 1-D (one sequence) or 2-D (a batch of
sequences) with at least `2 * K` tokens per sequence, is known by the digests of its `K`-token
windows at every position (`window_keys`: the windows are a view, digested like rows, on the
input's device; at most `MAX_WINDOWS` evenly spaced positions a forward). Overlap between a
training stream and an evaluation stream is then the share of the evaluation positions whose
`K` tokens were trained on (`judge`): an error when the evaluation stream is an evaluation set
(evaluated at least twice: the same tensor, or its windows again at other offsets), at least
`MIN_OVERLAP` positions, `SPLIT_SHARE` of them, and three times the rate at which the text
repeats itself: windows repeated inside one evaluated forward, or recurring in another evaluated
sequence at a place that is not the same stretch (`cross_chance`: a small vocabulary of phrases
or templates, where even disjoint stretches share most 16-token windows).
Disjoint slices of one array (nanoGPT's ``train_data = data[:n]``, ``val_data = data[n:]`` with
random offsets) share no window but natural repeats; its ``estimate_loss`` over both splits
measures the training split on purpose (the split's name is in the caller's ``split`` variable).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._leakage._runtime._fingerprint import dense_keys
from ._epochs import Loader
from ._make import finding

if TYPE_CHECKING:
    from ._handfed import HandFed

K = 16  # tokens per window: V ** 16 contents for a vocabulary of V (2 ** 80 for 32 tokens)
MAX_WINDOWS = 1 << 16  # positions digested per forward
SPLIT_SHARE = 0.01
MIN_OVERLAP = 8
CHANCE_WINDOWS = 1 << 15  # evaluated windows compared across sequences for the chance rate


def stream_input(inputs: list[torch.Tensor]) -> torch.Tensor | None:
    """The first input of token ids that is a stream: integers, 1-D or 2-D, `2 * K` tokens a row.

    A 1-D input as long as the batch of another input (two or more dimensions) holds one value
    per sample (the sequences' lengths, labels, ids): no text."""
    batches = {int(t.shape[0]) for t in inputs if t.dim() >= 2}
    for t in inputs:
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool or t.dim() not in (1, 2):
            continue
        if t.dim() == 1 and int(t.shape[0]) in batches:
            continue
        if t.shape[-1] >= 2 * K and t.numel() > 0:
            return t
    return None


def window_keys(x: torch.Tensor) -> torch.Tensor:
    """One digest per `K`-token window of each sequence: `(rows, positions)` when every position
    is digested, flat when the positions are evenly spaced (past `MAX_WINDOWS`)."""
    rows = x.detach().reshape(-1, x.shape[-1])
    windows = rows.unfold(1, K, 1)  # a view: (rows, positions, K)
    if windows.shape[0] * windows.shape[1] <= MAX_WINDOWS:
        return dense_keys(windows.reshape(-1, K)).reshape(windows.shape[0], windows.shape[1])
    per = max(1, MAX_WINDOWS // windows.shape[0])
    step = max(1, -(-windows.shape[1] // per))
    return dense_keys(windows[:, ::step].reshape(-1, K))


def host_rows(chunks: list[torch.Tensor]) -> list[np.ndarray]:
    """The chunks' rows on the host, in one read at the end of the run (each in its own shape)."""
    if not chunks:
        return []
    dev = chunks[0].device
    joined = torch.cat([c.to(dev).reshape(-1) for c in chunks]).cpu().numpy()  # the one read, at the end
    parts = np.split(joined, np.cumsum([c.numel() for c in chunks])[:-1])
    return [p.reshape(c.shape) for p, c in zip(parts, chunks)]


def cross_chance(chunks: list[np.ndarray], padded: list[np.ndarray] | None = None) -> float:
    """The share of evaluated windows that recur in another evaluated sequence at a place that is
    not the same stretch of text: the rate at which the text repeats itself between sequences
    (a small vocabulary of phrases, templates), which the windows of one short sequence cannot
    show. Two sequences hold the same stretch when, at the shift of their shared window, their
    whole overlap agrees; random offsets into one held-out stretch overlap that way. Two
    documents (rows an attention mask pads, `padded`: one flag per row of each chunk) are no
    offsets into one stretch: a window they share is the text repeating itself. Only sequences
    digested at every position count, at most `CHANCE_WINDOWS` windows."""
    pads = padded if padded is not None and len(padded) == len(chunks) else [np.zeros(0, bool)] * len(chunks)
    rows: list[np.ndarray] = []
    docs: list[bool] = []
    total = 0
    for c, flags in zip(chunks, pads):
        if c.ndim != 2 or c.shape[1] < 2:
            continue
        for r in range(c.shape[0]):
            if len(rows) >= 2 and total >= CHANCE_WINDOWS:
                break
            rows.append(c[r])
            docs.append(bool(flags[r]) if flags.size == c.shape[0] else False)
            total += c.shape[1]
    if len(rows) < 2:
        return 0.0
    first: dict[int, list[tuple[int, int]]] = {}
    for i, row in enumerate(rows):
        for p, key in enumerate(row.tolist()):
            where = first.setdefault(key, [])
            if len(where) < 2 and all(j != i for j, _ in where):
                where.append((i, p))
    chance = 0
    for i, row in enumerate(rows):
        for p, key in enumerate(row.tolist()):
            partner = next(((j, q) for j, q in first[key] if j != i), None)
            if partner is None:
                continue
            j, q = partner
            if docs[i] and docs[j]:
                chance += 1  # two documents share these tokens: the text repeats itself
                continue
            d = p - q
            a, b = row[max(d, 0):], rows[j][max(-d, 0):]
            n = min(a.size, b.size)
            chance += not np.array_equal(a[:n], b[:n])
    return chance / total


def judge(hf: HandFed) -> Any:
    for (token, training, stream), ev in hf.sides.items():
        if training or not stream or not ev.chunks:
            continue
        tr = hf.sides.get((token, True, True))
        if tr is None or not tr.chunks:
            continue
        ev_rows = host_rows(ev.chunks)
        ev_pads = host_rows(ev.padded) if len(ev.padded) == len(ev.chunks) else [np.zeros(0, bool)] * len(ev_rows)
        repeated = any(ev.repeats)
        seen: set[bytes] = set()
        kept, kept_pads = [], []
        for rows, pads in zip(ev_rows, ev_pads):
            key = np.sort(rows).tobytes()
            if key in seen:
                repeated = True
                continue
            seen.add(key)
            kept.append(rows)
            kept_pads.append(pads)
        every = np.concatenate([r.reshape(-1) for r in kept])
        eu = np.unique(every)
        # Windows repeated inside one evaluated sequence: the text repeating itself. (Across
        # forwards, windows repeat because one held-out stretch is evaluated again, at random
        # offsets as nanoGPT's estimate_loss draws them: that makes it an evaluation set.)
        own = sum(r.size - np.unique(r).size for r in kept)
        rate = own / max(every.size, 1)
        repeated = repeated or (every.size - own - eu.size) >= MIN_OVERLAP
        tu = np.unique(np.concatenate([r.reshape(-1) for r in host_rows(tr.chunks)]))
        hit = np.isin(eu, tu)
        count, n = int(hit.sum()), int(eu.size)
        if not repeated or count < MIN_OVERLAP or count < max(SPLIT_SHARE, 3 * rate) * n:
            continue
        chance = cross_chance(kept, kept_pads)
        if count < 3 * chance * n:
            continue
        example = int(np.flatnonzero(np.isin(every, tu))[0])
        e = Loader("evaluation forwards", ev.frame, None, 0, 0, "", False)
        t = Loader("training forwards", tr.frame, None, 0, 0, "", False)
        fields = {"eval_where": e.where(), "train_where": t.where(), "count": count, "n": n,
                  "share": f"{100 * count / max(n, 1):.1f}%", "k": K, "example": example}
        evidence = {"evaluation_at": e.where(), "training_at": t.where(), "count": count, "evaluation_windows": n,
                    "window_tokens": K, "example_position": example, "matched": "token windows",
                    "repeat_rate_within_evaluation": round(rate, 4),
                    "repeat_rate_across_evaluation": round(chance, 4)}
        return finding("split_overlap", "stream_split", "error", ev.frame, fields, evidence)
    return None
