"""Checks that sample their steps (`Checker.wants_step`, schedule in `torchtriage._cadence`):
a bug that begins after the first steps, on a step the check sits out, is still found, with the
exact finding of the first sampled step after it began; an evaluation pass on a step the
schedule leaves out still wakes the silent checks."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity, Stage, _cadence
from torchtriage._silent import SilentChecker
from zoo import silent as z

LATE = 40  # the bug begins here: after the first steps, on a step the schedule leaves out


def test_the_schedule():
    assert _cadence.FULL <= LATE and not _cadence.sampled(LATE)
    seen = [s for s in range(100) if _cadence.sampled(s)]
    assert seen == [*range(_cadence.FULL), 32, 33, 64, 65, 96, 97]


def _evidence(f):
    return {k: v for k, v in f.evidence.items() if k != "source_line"}


def _harm(f):
    """The loss numbers a held dynamics warning carries (issue 24: severity from harm)."""
    return {k: f.evidence[k] for k in ("loss_at_finding", "loss_at_end", "run_kept_learning")}


def _loop(model, opt, steps, body):
    with torchtriage.watch(model, opt, checks=["silent"], on_anomaly="record", report=False) as s:
        for step in range(steps):
            body(step)
    return s.report


def test_zero_grad_missing_from_a_late_step():
    torch.manual_seed(0)
    model = z.RegressionMLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = z.regression_data()

    def body(step):
        if step < LATE:
            opt.zero_grad()
        F.mse_loss(model(x).squeeze(-1), y).backward()  # the line named
        opt.step()

    report = _loop(model, opt, 70, body)
    (f,) = report.filter(code="silent.zero_grad_missing")
    # sampled steps 64 and 65: the grads 64 stepped on are still there, and 65's backward adds
    assert (f.step, f.stage, f.parameter, f.op) == (65, Stage.BACKWARD, "net.0.weight", "backward")
    assert (f.file, f.line) == (__file__, body.__code__.co_firstlineno + 3)
    assert _evidence(f) == {"parameters_sampled": 4, "grads_not_reset_since_last_step": True}


def test_loss_graph_kept_from_a_late_step():
    torch.manual_seed(0)
    model = z.RegressionMLP()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = z.regression_data()
    kept = []

    def body(step):
        opt.zero_grad()
        loss = F.mse_loss(model(x).squeeze(-1), y)  # the line named
        loss.backward()
        opt.step()
        if step >= LATE:
            kept.append(loss)  # every step's graph from here on

    report = _loop(model, opt, 100, body)
    (f,) = report.filter(code="silent.loss_graph_kept")
    # marked on the sampled steps 64 and 65; both still alive at 96's end
    assert (f.step, f.stage, f.severity) == (96, Stage.LOSS, Severity.WARNING)
    assert (f.file, f.line) == (__file__, body.__code__.co_firstlineno + 2)
    assert _evidence(f) == {"old_loss_graphs_alive": 2, "from_steps": [64, 65]}


def test_eval_mode_from_a_late_step():
    torch.manual_seed(0)
    model = z.SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 3, (8,))

    def body(step):
        if step == LATE:
            model.eval()  # left on by mistake
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()  # the line named
        opt.step()

    report = _loop(model, opt, 70, body)
    (f,) = report.filter(code="silent.eval_mode_while_training")
    assert (f.step, f.stage, f.module, f.severity) == (64, Stage.FORWARD, "", Severity.WARNING)
    assert (f.file, f.line) == (__file__, body.__code__.co_firstlineno + 4)
    assert _evidence(f) == {"modules_affected": ["features.1 (BatchNorm2d)", "drop (Dropout p=0.2)"]}


def test_an_evaluation_pass_on_a_skipped_step_wakes_the_silent_checks():
    """An evaluation at step 40 that forgets model.eval() is judged at step 40; one that
    forgets model.train() afterwards trains in eval() mode from that same step."""
    torch.manual_seed(0)
    model = z.SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 3, (8,))

    def body(step):
        if step in (LATE, LATE + 5):
            if step == LATE + 5:
                model.eval()
            with torch.no_grad():  # evaluation
                acc = (model(x).argmax(1) == y).float().mean()  # the line named (step 40)
            assert acc >= 0
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()  # the line named (step 45)
        opt.step()

    report = _loop(model, opt, 50, body)
    (f,) = report.filter(code="silent.train_mode_while_evaluating")
    assert (f.step, f.stage, f.module) == (LATE, Stage.FORWARD, "")
    assert (f.file, f.line) == (__file__, body.__code__.co_firstlineno + 5)
    assert _evidence(f) == {"no_grad_forwards_in_train_mode": 1, "outputs_fed": "metric argmax",
                          "modules_affected": ["features.1 (BatchNorm2d)", "drop (Dropout p=0.2)"]}
    (g,) = report.filter(code="silent.eval_mode_while_training")
    assert (g.step, g.line) == (LATE + 5, body.__code__.co_firstlineno + 8)


def test_silent_sits_out_the_steps_between_samples():
    """What it costs: the silent check receives events on the sampled steps only."""
    seen = []

    class Counting(SilentChecker):
        def on_step_begin(self, step):
            seen.append(step)
            super().on_step_begin(step)

    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 4)
    with torchtriage.watch(model, opt, checks=[Counting()], on_anomaly="record", report=False) as s:
        for _ in range(70):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    assert seen == [s for s in range(70) if _cadence.sampled(s)]
    assert not s.report


def test_leakage_sits_out_the_steps_before_a_split_then_counts_every_row():
    """No split seen: no per-step work. A split made after 40 steps wakes the check from the
    next step on, and the rows trained on are counted exactly."""
    from torch.utils.data import DataLoader, TensorDataset, random_split

    from torchtriage._leakage._runtime import LeakageWatch

    ends = []

    class Counting(LeakageWatch):
        def on_step_end(self, step):
            ends.append(step)
            super().on_step_end(step)

    torch.manual_seed(0)
    X = torch.randn(100, 3)
    y = X.sum(1)
    warm = torch.randn(16, 3)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchtriage.watch(model, opt, checks=[Counting()], on_anomaly="record", report=False) as s:
        for _ in range(LATE):
            opt.zero_grad()
            model(warm).pow(2).mean().backward()
            opt.step()
        train, test = random_split(TensorDataset(X, y), [80, 20])  # the split
        for xb, yb in DataLoader(TensorDataset(X, y), batch_size=25):  # trains on every row
            opt.zero_grad()
            F.mse_loss(model(xb).squeeze(1), yb).backward()
            opt.step()
    assert ends == [LATE, LATE + 1, LATE + 2, LATE + 3]
    (f,) = s.report.findings
    assert (f.code, f.severity, f.line) == ("data.heldout_trained", Severity.ERROR,
                                           test_leakage_sits_out_the_steps_before_a_split_then_counts_every_row
                                           .__code__.co_firstlineno + 25)
    assert f.evidence["count"] == f.evidence["held_out_rows"] == 20
    assert f.evidence["example_index"] in test.indices


def _blobs(n=128):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return x, (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()


def _dynamics_loop(steps, body):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = _blobs()
    with torchtriage.watch(model, opt, checks=["dynamics"], on_anomaly="record", report=False) as s:
        for step in range(steps):
            body(step, model, opt, x, y)
    return s.report


def test_accumulation_not_divided_from_a_late_step():
    def body(step, model, opt, x, y):
        opt.zero_grad()
        for k in range(4 if step >= LATE else 1):  # from step 40: 4 micro-batches, not divided
            F.cross_entropy(model(x[k::4]), y[k::4]).backward()  # the line named
        opt.step()

    (f,) = _dynamics_loop(70, body).filter(code="dynamics.accumulation_not_divided")
    # watched on the sampled steps 64 and 65: reported at the second
    assert (f.step, f.severity, f.stage, f.op) == (65, Severity.WARNING, Stage.BACKWARD, "backward")
    assert (f.file, f.line) == (__file__, body.__code__.co_firstlineno + 3)
    assert _evidence(f) == {"backward_calls_per_step": 4, "loss_node": "NllLossBackward0", "optimizer": "SGD",
                            **_harm(f)}
    assert f.evidence["run_kept_learning"] is False  # the harm: the loss did not fall after it


@pytest.mark.parametrize("where", ["before_backward", "after_step"])
def test_clip_grad_norm_in_the_wrong_place_from_a_late_step(where):
    def body(step, model, opt, x, y):
        clip = step >= LATE
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if clip and where == "before_backward":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # the line named (before backward)
        loss.backward()
        opt.step()
        if clip and where == "after_step":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)  # the line named (after step)

    (f,) = _dynamics_loop(70, body).filter(code=f"dynamics.clip_{where}")
    line = body.__code__.co_firstlineno + (5 if where == "before_backward" else 9)
    assert (f.step, f.severity, f.op, f.file, f.line) == (65, Severity.WARNING, "clip_grad_norm_", __file__, line)
    if where == "after_step":  # judged by the norms the misplaced clip returned: above max_norm, it would have cut
        ev = f.evidence
        assert ev["max_norm"] == 0.01 and ev["steps_norm_above_max_norm"] == ev["steps_with_norm_read"] >= 2
        assert "would have scaled them down" in ev["harm"]
        return
    assert _evidence(f) == {"max_norm": 1.0, "backward_calls_after_clip": 1, "steps_seen_like_this": 2, **_harm(f)}
    assert f.evidence["run_kept_learning"] is False


def test_which_of_the_default_checks_take_part_in_a_step_between_samples(tmp_path):
    """On a clean loop at step 40: dynamics and triage every step (a spike, a backward's node
    numbers); silent on its samples; repro only while it may write a bundle; leakage only once
    a split was seen."""
    mine = ("silent", "dynamics", "triage", "repro", "leakage")
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        assert {n: s.checker(n).wants_step(LATE) for n in mine} == {
            "silent": False, "dynamics": True, "triage": True, "repro": False, "leakage": False}
    with torchtriage.watch(model, opt, on_anomaly="record", report=False, bundle_dir=tmp_path / "b") as s:
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        assert s.checker("repro").wants_step(LATE)


def _growth_by_walk(points, step, value):
    """The divergence rule written as a walk back over the kept points."""
    from torchtriage._dynamics._trends import GROWTH, GROWTH_STEPS, _ok

    points.append((step, value))
    if not _ok(value):
        return None
    i = len(points) - 1
    while i > 0 and _ok(points[i - 1][1]) and points[i][1] > points[i - 1][1]:
        i -= 1
    n = len(points) - 1 - i
    first = points[i][1]
    if not ((n >= GROWTH_STEPS and value / first >= GROWTH) or (n >= 3 and value / first >= GROWTH ** 2)):
        return None
    before = [v for _, v in list(points)[:i] if _ok(v)]
    if before and value <= max(before):  # (a climb back from a dip, not above the series' range)
        return None
    return {"start": points[i][0], "end": step, "first": first, "last": value, "steps": n,
            "rate": (value / first) ** (1.0 / n)}


@pytest.mark.parametrize("seed", [*range(40), "x1.03", "x1.04"])
def test_the_growth_run_counted_as_points_arrive_is_the_walk_back(seed):
    """`Growth.add` is O(1) a point; it reports what the walk over the last 128 points reported
    (runs longer than the window, NaN / Inf / None / 0 breaking a run)."""
    import collections
    import random

    from torchtriage._dynamics._trends import Growth

    rng = random.Random(seed)
    g, kept = Growth(), collections.deque(maxlen=128)
    v, found = 1.0, 0
    for step in range(600):
        r = rng.random()
        if isinstance(seed, str):  # a run longer than the window: x1.04 reaches x100 at 118
            value = v = v * float(seed[1:])  # increases; x1.03 would need 156, past the window
        elif r < 0.03:
            value = rng.choice([None, float("nan"), float("inf"), 0.0])
        else:
            v = v * rng.choice([1.01, 1.05, 1.2, 2.0, 3.0, 0.9, 0.5]) if rng.random() < 0.9 else 1.0
            value = v
        want = _growth_by_walk(kept, step, value)
        got = g.add(step, value)
        assert got == want, (seed, step)
        if got is not None:  # reported once: a new rule object for the rest of the series
            g, kept = Growth(), collections.deque(maxlen=128)
            found += 1
    assert found == {"x1.03": 0, "x1.04": 5}.get(seed, found)  # (118 steps a report, then anew)


def test_a_check_whose_start_failed_never_raises_from_wants_step():
    """The session asks `wants_step` at every step's start, in the user's forward: a check whose
    on_start broke (our bug, already warned about) must not raise there."""
    from torchtriage._leakage._runtime import LeakageWatch

    assert SilentChecker().wants_step(LATE) is True
    assert LeakageWatch().wants_step(LATE) is True
