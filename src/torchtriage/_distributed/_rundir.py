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
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
            os.replace(tmp, self.file(name))
        except OSError:
            # the folder was removed (the job's report is out) or the disk refuses: the
            # readers time out on a missing file; never an error in the user's run
            self.remove(tmp.rpartition(os.sep)[2])

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

    def clear_own(self) -> None:
        """Remove this rank's own files (and the folder once empty): the other ranks' end."""
        for name in (f"hb-{self.rank}.json", f"report-{self.rank}.json", f"dump-{self.rank}.json",
                     f"fh-{self.rank}.txt", "stall.json", "leader"):
            self.remove(name)
        try:
            os.rmdir(self.path)
        except OSError:
            pass

    def wait_gone(self, name: str, timeout: float) -> None:
        """Wait until `name` is removed (the leader cleaned up): leaving earlier makes torchrun
        stop the leader mid-way when this rank's exit code is not 0."""
        deadline = time.monotonic() + timeout
        while self.exists(name) and time.monotonic() < deadline:
            time.sleep(0.05)

    def clear(self) -> None:
        """Remove the folder's files (rank 0, once every rank's report is in)."""
        try:
            for n in os.listdir(self.path):
                self.remove(n)
            os.rmdir(self.path)
        except OSError:
            pass


class StoreRunDir(RunDir):
    """The same exchange through a store as well, so that ranks on several hosts meet without a
    shared folder: torchrun's agent store (a TCPStore the launching agent serves, shared by
    every host, alive after a worker dies), else the store the process group was created on
    (`mp.spawn`, a launcher of your own). Every file is also written locally; a store that
    stops answering is dropped and the files carry on."""

    NAMES = ("hb-{r}.json", "report-{r}.json", "dump-{r}.json")
    SHARED = ("stall.json", "done.json", "leader")

    def __init__(self, path: str, rank: int, world_size: int, store: Any) -> None:
        super().__init__(path, rank, world_size)
        self.store: Any = store

    def _call(self, fn: str, *args: Any) -> Any:
        if self.store is None:
            return None
        try:
            return getattr(self.store, fn)(*args)
        except Exception:  # the agent is gone or the connection broke: files only from now on
            self.store = None
            return None

    def write(self, name: str, data: Any) -> None:
        super().write(name, data)
        self._call("set", name, json.dumps(data))

    def read(self, name: str) -> Any:
        found = super().read(name)
        if found is not None:
            return found
        if self._call("check", [name]):
            raw = self._call("get", name)
            if raw is not None:
                try:
                    return json.loads(bytes(raw).decode("utf-8"))
                except ValueError:
                    return None
        return None

    def exists(self, name: str) -> bool:
        return super().exists(name) or bool(self._call("check", [name]))

    def claim(self, name: str) -> bool:
        if self.store is not None:
            got = self._call("add", name, 1)
            if got is not None:
                return bool(got == 1)
        return super().claim(name)

    def clear(self) -> None:
        super().clear()
        for r in range(self.world_size):
            for pattern in self.NAMES:
                self._call("delete_key", pattern.format(r=r))
        for name in self.SHARED:
            self._call("delete_key", name)


def open_rundir(path: str, rank: int, world_size: int) -> RunDir:
    """A `StoreRunDir` under torchrun (its agent serves the store), else one on the store of the
    process group already initialized (`mp.spawn`, a launcher of your own: `watch()` comes after
    `init_process_group`), else a folder only."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        store = _group_store()
        if store is None:
            return RunDir(path, rank, world_size)
        return StoreRunDir(path, rank, world_size, store)
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        return RunDir(path, rank, world_size)
    try:
        import datetime

        import torch.distributed as dist

        client = dist.TCPStore(addr, int(port), is_master=False, timeout=datetime.timedelta(seconds=5))
        prefix = "torchtriage/{}/{}/".format(os.environ.get("TORCHELASTIC_RUN_ID", ""),
                                             os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        store = dist.PrefixStore(prefix, client)
    except Exception:
        return RunDir(path, rank, world_size)
    return StoreRunDir(path, rank, world_size, store)


def _group_store() -> Any:
    """The store the default process group was created on (its TCPStore is served by a thread
    of rank 0's process: it answers while the group's collectives are blocked), or None."""
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return None
        from torch.distributed.distributed_c10d import _get_default_store

        return dist.PrefixStore("torchtriage/", _get_default_store())
    except Exception:  # another torch, a group without a store: the folder carries the exchange
        return None
