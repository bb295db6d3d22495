"""Minimal reproduction (issue 7): safe repro bundles, replay, shrink, regression tests.

    _safetensors.py  pickle-free tensor files (reader and writer of the safetensors format)
    _tree.py         nested batches / optimizer states as JSON + named tensors
    _bundle.py       the bundle folder: write, verify (manifest, checksums), load → `Bundle`
    _recorder.py     `ReproRecorder`, the session check that writes a bundle at the first failure
    _replay.py       `replay()`: the failing step again with the user's model → `ReplayResult`
    _script.py       replay through the user's own script (intercepts its first step)
    _shrink.py       ddmin over samples + bisection over sequence length → `ShrinkResult`
    _maketest.py     the pytest file, minimal bundle and FIX.md record
"""

from ._bundle import Bundle as Bundle
from ._bundle import ReplayBatch as ReplayBatch
from ._bundle import load_bundle as load_bundle
from ._maketest import make_test as make_test
from ._recorder import ReproRecorder as ReproRecorder
from ._replay import replay as replay
from ._result import ReplayResult as ReplayResult
from ._shrink import ShrinkResult as ShrinkResult
from ._shrink import shrink as shrink
