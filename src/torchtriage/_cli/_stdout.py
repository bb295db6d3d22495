"""Standard output of a torchtriage command, guarded like the files it writes (issue 10).

`torchtriage report r.json > /dev/full` (or a full disk, or a file-size limit) made `print`
raise `OSError` from our code: a Python traceback. While a command other than `run` works,
`sys.stdout` is a thin proxy whose `write` / `flush` turn an `OSError` into `StdoutError`; the
command front prints one line and exits 2. A closed pipe (`torchtriage env | head -1`) ends the
command quietly, with the status a shell gives a writer killed by SIGPIPE (141). `run` keeps the
real stream: the user's script writes to it, and its errors are the script's own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from typing import Any

SIGPIPE_EXIT = 141  # 128 + SIGPIPE, as a shell reports a writer whose reader went away


class StdoutError(OSError):
    """Writing to standard output failed."""


class _Guarded:
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            raise StdoutError(e.errno, e.strerror) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise StdoutError(e.errno, e.strerror) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    real = sys.stdout
    if real is None:
        yield
        return
    sys.stdout = _Guarded(real)
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = real


def abandon_stdout() -> None:
    """Point file descriptor 1 at /dev/null so that the interpreter's last flush of what is
    still buffered does not fail again ("Exception ignored ...") after the one-line error."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)


def is_broken_pipe(e: OSError) -> bool:
    return e.errno == errno.EPIPE
