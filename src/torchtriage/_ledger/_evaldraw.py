"""Which code draws the random numbers an evaluation sample is made with (session 15).

An evaluation is a function of the weights: two evaluations of the same model agree. When an
evaluation loader delivered other values for the same samples in two passes (`_repeatable.py`),
`probe` reads one of those samples twice more from the loader's dataset, at the end of the run,
with the torch, `random` and NumPy global generators saved before and restored after (the
user's random stream is left as it was) and the session paused. A profile function
(`sys.setprofile`, the previous one put back) digests the three global generators' states when a
function of the user's code is called and when it returns: one that returns with a state moved
drew (the innermost first), with the line of the dataset's `__getitem__` that led to it. A draw
inside another object than the dataset (`self.transform(x)` -> `RandomResizedCrop.__call__`) is a
random transform; a draw in `__getitem__` itself (a pair's other sample drawn at random) is the dataset's own sampling.

Evidence: the transform's class, the user's line that applies it, the largest difference of
the two reads of the sample (and its scale).
"""

from __future__ import annotations

import ast
import dataclasses
import random
import sys
import types
from typing import Any

import numpy as np
import torch

from .._frames import UserFrame, in_user_file, user_frame_of, user_frame_of_line
from .._loaderstream import tensors as sample_tensors
from .._source import parsed


@dataclasses.dataclass
class Draw:
    transform: str | None  # the class whose method drew (None: the dataset's own __getitem__)
    at: UserFrame | None  # the innermost user frame that drew
    applied: UserFrame | None  # the line in the dataset's __getitem__ that led to the draw
    difference: float  # the largest absolute difference of the two reads
    scale: float  # the largest absolute value of the first read


def _state() -> tuple[int, int, int]:
    """The global generators' states, digested: torch's CPU generator, `random`'s, NumPy's."""
    np_state: Any = np.random.get_state()
    return (hash(torch.get_rng_state().numpy().tobytes()), hash(random.getstate()),
            hash((int(np_state[2]), np_state[1].tobytes())))


def _note(frame: types.FrameType, dataset: Any) -> tuple[str | None, UserFrame | None, UserFrame | None]:
    inner: types.FrameType | None = None
    f: types.FrameType | None = frame
    applied: types.FrameType | None = None
    depth = 0
    while f is not None and depth < 64:
        depth += 1
        if inner is None and in_user_file(f):
            inner = f
        if f.f_code.co_name == "__getitem__" and f.f_locals.get("self") is dataset:
            applied = f
            break
        f = f.f_back
    if inner is None or applied is None:
        return None, None, None
    me = inner.f_locals.get("self")
    transform = None if me is None or me is dataset else type(me).__name__
    return transform, user_frame_of(inner), user_frame_of(applied)


def probe(session: Any, dataset: Any, index: int) -> Draw | None:
    """Read `dataset[index]` twice; None when it cannot be read or the reads agree."""
    torch_state = torch.get_rng_state()
    py_state = random.getstate()
    np_state = np.random.get_state()
    found: list[tuple[str | None, UserFrame | None, UserFrame | None]] = []
    calls: list[tuple[types.FrameType, tuple[int, int, int]]] = []

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        # a function of the user's that returns with a generator's state moved drew (innermost first)
        if event == "call" and len(calls) < 64 and in_user_file(frame):
            calls.append((frame, _state()))
        elif event == "return" and calls and calls[-1][0] is frame:
            _, before = calls.pop()
            if len(found) < 8 and _state() != before:
                found.append(_note(frame, dataset))

    previous = sys.getprofile()
    try:
        with session.paused(), torch.no_grad():
            sys.setprofile(profile)
            try:
                first = dataset[index]
                second = dataset[index]
            finally:
                sys.setprofile(previous)
    except Exception:
        return None
    finally:
        torch.set_rng_state(torch_state)
        random.setstate(py_state)
        np.random.set_state(np_state)
    a = [t for t in sample_tensors(_as_tensors(first)) if t.is_floating_point() or t.dim() >= 2]
    b = [t for t in sample_tensors(_as_tensors(second)) if t.is_floating_point() or t.dim() >= 2]
    diff, scale = 0.0, 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            diff = float("inf")
            continue
        x, y = x.detach().double(), y.detach().double()
        if x.numel():
            diff = max(diff, float((x - y).abs().max()))
            scale = max(scale, float(x.abs().max()))
    if diff == 0.0 or not found:
        return None
    located = [d for d in found if d[2] is not None]
    transform = next((d for d in located if d[0] is not None), None)
    pick = transform or (located[0] if located else None)
    if pick is None:
        return None
    return Draw(pick[0], pick[1], pick[2], diff, scale)


def _as_tensors(sample: Any) -> Any:
    """A sample's arrays as tensors (a dataset may return NumPy arrays; the collate converts them)."""
    if isinstance(sample, np.ndarray) and sample.dtype.kind in "fiu":
        return torch.from_numpy(np.ascontiguousarray(sample))
    if isinstance(sample, dict):
        return {k: _as_tensors(v) for k, v in sample.items()}
    if isinstance(sample, (list, tuple)):
        return [_as_tensors(v) for v in sample]
    return sample


def dataset_line(made: UserFrame | None, loop: UserFrame | None = None, name: str = "") -> UserFrame | None:
    """Where the dataset a loader reads was built: the loader's first argument at the line that made
    it (`DataLoader(test_set, ...)`), a name assigned last before that line (`test_set = Faces(...,
    transform=test_transform)`); the loader's line when its dataset is built in the call itself. A
    loader made before the session began is found by its name, assigned before the loop over it."""
    if made is None:
        if loop is None or not name:
            return None
        line = _assigned(loop.file, name, loop.line)
        if not line:
            return None
        made = user_frame_of_line(loop.file, line, loop.function)
    tree = parsed(made.file)
    if tree is None:
        return None
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == made.line and n.args), None)
    if call is None:
        return None
    first = call.args[0]
    if isinstance(first, ast.Call):
        return made
    target = ast.unparse(first) if isinstance(first, (ast.Name, ast.Attribute)) else ""
    line = _assigned(made.file, target, made.line) if target else 0
    return user_frame_of_line(made.file, line, made.function) if line else None


def _assigned(file: str, name: str, before: int) -> int:
    """The last line before `before` that assigns `name` (`test_set = ...`, `self.val_loader = ...`), else
    the only one in the file."""
    tree = parsed(file)
    if tree is None:
        return 0
    lines = [n.lineno for n in ast.walk(tree)
             if isinstance(n, ast.Assign) and any(ast.unparse(t) == name for t in n.targets)]
    earlier = [n for n in lines if n < before]
    if earlier:
        return max(earlier)
    return lines[0] if len(lines) == 1 else 0  # (a loop in a function defined before the line that made it)
