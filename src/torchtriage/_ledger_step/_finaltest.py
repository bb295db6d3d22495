"""A test after training that evaluates the last weights, not the best ones saved (session 16).

A loop that saves a checkpoint only when the validation result improves has chosen its model: the
weights of its last such save. An evaluation after training that runs on the weights in memory
instead (no load of the best file between the last optimizer step and the test) reports the
last epoch's model, which the loop's own comparison rejected at every validation since.

Measured: every evaluation forward (eval mode, no gradient) of a trained model is noted by its
call site (the outermost `SITE_FRAMES` user frames) and the optimizer steps run so far. A site
that only ran after the last optimizer step is a test; the sites that ran between steps are the
validations. A save site is the best model's when its writes (`MIN_SAVES` or more, each holding
tensors or a module) are guarded by a comparison with a running best (`_bestguard`), or carry a
value that improved at every write. A finding when the test ran with no `load_state_dict` since
the last optimizer step, the best save's last write came before the last optimizer step, and
validations ran at `MIN_REJECTED` later steps without a write: the model tested was trained
past the chosen one and each of its later validations scored worse. Warning.

Cost: a walk of the stack per evaluation forward (not in the training step); a few integers per save.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, find_frame, in_user_file, user_frame_of

SITE_FRAMES = 3
MIN_SAVES = 2
MIN_REJECTED = 2
MAX_SITES = 256


@dataclasses.dataclass
class SiteRun:
    first_total: int  # optimizer steps when the site first evaluated
    last_total: int
    loads_then: int  # module loads since the last optimizer step when it first ran at `last_total`
    frames: tuple[UserFrame, ...]


@dataclasses.dataclass
class BestSite:
    totals: list[int]  # optimizer steps at each write
    guarded: bool
    improving: bool
    frame: UserFrame | None


def _site(skip: int) -> tuple[tuple[str, int], ...] | None:
    frames: list[Any] = []
    f = find_frame(in_user_file, sys._getframe(skip), depth=128)
    while f is not None and len(frames) < 64:
        frames.append(f)
        f = find_frame(in_user_file, f.f_back, depth=128)
    if not frames:
        return None
    outer = frames[::-1][:SITE_FRAMES]
    return tuple((fr.f_code.co_filename, fr.f_lineno) for fr in outer)


class FinalTest:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.load_step = -1  # the session's step at the last module load
        self.sites: dict[tuple[tuple[str, int], ...], SiteRun] = {}
        self.validated: set[int] = set()  # optimizer-step counts at which a validation site ran
        self.saves: dict[tuple[str, int], BestSite] = {}

    @property
    def total(self) -> int:
        """The training steps so far."""
        return int(self.session.step)

    @property
    def loads(self) -> int:
        """1 when a module was loaded since the last training step."""
        return int(self.load_step == self.session.step)

    def module_loaded(self) -> None:
        self.load_step = self.session.step

    def eval_forward(self, model: torch.nn.Module) -> None:
        if self.total == 0:
            return
        index = self.session.param_index
        p = next(iter(model.parameters()), None)
        info = index.info(p) if p is not None else None
        if info is None or info.optimizer is None:
            return  # a model no optimizer trains (a teacher, a model loaded whole from a file)
        key = _site(2)
        if key is None:
            return
        run = self.sites.get(key)
        if run is None:
            if len(self.sites) >= MAX_SITES:
                return
            frames = tuple(UserFrame(file, line, "", "") for file, line in key)
            self.sites[key] = SiteRun(self.total, self.total, self.loads, frames)
        elif run.last_total != self.total:
            run.last_total, run.loads_then = self.total, self.loads
        if len(self.validated) < 4096:
            self.validated.add(self.total)

    def saved(self, save: Any, holds_weights: bool) -> None:
        if not holds_weights or save is None:
            return
        frame = find_frame(in_user_file, sys._getframe(2), depth=64)
        if frame is None:
            return
        key = (frame.f_code.co_filename, frame.f_lineno)
        site = self.saves.get(key)
        if site is None:
            if len(self.saves) >= MAX_SITES:
                return
            site = self.saves[key] = BestSite([], False, True, user_frame_of(frame))
            site.values = []  # type: ignore[attr-defined]
        site.totals.append(self.total)
        site.guarded = site.guarded or bool(save.guards)
        site.values.append(dict(save.values))  # type: ignore[attr-defined]

    def end(self) -> list[Finding]:
        final = self.total
        tests = [r for r in self.sites.values() if r.first_total == final and r.loads_then == 0]
        if not tests or final == 0:
            return []
        during = {t for t in self.validated if t < final}
        out: list[Finding] = []
        for site in self.saves.values():
            totals = site.totals
            if len(totals) < MIN_SAVES or totals[-1] >= final:
                continue
            if not (site.guarded or _improving(site.values)):  # type: ignore[attr-defined]
                continue
            rejected = sorted(t for t in during if t > totals[-1])
            if len(rejected) < MIN_REJECTED:
                continue
            test = tests[0]
            frame = _diverging(test, [r for r in self.sites.values() if r.first_total < final])
            fields = {"best": totals[-1], "final": final, "rejected": len(rejected),
                      "saved": f"{site.frame.function or 'save'} ({site.frame.line})" if site.frame else "?"}
            evidence = {"best_saved_at_optimizer_step": totals[-1], "best_writes": len(totals),
                        "last_optimizer_step": final, "validations_after_best_not_saved": len(rejected),
                        "load_state_dict_before_test": False,
                        "best_save_line": f"{site.frame.file}:{site.frame.line}" if site.frame else None}
            out.append(from_catalogue(Category.OTHER, "other.checkpoint_test_not_best", "ckpt.test_not_best",
                                      fields=fields, cause_key="ckpt.test_not_best.cause",
                                      next_key="ckpt.test_not_best.next", frame=frame, evidence=evidence,
                                      source_line=True, severity=Severity.WARNING, stage=Stage.FORWARD,
                                      step=self.session.step))
            break
        return out


def _improving(values: list[dict[str, float]]) -> bool:
    """A value in sight at every write that improved at every write (a running best)."""
    if len(values) < MIN_SAVES:
        return False
    for k in values[0]:
        series = [v.get(k) for v in values]
        if any(x is None for x in series):
            continue
        s = [float(x) for x in series if x is not None]
        if all(b > a for a, b in zip(s, s[1:])) or all(b < a for a, b in zip(s, s[1:])):
            if k.startswith("["):  # an entry of the saved dict
                return True
    return False


def _diverging(test: SiteRun, others: list[SiteRun]) -> UserFrame:
    """The test's outermost frame that no validation site shares: the line that runs the test."""
    for i, fr in enumerate(test.frames):
        if not any(len(o.frames) > i and (o.frames[i].file, o.frames[i].line) == (fr.file, fr.line) for o in others):
            return _with_source(fr)
    return _with_source(test.frames[-1])


def _with_source(fr: UserFrame) -> UserFrame:
    import linecache
    return UserFrame(fr.file, fr.line, fr.function, linecache.getline(fr.file, fr.line).strip())
