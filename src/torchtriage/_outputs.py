"""Writing an output file the way a shell redirection (`> PATH`) would, checked up front.

Every command that writes a file the user named (`run --json/--html`, `report --html`,
`splits --json`, ...) goes through these two functions (issue 10):

- `check_output(path, flag)`: before any work (before the user's script runs), the one-line
  reason `path` cannot be written, or None. Nothing is created or changed.
- `write_output(path, data, flag)`: writes `data` (str or bytes); raises `OutputError`, whose
  message is one line, when it cannot. Callers print it and exit with code 2.

What a path means:

- `-` is standard output.
- A symlink is followed: its target is written, the link stays.
- A regular file (or a new one) is written atomically: a temporary file in the same folder,
  flushed, then renamed over the target, keeping an existing file's permission bits. A failed
  write leaves the old file as it was. When the folder refuses a new file but the file itself is
  writable, it is written in place, as the shell would.
- Anything else that exists (a FIFO, a character device such as /dev/null or /dev/full, a
  socket) is opened and written in place, never replaced. A write error (/dev/full: no space
  left) is an `OutputError`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile

from ._catalogue import msg

STDOUT = "-"


class OutputError(OSError):
    """An output file could not be written; `str(e)` is the one line to show."""


def _reason(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


def _target(path: str) -> str:
    # Follow symlinks (a dangling one names the file to create, as with `>`).
    return os.path.realpath(path)


def check_output(path: str, flag: str) -> str | None:
    """The one-line reason `path` cannot be written, or None. Creates and changes nothing
    (a probe file in the folder is removed at once)."""
    if path == STDOUT:
        return None
    target = _target(path)
    try:
        st = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        return msg("outputs.unwritable", flag=flag, path=path, reason=_reason(e))
    if st is not None and stat.S_ISDIR(st.st_mode):
        return msg("outputs.is_folder", flag=flag, path=path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        # FIFO, device, socket: written in place; opening a FIFO to probe it would block.
        return None if os.access(target, os.W_OK) else msg(
            "outputs.unwritable", flag=flag, path=path, reason=os.strerror(13))
    folder = os.path.dirname(target) or "."
    if not os.path.isdir(folder):
        shown = folder if os.path.islink(path) else os.path.dirname(os.path.abspath(path))
        return msg("outputs.no_folder", flag=flag, path=path, folder=shown)
    probe = _probe(folder)
    if probe is None:
        return None
    if st is not None and os.access(target, os.W_OK):
        return None  # the folder refuses new files; the file itself is written in place
    return msg("outputs.unwritable", flag=flag, path=path, reason=probe)


def _probe(folder: str) -> str | None:
    """None when a new file can be created in `folder`, else why not."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".torchtriage-", suffix=".probe")
    except OSError as e:
        return _reason(e)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return None


def write_output(path: str, data: str | bytes, flag: str) -> None:
    """Write `data` to `path` as `> path` would (see the module docstring)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if path == STDOUT:
        try:
            sys.stdout.flush()
            sys.stdout.buffer.write(raw)
            sys.stdout.buffer.flush()
        except (OSError, ValueError) as e:
            raise OutputError(msg("outputs.write_failed", flag=flag, path=path,
                                  reason=_reason(e) if isinstance(e, OSError) else str(e))) from None
        return
    target = _target(path)
    try:
        st: os.stat_result | None = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise OutputError(msg("outputs.unwritable", flag=flag, path=path, reason=_reason(e))) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(msg("outputs.is_folder", flag=flag, path=path))
    try:
        # a FIFO or a device is written in place, as is a file whose folder refuses a temporary file
        special = st is not None and not stat.S_ISREG(st.st_mode)
        if special or not _write_atomic(target, raw, st):
            _write_in_place(target, raw)
    except OSError as e:
        raise OutputError(msg("outputs.write_failed", flag=flag, path=path, reason=_reason(e))) from None


def _write_in_place(target: str, raw: bytes) -> None:
    # O_TRUNC as `>` does (ignored by FIFOs and devices); no O_CREAT race with a rename.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        view = memoryview(raw)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def _write_atomic(target: str, raw: bytes, st: os.stat_result | None) -> bool:
    """Write through a temporary file renamed over `target`; False when the folder refuses
    the temporary file (then the caller writes in place)."""
    folder = os.path.dirname(target) or "."
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    except OSError:
        if st is not None and os.access(target, os.W_OK):
            return False
        raise
    try:
        try:
            view = memoryview(raw)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True


def check_folder_output(path: str, flag: str) -> str | None:
    """The one-line reason the folder `path` (created when missing, with its parents) cannot
    receive files, or None; for `--bundle DIR`, checked before the script runs."""
    target = _target(path)
    if os.path.exists(target) and not os.path.isdir(target):
        return msg("outputs.not_folder", flag=flag, path=path)
    existing = target
    while not os.path.exists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        return msg("outputs.not_folder", flag=flag, path=path)
    problem = _probe(existing)
    return None if problem is None else msg("outputs.unwritable", flag=flag, path=path, reason=problem)
