"""The one vocabulary of held-out names the ledger's checks read in the user's code (a loader's,
a dataset's or a loop's variable name): a word of its own, bounded by anything but a letter
(`X_val`, `val_loader`, `test2`, `evaluate`); `value`, `interval`, `device`, `latest` name
nothing held out.

`SPLIT` names a held-out split; `SPLIT_OR_EVAL` also an evaluation (`eval_loader`, `evaluate`),
for checks that ask whether code evaluates rather than which split it reads.
"""

from __future__ import annotations

import re

_WORDS = "val|valid|validation|test|testing|dev|holdout|heldout"
SPLIT = re.compile(rf"(?<![a-z])(?:{_WORDS})(?![a-z])")
SPLIT_OR_EVAL = re.compile(rf"(?<![a-z])(?:{_WORDS}|eval|evaluate|evaluation)(?![a-z])")
