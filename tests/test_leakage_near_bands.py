"""The near-duplicate search's bands follow the threshold (issue 17).

A SimHash threshold that allows k differing bits (of 128) gets k + 1 bands, so every pair
at or above it shares a band; at the numbers' default (0.98, k = 2) that is 3 bands of 43
bits, which on many random low-dimensional rows makes far fewer candidate pairs than the 4
bands of 32 bits that a 0.9 threshold keeps. Every engine builds the same keys.
"""

from __future__ import annotations

import numpy as np
import pytest

from torchtriage._leakage import _near
from torchtriage._leakage._store import BAND_CAP


def test_band_widths_follow_the_threshold():
    assert _near.sim_widths(0.9) == (32, 32, 32, 32)
    assert _near.sim_widths(0.97) == (32, 32, 32, 32)  # k = 3
    assert _near.sim_widths(0.98) == (43, 43, 42)      # k = 2
    assert _near.sim_widths(0.99) == (64, 64)          # k = 1
    assert _near.sim_widths(1.0) == (64, 64)           # k = 0: two 64-bit keys
    assert _near.default_threshold("num", None) == 0.98 and _near.default_threshold("text", None) == 0.9
    assert _near.default_threshold("num", 0.9) == 0.9


def test_bands_at_0_9_are_the_four_32_bit_words():
    sig = np.random.default_rng(0).integers(0, 2**64, (50, 2), dtype=np.uint64)
    lo, hi = sig & np.uint64(0xFFFFFFFF), sig >> np.uint64(32)
    assert (_near.sim_bands(sig, 0.9) == np.stack([lo[:, 0], hi[:, 0], lo[:, 1], hi[:, 1]], axis=1)).all()
    keys = _near.sim_bands(sig, 0.98)  # bits 0-42, 43-85 (across the words), 86-127
    m43 = np.uint64((1 << 43) - 1)
    assert (keys[:, 0] == sig[:, 0] & m43).all()
    assert (keys[:, 1] == ((sig[:, 0] >> np.uint64(43)) | (sig[:, 1] << np.uint64(21))) & m43).all()
    assert (keys[:, 2] == sig[:, 1] >> np.uint64(22)).all()


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_pairs_at_the_threshold_always_share_a_band(k):
    """Pigeonhole: k flipped bits anywhere in the 128 leave one of the k + 1 bands whole."""
    rng = np.random.default_rng(k)
    a = rng.integers(0, 2**64, (2000, 2), dtype=np.uint64)
    b = a.copy()
    for i in range(len(b)):
        for bit in rng.choice(128, k, replace=False):
            b[i, bit // 64] ^= np.uint64(1) << np.uint64(bit % 64)
    threshold = 1 - k / 128
    assert (_near.similarity("num", a, b) >= threshold).all()
    ka, kb = _near.sim_bands(a, threshold), _near.sim_bands(b, threshold)
    assert ka.shape[1] == max(2, k + 1)
    assert (ka == kb).any(axis=1).all()
    ia, ib = _near.pairs_by_bands(ka, kb, BAND_CAP)
    assert np.array_equal(np.unique(ib), np.arange(len(b))) and (ia == ib).all()


def test_default_bands_make_few_candidates_on_random_rows():
    """200 k random rows of 18 columns: 32-bit bands pair rows 35-60 degrees apart by the
    thousand; the default's 43-bit bands keep a small share of them and every injected copy."""
    rng = np.random.default_rng(17)
    train, test = rng.uniform(-1, 1, (160_000, 18)), rng.uniform(-1, 1, (40_000, 18))
    j = np.arange(0, len(test), 1000)
    test[j] = (train[j * 3] * (1 + 0.02 * rng.uniform(-1, 1, (len(j), 18)))).round(4)
    center, scale = train.mean(0), train.std(0)
    sa, sb = _near.simhash(train, center, scale), _near.simhash(test, center, scale)
    loose = _near.pairs_by_bands(_near.sim_bands(sa, 0.9), _near.sim_bands(sb, 0.9), BAND_CAP)
    ia, ib = _near.pairs_by_bands(_near.sim_bands(sa, 0.98), _near.sim_bands(sb, 0.98), BAND_CAP)
    assert len(loose[0]) > 5_000 and len(ia) * 10 < len(loose[0])
    hit = _near.similarity("num", sa[ia], sb[ib]) >= 0.98
    assert set(j.tolist()) <= set(ib[hit].tolist())
    assert set(zip(ia[hit].tolist(), ib[hit].tolist())) >= {(3 * int(r), int(r)) for r in j}


def test_simhash_of_a_row_does_not_depend_on_its_chunk():
    """Engines chunk differently: a row's signature is the same alone, in a chunk, or shifted."""
    rng = np.random.default_rng(5)
    v = rng.standard_normal((3000, 18))
    v[3, 4] = np.nan
    center, scale = v[:1000].mean(0), v[:1000].std(0)
    whole = _near.simhash(v, center, scale)
    parts = np.concatenate([_near.simhash(v[k:k + 777], center, scale) for k in range(0, len(v), 777)])
    assert np.array_equal(whole, parts)
    assert np.array_equal(_near.simhash(v[1234:1235], center, scale), whole[1234:1235])
