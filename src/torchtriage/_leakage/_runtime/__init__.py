"""Runtime leakage checks (issue 14): the "leakage" check of `watch()` / `torchtriage run`.

    _fingerprint.py  row digests with torch integer ops, on the rows' device (dense, sparse, text)
    _base.py         Base (the rows a split indexes, as a sketch) and Draw (one drawing of a split)
    _patches.py      where splits and fits are seen: Subset, randperm, scikit-learn splitters/fits
    _verdicts.py     the numbers (on the device) and the findings (after one read)
    _checker.py      LeakageWatch: the session glue (batches trained on / evaluated)
"""

from ._checker import LeakageWatch as LeakageWatch

__all__ = ["LeakageWatch"]
