"""The data ledger (issue 25): where every sample of the data goes, per loader, epoch and rank.

    _epochs.py    the records: a `Loader` per loop over a loader, an `Epoch` per pass
    _follow.py    fills them from the DataLoader events (`.._loaderstream`: indices, batch sizes,
                  content digests)
    _handfed.py   samples without a DataLoader (a generator, tensors indexed by hand), by content
    _passes.py    evaluation passes: each sample once per pass (one process, across ranks)
    _lines.py     the user's source: loader names, the `continue` / `break` of a loop
    _verdicts.py  coverage, order and splits, judged at the end
    _ranks.py     the ranks' ledgers compared (through the distributed run directory)
    _checker.py   `DataLedger`: the session glue (backward passes and forwards counted)
"""

from ._checker import DataLedger as DataLedger

__all__ = ["DataLedger"]
