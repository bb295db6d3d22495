"""pytest plugin of the non-finite probe (benchmarks/not_reproduced.py --suite): patches
torchtriage's report model in the pytest process itself (see sitecustomize.py)."""

from __future__ import annotations

import os


def pytest_configure(config) -> None:
    if not os.environ.get("TORCHTRIAGE_NF_LOG"):
        return
    import sitecustomize  # this folder's, first on PYTHONPATH

    import torchtriage._findings as findings

    sitecustomize._patch(findings)
