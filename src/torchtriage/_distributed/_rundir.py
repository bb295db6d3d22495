"""The run directory: small JSON files the ranks of one job exchange, written atomically.

Files (per rank `r`): `hb-r.json` the heartbeat (last progress, pending collective, ended),
`report-r.json` the rank's report at its end, `dump-r.json` its stack and report during a
stall; `stall.json` a stall declared by some rank; `done.json` rank 0 wrote the merged report.
Files work when the process group is blocked or gone (a stall, a crashed rank); on several
hosts the folder must be shared (TORCHTRIAGE_RUN_DIR).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any


class RunDir:
    def __init__(self, path: str, rank: int, world_size: int) -> None:
        self.path = path
        self.rank = rank
        self.world_size = world_size
        # Files from an earlier job in the same folder (a reused TORCHTRIAGE_RUN_DIR) are older
        # than this job's start: ignored. Ranks start within seconds of each other.
        self.since = time.time() - 120.0
        os.makedirs(path, exist_ok=True)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def write(self, name: str, data: Any) -> None:
        tmp = self.file(f".{name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, self.file(name))

    def read(self, name: str) -> Any:
        try:
            if os.path.getmtime(self.file(name)) < self.since:
                return None
            with open(self.file(name), encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def claim(self, name: str) -> bool:
        """Create `name` if no one has (atomic): True for the one caller that created it."""
        path = self.file(name)
        try:
            if os.path.getmtime(path) < self.since:
                os.remove(path)  # left by an earlier job
        except OSError:
            pass
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except OSError:
            return False
        os.close(fd)
        return True

    def exists(self, name: str) -> bool:
        try:
            return os.path.getmtime(self.file(name)) >= self.since
        except OSError:
            return False

    def remove(self, name: str) -> None:
        try:
            os.remove(self.file(name))
        except OSError:
            pass

    def wait(self, names: list[str], timeout: float, interval: float = 0.05) -> dict[str, Any]:
        """The files among `names` that exist within `timeout` seconds (read as they come)."""
        got: dict[str, Any] = {}
        deadline = time.monotonic() + timeout
        while True:
            for n in names:
                if n not in got:
                    data = self.read(n)
                    if data is not None:
                        got[n] = data
            if len(got) == len(names) or time.monotonic() >= deadline:
                return got
            time.sleep(interval)

    def clear(self) -> None:
        """Remove the folder's files (rank 0, once every rank's report is in)."""
        try:
            for n in os.listdir(self.path):
                self.remove(n)
            os.rmdir(self.path)
        except OSError:
            pass
