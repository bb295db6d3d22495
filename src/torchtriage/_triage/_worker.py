"""An exception raised inside a DataLoader worker, read back from its text.

A worker process cannot send its traceback object: torch re-raises, in the main process, an
exception of the same type whose message is "Caught X in DataLoader worker process N." followed
by the worker's formatted traceback. The main process's frames then end at the `for batch in
loader` line, while the user's faulty line (a `Dataset.__getitem__`, a `collate_fn`, a
transform) only appears in that text. This module parses it back: the worker's innermost user
frame, the original error line, and a stand-in exception of the original type and message so
that the classification rules read the worker's error, not the wrapper's.
"""

from __future__ import annotations

import dataclasses
import linecache
import re

from .._frames import UserFrame, is_user_file

_WRAPPER = re.compile(r"\ACaught (?P<type>[\w.]+) in DataLoader worker process (?P<worker>\d+)\.\n"
                      r"Original Traceback \(most recent call last\):\n(?P<tb>.*)\Z", re.DOTALL)
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
_HEADER = "Traceback (most recent call last):\n"


@dataclasses.dataclass(frozen=True)
class WorkerError:
    worker: int
    error: str  # "ValueError: bad sample 5", the worker's own last line
    frame: UserFrame | None  # the innermost user frame inside the worker
    proxy: BaseException | None  # the original type with the original message, for the rules


def read_worker_error(exc: BaseException) -> WorkerError | None:
    """The worker's error when `exc` is torch's re-raise of one, else None."""
    text = str(exc.args[0]) if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)
    m = _WRAPPER.match(text)
    if m is None:
        return None
    # A chained error in the worker prints its causes first: the last traceback is the raised one.
    tb = m.group("tb").rsplit(_HEADER, 1)[-1]
    frame: UserFrame | None = None
    lines = tb.splitlines()
    last_frame_at = -1
    for i, line in enumerate(lines):
        f = _FRAME.match(line)
        if f is None:
            continue
        last_frame_at = i
        if is_user_file(f.group("file")):
            n = int(f.group("line"))
            source = linecache.getline(f.group("file"), n).strip()
            if not source and i + 1 < len(lines) and lines[i + 1].startswith("    "):
                source = lines[i + 1].strip()
            frame = UserFrame(f.group("file"), n, f.group("func"), source)
    # The error text: the lines after the frames (a frame's code and caret lines are indented).
    tail = [ln for ln in lines[last_frame_at + 1:] if ln and not ln.startswith(" ")]
    error = "\n".join(tail) or m.group("type")
    original = error.split(": ", 1)[1] if ": " in error.split("\n", 1)[0] else ""
    proxy: BaseException | None
    try:
        proxy = type(exc)(original)
    except Exception:  # an exception type whose constructor needs other arguments
        proxy = None
    return WorkerError(int(m.group("worker")), error.splitlines()[0][:300], frame, proxy)
