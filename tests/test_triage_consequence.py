"""An error raised on NaN/Inf operands after a non-finite finding is that finding's consequence:
counted on it (count, evidence), never a second loud finding. Errors decided by metadata, or
raised on finite operands, stay findings of their own."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.distributions import Categorical

import torchtriage
from torchtriage import Severity

HERE = __file__


@pytest.fixture(autouse=True)
def _distributions_validate_their_arguments():
    """torch's default (argument validation on): the first `torch.compile` of the process (another
    test in this worker) turns it off for good, and these loops rely on the error it raises."""
    from torch.distributions import Distribution

    before = Distribution._validate_args
    Distribution.set_default_validate_args(True)
    yield
    Distribution.set_default_validate_args(before)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))

    def forward(self, x):
        return self.body(x)


def _loop(after_nan, steps=3):
    """A policy-gradient loop whose advantage of a one-sample batch is normalized by its std
    (0 / 0 = NaN for one sample); the optimizer applies the NaN gradient, so the next step's
    logits are NaN, and `after_nan(logits, step)` runs on them."""
    torch.manual_seed(0)
    net = Policy()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(Exception) as info:
        with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
            for step in range(steps):
                x, adv = torch.randn(1, 4), torch.randn(1)
                logits = net(x)
                after_nan(logits, step)
                adv = (adv - adv.mean()) / adv.std(correction=0)
                loss = -(torch.log_softmax(logits, -1)[:, 0] * adv).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    return s.report, info.value


def _loud(report):
    return [f for f in report if f.severity is not Severity.INFO]


def test_a_distribution_refusing_nan_logits_is_counted_on_the_nan_loss():
    def sample(logits, step):
        Categorical(logits=logits, validate_args=True).sample()

    report, exc = _loop(sample)
    assert isinstance(exc, ValueError) and "nan" in str(exc)
    (f,) = _loud(report)
    # seen at step 0, on step 1's NaN outputs (the sentinel), and in the error
    assert (f.code, f.step, f.count) == ("numerical.nonfinite_loss", 0, 3)
    assert f.evidence["non-finite operands"] == "logits"
    raised = f.evidence["then raised"]
    assert raised.startswith("ValueError: Expected parameter logits") and f"(step 1, {HERE}:" in raised


def test_multinomial_of_nan_probabilities_is_counted_on_the_nan_loss():
    def sample(logits, step):
        probs = torch.softmax(logits, -1)
        torch.multinomial(probs, 1)

    report, exc = _loop(sample)
    assert isinstance(exc, RuntimeError)
    (f,) = _loud(report)
    assert (f.code, f.count, f.evidence["non-finite operands"]) == ("numerical.nonfinite_loss", 3, "probs")


def test_an_error_about_shapes_after_the_nan_is_a_finding_of_its_own():
    def wrong_width(logits, step):
        if step == 1:
            torch.cat([logits, torch.zeros(2, 3)], dim=1)

    report, _ = _loop(wrong_width)
    loud = {f.code: f for f in _loud(report)}
    assert sorted(loud) == ["numerical.nonfinite_loss", "shape.cat"]
    assert "then raised" not in loud["numerical.nonfinite_loss"].evidence


def test_an_error_on_finite_operands_after_the_nan_is_a_finding_of_its_own():
    def bad_probs(logits, step):
        if step == 1:
            probs = torch.tensor([[-0.5, 1.5]])
            Categorical(probs=probs, validate_args=True)

    report, exc = _loop(bad_probs)
    assert isinstance(exc, ValueError)
    loud = {f.code: f for f in _loud(report)}
    assert len(loud) == 2 and "numerical.nonfinite_loss" in loud
    assert "then raised" not in loud["numerical.nonfinite_loss"].evidence


def test_nan_logits_in_the_step_that_read_nothing_yet_count_on_the_nan_batch():
    """Nothing non-finite was read before the error: the NaN batch and the error are in the
    same step, before its one read. The step's flags are read when it raises (before the error
    is explained), so the first anomaly — the batch — is the finding and the error, with its
    line, counts on it."""
    net = Policy()
    with pytest.raises(ValueError):
        with torchtriage.watch(net, on_anomaly="record", report=False) as s:
            logits = net(torch.full((1, 4), float("nan")))
            Categorical(logits=logits, validate_args=True)  # the error's line
    (f,) = _loud(s.report)
    assert (f.code, f.severity, f.count) == ("numerical.nonfinite_data", Severity.ERROR, 2)
    lines = Path(HERE).read_text(encoding="utf-8").splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith("# the error's line"))
    raised = f.evidence["then raised"]
    assert raised.startswith("ValueError: Expected parameter logits") and f"{HERE}:{line}" in raised
    assert f.evidence["non-finite operands"] == "logits"


def test_a_target_out_of_range_after_the_nan_is_a_finding_of_its_own():
    """NaN logits, but the error is about the integer target: a second bug, not the NaN's doing."""
    def bad_target(logits, step):
        if step == 1:
            torch.nn.functional.cross_entropy(logits, torch.tensor([7]))

    report, exc = _loop(bad_target)
    assert isinstance(exc, IndexError)
    loud = {f.code: f for f in _loud(report)}
    assert sorted(loud) == ["data.target_range", "numerical.nonfinite_loss"]
    assert "then raised" not in loud["numerical.nonfinite_loss"].evidence


