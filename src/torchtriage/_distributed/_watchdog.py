"""The stall watchdog: a daemon thread per rank, since a blocked collective holds the main thread.

Every tick it writes this rank's heartbeat (time, last progress, pending collective, pid) to the
run directory. A stall is declared by a rank that has waited in a collective longer than the
stall timeout while no other rank made progress either (a rank busy evaluating while the others
wait at a barrier is progress, not a stall), or for `ENDED_GRACE` seconds after another rank
ended. Then every rank whose watchdog runs writes its Python stack, pending collective and report
(`dump-r.json`). A rank whose heartbeat stopped is blocked inside a C++ call that holds the
interpreter lock (DDP's bucket rebuild in forward does): its thread cannot run, so the leader
sends it SIGUSR2, on which `faulthandler` (C code, no interpreter lock needed) writes its stack
to `fh-r.txt`. The leader — the lowest rank whose watchdog runs — merges everything into one
report with the mismatch named, writes it through the session's writer, ends the blocked ranks
on its host, and every rank ends with `STALL_EXIT_CODE`: nothing stays hanging.

The timeout: `--stall-timeout` / `watch(stall_timeout=S)`, else `MULTIPLE` times the slowest
step seen, at least `FLOOR` seconds.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from .._catalogue import msg
from .._frames import find_frame, in_user_file, is_user_file

if TYPE_CHECKING:
    from ._checker import DistributedChecker

STALL_EXIT_CODE = 124  # as timeout(1): the job was ended for making no progress
FLOOR = 300.0
MULTIPLE = 20.0
ENDED_GRACE = 5.0
TICK = 0.25
HEARTBEAT_EVERY = 0.5
FROZEN_AFTER = 3.0  # a heartbeat older than this: that rank's watchdog cannot run
MERGE_WAIT = 8.0  # the leader waits this long for the other ranks' dumps
DONE_WAIT = 20.0  # other ranks wait this long for the leader's merged report before exiting
FH_SETTLE = 0.3  # a faulthandler dump is complete once its size held still this long
DUMP_SIGNAL = getattr(signal, "SIGUSR2", None)


class Watchdog(threading.Thread):
    def __init__(self, owner: DistributedChecker, timeout: float | None) -> None:
        super().__init__(name="torchtriage-watchdog", daemon=True)
        self.owner = owner
        self.fixed = timeout
        self._stop_event = threading.Event()
        self._main = threading.main_thread().ident
        self._last_hb = 0.0
        self.ended: dict[str, Any] | None = None
        self._fh: Any = None

    def timeout(self) -> float:
        if self.fixed is not None:
            return float(self.fixed)
        return max(FLOOR, MULTIPLE * self.owner.slowest_step)

    def stop(self) -> None:
        self._stop_event.set()

    # ------------------------------------------------------------------ faulthandler on SIGUSR2
    def register_dump(self) -> None:
        """Let the leader ask this process for its stack even when its interpreter is blocked.
        Only when SIGUSR2 has no handler of the user's (or a launcher's)."""
        o = self.owner
        if DUMP_SIGNAL is None or o.rundir is None or o.info is None:
            return
        try:
            if signal.getsignal(DUMP_SIGNAL) not in (signal.SIG_DFL, None):
                return
            # open for the session's life: faulthandler writes to it until _unregister_dump closes it
            self._fh = open(o.rundir.file(f"fh-{o.info.rank}.txt"), "w", encoding="utf-8")  # noqa: SIM115
            faulthandler.register(DUMP_SIGNAL, file=self._fh, all_threads=True, chain=False)
        except (OSError, ValueError, RuntimeError):
            self._fh = None

    def _unregister_dump(self) -> None:
        if self._fh is not None and DUMP_SIGNAL is not None:
            try:
                faulthandler.unregister(DUMP_SIGNAL)
                self._fh.close()
            except (OSError, ValueError, RuntimeError):
                pass
            self._fh = None

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        try:
            while not self._stop_event.wait(TICK):
                self._tick()
        except OSError:
            pass  # the run directory was removed: the job's report is out
        except Exception as e:  # our bug must never kill training; the watchdog just stops
            print(msg("internal.warning", where="distributed.watchdog", error=f"{type(e).__name__}: {e}"),
                  file=sys.stderr)
        finally:
            self._unregister_dump()

    def heartbeat(self) -> None:
        o = self.owner
        assert o.rundir is not None and o.info is not None
        o.rundir.write(f"hb-{o.info.rank}.json", {
            "rank": o.info.rank, "pid": os.getpid(), "host": o.info.host,
            "last_progress": o.tracker.last_progress, "pending": o.tracker.pending_dict(),
            "ended": self.ended, "time": time.time(), "dump_signal": self._fh is not None})

    def _tick(self) -> None:
        o = self.owner
        assert o.rundir is not None and o.info is not None
        now = time.time()
        if now - self._last_hb >= HEARTBEAT_EVERY:
            self._last_hb = now
            self.heartbeat()
        if o.rundir.exists("done.json") and not o.stalling:
            self._stop_event.set()  # the job's report is out (normal end); nothing left to watch
            return
        if o.rundir.exists("stall.json"):
            self._stalled(o.rundir.read("stall.json") or {})
            return
        pending = o.tracker.pending
        if pending is None or self.ended is not None:
            return
        waited = now - pending[2]
        timeout = self.timeout()
        if waited < min(timeout, ENDED_GRACE):
            return
        peers = [o.rundir.read(f"hb-{r}.json") for r in range(o.info.world_size) if r != o.info.rank]
        ended = any(p is not None and p.get("ended") for p in peers)
        limit = min(timeout, ENDED_GRACE) if ended else timeout
        if waited < limit:
            return
        for p in peers:
            if p is None or p.get("ended"):
                continue
            if now - float(p.get("last_progress", 0.0)) < limit:
                return  # that rank is still working: the wait may end
        o.rundir.write("stall.json", {"rank": o.info.rank, "seconds": waited, "op": pending[0]})
        print(msg("dist.stall_banner", rank=o.info.rank, seconds=waited, op=_op_label(pending[0])),
              file=sys.stderr)

    # ------------------------------------------------------------------ a stall
    def dump(self) -> dict[str, Any]:
        o = self.owner
        frame = sys._current_frames().get(self._main) if self._main is not None else None
        stack = _stack(frame)
        user = None
        f = find_frame(in_user_file, frame)
        if f is not None:
            user = {"file": f.f_code.co_filename, "line": f.f_lineno, "function": f.f_code.co_name}
        report = o.final_report
        for _ in range(5):  # the main thread may be inside Python and change the findings dict
            if report is not None:
                break
            try:
                assert o.session is not None
                report = o.session.report
            except RuntimeError:
                time.sleep(0.01)
        from .._findings import Report

        return o.record(report if report is not None else Report(), stalled=self.ended is None,
                        pending=o.tracker.pending_dict(), stack=stack, user_frame=user,
                        step=o.tracker.step, time=time.time())

    def _stalled(self, request: dict[str, Any]) -> None:
        o = self.owner
        assert o.rundir is not None and o.info is not None
        o.stalling = True
        rd = o.rundir
        rd.write(f"dump-{o.info.rank}.json", self.dump())
        now = time.time()
        beats = {r: rd.read(f"hb-{r}.json") for r in range(o.info.world_size)}
        alive = [r for r, hb in beats.items() if r == o.info.rank
                 or (hb is not None and now - float(hb.get("time", 0.0)) < FROZEN_AFTER)]
        if min(alive) == o.info.rank and rd.claim("leader"):
            # (claimed once: a blocked rank that wakes up later must not lead a second time)
            self._lead(request, beats, alive)
        if rd.wait(["done.json"], DONE_WAIT):
            rd.clear_own()
            rd.wait_gone("done.json", 3.0)
        sys.stderr.flush()
        os._exit(STALL_EXIT_CODE)

    def _lead(self, request: dict[str, Any], beats: dict[int, Any], alive: list[int]) -> None:
        """Merge every rank's dump (or, for a blocked rank, its faulthandler stack), write the
        report, end the blocked ranks of this host, then this process."""
        from ._merge import frozen_record, merge

        o = self.owner
        assert o.rundir is not None and o.info is not None
        rd = o.rundir
        frozen = [r for r in range(o.info.world_size) if r not in alive and beats.get(r)]
        for r in frozen:
            hb = beats[r]
            if hb.get("host") == o.info.host and hb.get("dump_signal") and DUMP_SIGNAL is not None:
                try:
                    os.kill(int(hb["pid"]), DUMP_SIGNAL)
                except (OSError, ValueError, KeyError):
                    pass
        records: dict[int, dict[str, Any]] = {}
        sizes: dict[int, tuple[int, float]] = {}

        def settled(r: int) -> bool:
            # faulthandler writes the dump line by line: read it once its size has held still
            try:
                size = os.path.getsize(rd.file(f"fh-{r}.txt"))
            except OSError:
                return False
            now = time.monotonic()
            if size == 0 or sizes.get(r, (-1, now))[0] != size:
                sizes[r] = (size, now)
                return False
            return now - sizes[r][1] >= FH_SETTLE and bool(_fh_stack(rd, r))

        deadline = time.monotonic() + MERGE_WAIT
        while time.monotonic() < deadline:
            for r in alive:
                if r not in records:
                    data = rd.read(f"dump-{r}.json") or rd.read(f"report-{r}.json")
                    if data is not None:
                        records[r] = data
            if len(records) == len(alive) and all(settled(r) for r in frozen
                                                  if beats[r].get("dump_signal")):
                break
            time.sleep(0.05)
        for r in frozen:
            records[r] = frozen_record(r, beats[r], _fh_stack(rd, r))
        report = merge(records, o.info.world_size, stall=request)
        try:
            o.stall_exit(report)
        finally:
            rd.write("done.json", {"rank": o.info.rank})
            # the others exit on done.json; leaving first would break their collectives (a gloo
            # peer that leaves raises in them) and print their tracebacks
            time.sleep(0.3)
            rd.clear()  # the others wait for done.json to go before they exit
            for r in frozen:
                hb = beats[r]
                if hb.get("host") == o.info.host:
                    try:
                        os.kill(int(hb["pid"]), signal.SIGTERM)
                    except (OSError, ValueError, KeyError):
                        pass
            time.sleep(0.3)
            os._exit(STALL_EXIT_CODE)


def _fh_stack(rd: Any, rank: int) -> list[str]:
    """The blocked thread of a faulthandler dump, innermost first: the thread that shows a user
    frame (the main thread runs the script), else the longest."""
    try:
        with open(rd.file(f"fh-{rank}.txt"), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return []
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]  # a line still being written is left out
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith(("Thread ", "Current thread ")):
            blocks.append([])
        elif line.strip().startswith("File ") and blocks:
            blocks[-1].append(line.strip())
    if not blocks:
        return []

    def has_user(block: list[str]) -> bool:
        return any(is_user_file(_fh_file(line)) for line in block)

    users = [b for b in blocks if has_user(b)]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [line for line in max(users or blocks, key=len)
            if not _fh_file(line).startswith((here + os.sep, "<frozen"))]


def _fh_file(line: str) -> str:
    # 'File "/path/x.py", line 12 in f'
    start = line.find('"')
    end = line.find('"', start + 1)
    return line[start + 1:end] if start >= 0 and end > start else ""


def _stack(frame: Any) -> list[str]:
    """The blocked thread's stack as 'file:line in function', the user's frames and the
    innermost library frame (where it blocks), without torchtriage's own."""
    if frame is None:
        return []
    entries = traceback.extract_stack(frame)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    kept = [e for e in entries if is_user_file(e.filename)]
    inner = [e for e in entries if not os.path.abspath(e.filename).startswith(here + os.sep)]
    if inner and (not kept or inner[-1] is not kept[-1]):
        kept.append(inner[-1])
    return [f"{e.filename}:{e.lineno} in {e.name}" + (f": {e.line.strip()}" if e.line else "") for e in kept[-8:]]


def _op_label(op: str) -> str:
    if op in ("backward", "ddp_forward"):
        return msg("dist.op.backward" if op == "backward" else "dist.op.forward")
    return op
