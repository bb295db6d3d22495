"""Data leakage and split checks (issue 6): `check_splits`, `check_preprocessing`.

    _sources.py     what a split can be; reading it in chunks (tables, arrays, samples)
    _tables.py      CSV/JSONL (stdlib), Parquet/DataFrames (optional pandas/pyarrow)
    _hashing.py     canonical 8-byte content digests, equal across dtypes
    _near.py        MinHash (text) and SimHash (numbers/images) signatures, banded lookup
    _scan.py        one streaming pass per split → digests and running statistics
    _preprocess.py  normalizers and vocabularies fitted before the split
    _checks.py      check_splits: pairwise comparisons → Findings
    _suggest.py     a group-aware split written to a new file (CLI --suggest-split)
"""

from ._checks import check_preprocessing as check_preprocessing
from ._checks import check_splits as check_splits

__all__ = ["check_preprocessing", "check_splits"]