def _one_step(build):
    """One step whose distribution is built from the model's output before any read: the
    error comes before the step's flags were read."""
    torch.manual_seed(0)
    net = Policy()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(ValueError) as info:
        with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
            x = torch.randn(3, 4)
            build(net, x)
    return s.report, info.value


def test_a_nan_batch_refused_by_a_distribution_in_the_same_step_is_counted_on_the_batch():
    """The NaN is in the batch; `Categorical` raises on the NaN logits in the same step, before
    the step's one read. The flags are read when the step raises, so the first anomaly (the
    batch) is the finding and the error counts on it; it is not read as an autograd fault
    (the message prints `grad_fn=`)."""
    def build(net, x):
        x[1, 2] = float("nan")
        Categorical(logits=net(x))  # an expression: the values the message prints are the evidence

    report, exc = _one_step(build)
    assert "grad_fn=" in str(exc)
    (f,) = _loud(report)
    assert (f.code, f.step, f.count) == ("numerical.nonfinite_data", 0, 2)
    assert f.evidence["then raised"].startswith("ValueError: Expected parameter logits")
    assert f.evidence["non-finite operands"] == "the values the error message prints"


def test_finite_values_outside_a_distributions_constraint_are_named_as_such():
    """A scale taken straight from a linear layer (negative values): not a NaN, a parameter
    outside its domain."""
    def build(net, x):
        out = net(x)
        torch.distributions.Normal(out[:, 0], out[:, 1])  # the user's line

    report, _ = _one_step(build)
    (f,) = _loud(report)
    assert (f.category.value, f.code, f.line) == ("numerical", "numerical.distribution_parameter", _line("Normal(out"))
    assert f.message == ("Normal's parameter scale (3,) has values outside its constraint "
                         "GreaterThan(lower_bound=0.0)")


def test_a_log_prob_value_outside_the_support_is_named_as_such():
    def build(net, x):
        actions = torch.tensor([0, 1, 2])  # 2 actions only: index 2 is outside
        Categorical(logits=net(x)).log_prob(actions)

    report, _ = _one_step(build)
    (f,) = _loud(report)
    assert (f.code, f.line) == ("numerical.distribution_value", _line(".log_prob(actions)"))
    assert f.message == ("Categorical.log_prob got a value (3,) outside the support "
                         "IntegerInterval(lower_bound=0, upper_bound=1)")


def _line(text):
    return next(i for i, line in enumerate(Path(HERE).read_text().splitlines(), 1) if text in line)
