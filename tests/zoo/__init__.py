"""A zoo of tiny real models, each named after the bug it carries (or `Clean...` when it has none).

One file per family: `forward.py` (contracts, shapes), `nonfinite.py`, `gradients.py`,
`silent.py`, `leakage.py`, ... Tests import them from here.
"""
