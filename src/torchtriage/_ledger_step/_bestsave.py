"""A "best" checkpoint overwritten by a worse model (session 13).

A file a loop writes only when the validation result improves (`best.pt`, `checkpoint.pt` of an
early stopper) must hold the best result seen, so the sequence of values it was written with is
monotone in the tracked metric. Bookkeeping bugs break it without any error: the best value not
restored on resume (reset to `{}` / `None` / `inf`, so the next, worse, epoch counts as a new
best), an early stopper's `min_delta` with the wrong sign (`score < best - delta` lets every
slightly worse epoch through), a comparison in the wrong direction.

Measured: every `torch.save(obj, path)` to a file path is noted with the step and the float
values in sight: the saved dict's float entries and the float locals of the two innermost user
frames (the function that saves and its caller: `val_loss`, `metric`, `score`). A path is judged
when it was written at least `MIN_SAVES` times, not at every evaluation (some gap between its
writes at least twice the shortest: a conditional save, not a "latest" file written every
epoch), by a value that a best-so-far record stands beside at half its writes or more (another
name in sight holds the same number, or its negation: `self.best_score = score`,
`best_metrics[name] = metric`, `best = acc`; a periodic save of the latest loss has none). The
file is consistent when a value that changes between its writes is monotone over them and
recorded at every write (the tracked metric, whatever its direction). Otherwise the recorded
value with the fewest worse writes is taken as the metric, better in the direction of its first
change (a run improves first), and a write worse than one before it is the finding. Warning when
the file ends holding a worse value than one written before (the model the user will load is
not the best); info when a later write put a better one back.

Cost: one wrapper on `torch.save`; a look at two frames' locals per call. No tensor read.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, find_frame, in_user_file, user_frame_of, user_frame_of_line
from ._bestguard import Guard, guard_of, resolve_name

MIN_SAVES = 3
MAX_SAVES = 512  # writes kept per path
MAX_PATHS = 64
SHOWN = 12  # values shown in the evidence


@dataclasses.dataclass
class Save:
    step: int
    values: dict[str, float]
    frames: dict[str, UserFrame]  # value name -> the frame it was read in
    owner: dict[str, str]  # value name -> the class of that frame's `self`
    order: dict[str, int]  # value name -> 0 the saved dict, 1 the saving function, 2 its caller
    named: dict[str, float]  # every float in sight by its bare name (locals, `self`'s attributes)
    path: str = ""
    scores: frozenset[str] = frozenset()  # the names the save's guard compares with a running best
    guards: tuple[tuple[Guard, str], ...] = ()  # (the guard, the file it is in)
    losses: tuple[float, ...] = ()  # the last training losses the run recorded (the step's read)
    evaluations: int = 0  # evaluation forwards (eval mode, no grad) seen before this save


def _is_float(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, float):
        return v == v
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return False
    return isinstance(v, np.floating) and bool(v == v)


class BestSaves:
    def __init__(self, session: Any, checkpoints: Any = None) -> None:
        self.session = session
        self.checkpoints = checkpoints  # `_resume.CheckpointWatch`: every write, for what a resume restores
        self.paths: dict[str, list[Save]] = {}
        self.sites: dict[tuple[str, int, int], list[Save]] = {}  # (file, line, id of its `self`) -> writes
        self.evaluations = 0
        self._site: tuple[str, int, int] | None = None

    def evaluation_forward(self) -> None:
        self.evaluations += 1

    def install(self) -> None:
        original = torch.save
        watch = self

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if isinstance(f, (str, os.PathLike)) and not watch.session.busy:
                try:
                    made = watch.note(obj, f)
                    if watch.checkpoints is not None:
                        watch.checkpoints.saved(obj, f, made)
                except Exception as e:  # our bug: the user's file is written regardless
                    watch.session.internal_error("step_ledger.best_save", e)
            return original(obj, f, *args, **kwargs)

        save.__wrapped__ = original  # type: ignore[attr-defined]
        self.session.patch(torch, "save", save)

    def note(self, obj: Any, f: Any) -> Save | None:
        path = os.path.abspath(os.fspath(f))
        saves = self.paths.get(path)
        if saves is None:
            if len(self.paths) >= MAX_PATHS:
                return None
            saves = self.paths[path] = []
        if len(saves) >= MAX_SAVES:
            return None
        save = self._read(obj, path)
        saves.append(save)
        site = self._site
        if site is not None and (site in self.sites or len(self.sites) < MAX_PATHS):
            group = self.sites.setdefault(site, [])
            if len(group) < MAX_SAVES:
                group.append(save)
        return save

    def _read(self, obj: Any, path: str) -> Save:
        self._site = None
        values: dict[str, float] = {}
        frames: dict[str, UserFrame] = {}
        owner: dict[str, str] = {}
        order: dict[str, int] = {}
        named: dict[str, float] = {}
        frame = find_frame(in_user_file, sys._getframe(2), depth=64)
        if isinstance(obj, Mapping):
            me = frame.f_locals.get("self") if frame is not None else None
            for k, v in obj.items():
                if isinstance(k, str) and _is_float(v):
                    key = f"[{k!r}]"
                    values[key], order[key] = float(v), 0
                    if frame is not None:
                        frames[key] = user_frame_of(frame)
                    if me is not None:
                        owner[key] = type(me).__name__
        if frame is not None:
            self._site = (frame.f_code.co_filename, frame.f_lineno, id(frame.f_locals.get("self")))
        seen = 0
        scores: set[str] = set()
        guards: list[tuple[Guard, str]] = []
        while frame is not None and seen < 2:
            seen += 1
            uf = user_frame_of(frame)
            me = frame.f_locals.get("self")
            g = guard_of(frame)
            if g is not None and g.scores:
                guards.append((g, frame.f_code.co_filename))
                for name in g.scores:
                    v = resolve_name(name, frame)
                    if _is_float(v):
                        key = f"{frame.f_code.co_name}:{name}"
                        values[key], order[key], frames[key] = float(v), seen, uf
                        scores.add(name)
                        if me is not None:
                            owner[key] = type(me).__name__
            for name, v in list(frame.f_locals.items()):
                if _is_float(v):
                    key = f"{frame.f_code.co_name}:{name}"
                    values[key], order[key] = float(v), seen
                    named[name] = float(v)
                    frames[key] = uf  # the outermost frame that holds it wins
                    if me is not None:
                        owner[key] = type(me).__name__
            _attributes(me, named)
            frame = find_frame(in_user_file, frame.f_back, depth=64)
        return Save(self.session.step, values, frames, owner, order, named, path, frozenset(scores), tuple(guards),
                    self._losses(), self.evaluations)

    def _losses(self) -> tuple[float, ...]:
        """The newest training losses the run recorded (every loss line's last, the one before the
        first line's: a read judged one step late)."""
        health = self.session.health
        out: list[float] = []
        for name in health.names():
            if name == "loss" or name.startswith("loss "):
                pts = health.points(name)[-2:] if name == "loss" else health.points(name)[-1:]
                out.extend(v for _, v in pts if isinstance(v, float) and math.isfinite(v))
        return tuple(out)

    # ------------------------------------------------------------------ judging
    def end(self) -> list[Finding]:
        out = []
        for path, saves in self.paths.items():
            f = self._judge(path, saves)
            if f is not None:
                out.append(f)
        for group in self.sites.values():
            # a site writing a new file name each time (the step or the score in it): judged as one file
            if len({s.path for s in group}) > 1 and all(len(self.paths.get(s.path, ())) < MIN_SAVES for s in group):
                f = self._judge(group[-1].path, group)
                if f is not None:
                    out.append(f)
        return out

    def _judge(self, path: str, saves: list[Save]) -> Finding | None:
        if len(saves) < MIN_SAVES or not _skips_evaluations([s.step for s in saves]):
            return None
        names = set(saves[0].values)
        for s in saves[1:]:
            names &= set(s.values)
        # the names the save's guard compares with a running best: the metric, when known
        guarded = {n for n in names if 2 * sum(_bare(n) in s.scores for s in saves) >= len(saves)}
        if guarded:
            # the guard's score and the names that hold the same number at every write (`val_loss` saved
            # beside `score = -val_loss`): the saved dict's name is shown first
            records = {r for s in saves for g, _ in s.guards for r in g.records}
            names = guarded | {n for n in names if _bare(n) not in records
                               and all(any(abs(s.values[n]) == abs(s.values[g]) for g in guarded) for s in saves)}
        best: tuple[int, int, int, str, list[int]] | None = None  # (violations, -majority, order, name, bad)
        for name in sorted(names):
            series = [s.values[name] for s in saves]
            if len(set(series)) < 2:
                continue  # a constant (a learning rate, a delta): not the metric
            ups = sum(b > a for a, b in zip(series, series[1:]))
            downs = sum(b < a for a, b in zip(series, series[1:]))
            hits = _recorded(saves, name)
            chosen = bool(guarded) or 2 * hits >= len(saves)
            if chosen and _on_training_loss(saves, name):
                return self._training(path, saves, name)
            if ups == 0 or downs == 0:
                if hits == len(saves) or guarded:
                    return None  # monotone, recorded at every write: the tracked metric, and the file follows it
                continue  # (a best-so-far record itself, or a value that only happens to grow)
            if not chosen:
                continue  # no best-so-far value kept beside it: not a best file's metric
            higher = _first_change(series) > 0  # a run improves first: its early writes say which way is better
            bad = _worse_writes(series, higher)
            cand = (len(bad), -max(ups, downs), saves[0].order.get(name, 3), name, bad)
            if best is None or cand < best:
                best = cand
        if best is None or not best[4]:
            return None
        name, bad = best[3], best[4]
        return self._finding(path, saves, name, bad)

    def _training(self, path: str, saves: list[Save], name: str) -> Finding:
        series = [s.values[name] for s in saves]
        last = saves[-1]
        metric = _bare(name)
        frame = last.frames.get(name)
        source = _source_of(saves, metric)
        if source is not None:
            frame = user_frame_of_line(source[0], source[1], "")
        evaluated = last.evaluations > 0
        evidence: dict[str, Any] = {
            "path": path, "files": len({s.path for s in saves}), "writes": len(saves), "metric": metric,
            "values_compared": [round(v, 6) for v in series[:SHOWN]] + (["..."] if len(series) > SHOWN else []),
            "training_loss_at_write": [round(next(v for v in s.losses if _matches(s.values[name], (v,))), 6)
                                       for s in saves[:SHOWN]] + (["..."] if len(saves) > SHOWN else []),
            "steps_written": [s.step for s in saves[:SHOWN]] + (["..."] if len(saves) > SHOWN else []),
            "evaluation_forwards_before_last_write": last.evaluations}
        if source is not None:
            evidence["score_computed_at"] = f"{source[0]}:{source[1]}"
        save_frame = last.frames.get(name)
        if save_frame is not None:
            evidence["save_line"] = f"{save_frame.file}:{save_frame.line}"
        fields = {"file": os.path.basename(path), "writes": len(saves), "metric": metric,
                  "evaluations": last.evaluations}
        key = "ledger.best_checkpoint_on_training_loss" + ("" if evaluated else ".no_evaluation")
        return from_catalogue(Category.OTHER, "other.best_checkpoint_on_training_loss", key, fields=fields,
                              cause_key="ledger.best_checkpoint_on_training_loss.cause",
                              next_key="ledger.best_checkpoint_on_training_loss.next", frame=frame,
                              evidence=evidence, source_line=True,
                              severity=Severity.WARNING if evaluated else Severity.INFO,
                              stage=Stage.PARAMETER, step=saves[0].step, op="torch.save",
                              module=last.owner.get(name))

    def _finding(self, path: str, saves: list[Save], name: str, bad: list[int]) -> Finding:
        series = [s.values[name] for s in saves]
        higher = _first_change(series) > 0
        pick = max if higher else min
        top = pick(range(len(series)), key=lambda i: series[i])
        top_value = series[top]
        final = series[-1]
        ends_worse = (final < top_value) if higher else (final > top_value)
        first_bad = bad[0]
        before = pick(series[:first_bad])
        last = saves[-1]
        frame = last.frames.get(name)
        metric = _bare(name)
        evidence: dict[str, Any] = {
            "path": path, "writes": len(saves), "metric": metric, "better": "higher" if higher else "lower",
            "values_written": [round(v, 6) for v in series[:SHOWN]] + (["..."] if len(series) > SHOWN else []),
            "steps_written": [s.step for s in saves[:SHOWN]] + (["..."] if len(saves) > SHOWN else []),
            "worse_writes": len(bad), "first_worse_step": saves[first_bad].step,
            "first_worse_value": round(series[first_bad], 6), "best_before_it": round(before, 6),
            "best_written": round(top_value, 6), "best_written_step": saves[top].step,
            "final_value": round(final, 6)}
        fields = {"file": os.path.basename(path), "writes": len(saves), "bad": len(bad), "metric": metric,
                  "value": f"{series[first_bad]:.6g}", "before": f"{before:.6g}", "final": f"{final:.6g}",
                  "best": f"{top_value:.6g}", "step": saves[first_bad].step,
                  "direction": "higher" if higher else "lower"}
        key = "ledger.best_checkpoint_regressed" + ("" if ends_worse else ".restored")
        cause = "ledger.best_checkpoint_regressed.cause"
        unguarded = _unguarded(saves, metric)
        if unguarded is not None:
            # the running best is set outside the branch that saves: it follows every evaluation
            record, file, line = unguarded
            evidence.update(best_record=record, record_set_every_evaluation_at=f"{file}:{line}")
            fields.update(record=record, record_line=line)
            cause = "ledger.best_checkpoint_regressed.cause.unguarded"
        return from_catalogue(Category.OTHER, "other.best_checkpoint_regressed", key, fields=fields,
                              cause_key=cause,
                              next_key="ledger.best_checkpoint_regressed.next", frame=frame, evidence=evidence,
                              source_line=True, severity=Severity.WARNING if ends_worse else Severity.INFO,
                              stage=Stage.PARAMETER, step=saves[first_bad].step, op="torch.save",
                              module=last.owner.get(name))


def _source_of(saves: list[Save], metric: str) -> tuple[str, int] | None:
    for s in reversed(saves):
        for g, _ in s.guards:
            for name, file, line in g.sources:
                if name == metric:
                    return file, line
    return None


def _skips_evaluations(steps: list[int]) -> bool:
    """The writes are not one per evaluation: some gap is at least twice the shortest."""
    gaps = [b - a for a, b in zip(steps, steps[1:])]
    if not gaps or min(gaps) <= 0:
        return False
    return max(gaps) >= 2 * min(gaps)


def _attributes(me: Any, named: dict[str, float]) -> None:
    """The float attributes of a frame's `self` (and the floats of its dict attributes), by name."""
    if me is None:
        return
    try:
        attrs = vars(me)
    except TypeError:
        return
    for name, v in list(attrs.items())[:256]:
        if _is_float(v):
            named[f"self.{name}"] = float(v)
        elif isinstance(v, dict) and len(v) <= 64:
            for k, w in v.items():
                if _is_float(w):
                    named[f"self.{name}[{k!r}]"] = float(w)


def _first_change(series: list[float]) -> float:
    return next((b - a for a, b in zip(series, series[1:]) if b != a), 0.0)


def _bare(key: str) -> str:
    name = key.split(":", 1)[-1]
    return name.strip("[]'\"") if name.startswith("[") else name  # a saved dict's key, or a name in the source


def _recorded(saves: list[Save], key: str) -> int:
    """The writes at which a value of another name equal to this one (or to its negation, a score
    kept as -loss) is in sight: the best so far, just set to it (`self.best_score = score`,
    `best_metrics[name] = metric`, `best = acc`)."""
    bare = _bare(key)
    return sum(any(n != bare and abs(v) == abs(s.values[key]) for n, v in s.named.items()) for s in saves)


def _worse_writes(series: list[float], higher: bool) -> list[int]:
    """Indices of the writes worse than the best written before them."""
    bad = []
    run = series[0]
    for i, v in enumerate(series[1:], start=1):
        if (v < run) if higher else (v > run):
            bad.append(i)
        else:
            run = v
    return bad


def _unguarded(saves: list[Save], metric: str) -> tuple[str, str, int] | None:
    """(record, file, line): the running best compared with `metric` is assigned from it outside
    every guard of the save."""
    for s in reversed(saves):
        for g, file in s.guards:
            if g.unguarded is not None:
                return ", ".join(sorted(g.records)), file, g.unguarded
    return None


def _matches(value: float, losses: tuple[float, ...]) -> bool:
    return any(abs(abs(value) - abs(v)) <= 1e-6 * max(1.0, abs(v)) for v in losses)


def _on_training_loss(saves: list[Save], name: str) -> bool:
    """The value compared at every write is (up to its sign) the training loss the run had just
    recorded: one training batch's loss chose the file."""
    return all(s.losses and _matches(s.values[name], s.losses) for s in saves)
