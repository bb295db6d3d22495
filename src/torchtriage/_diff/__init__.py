"""`torchtriage diff`: the first place where two runs part (issue 28).

    _fingerprint.py  a tensor's value in a few numbers; the dtype's tolerance
    _record.py       `OpRecorder`, the check that records a run's first steps op by op
    _weights.py      which tensor of one run is which of the other (name, else shape and order)
    _store.py        a step record on disk (record.json + init.safetensors)
    _side.py         `run --record DIR`: one side, as the `run` command runs it
    _align.py        align two op sequences; the first difference, or "structurally different"
    _compare.py      two records → a `Report`
    _driver.py       the CLI's two sides: scripts, modules, a git revision, saved records
    _api.py          `torchtriage.diff(step_fn_a, step_fn_b, batch)`, in-process
"""

from ._api import diff as diff
from ._compare import compare as compare
from ._record import OpRecorder as OpRecorder
