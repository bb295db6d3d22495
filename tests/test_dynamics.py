"""Runs that neither crash nor learn (issue 19): each loop of tests/zoo/dynamics.py, written as
users write it, gets its exact finding under the default checks."""

from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import line_in
from torchtriage import Category, Severity, Stage
from torchtriage._dynamics._causal import probe as _probe
from torchtriage._series import HEAD, MIDDLE, TAIL, SeriesStore
from zoo import dynamics as z

ZOO = z.__file__


def _line(text: str) -> int:
    return line_in(ZOO, text, unique=True)


def _watch(make, *args, checks="default"):
    models, opts, train = make(*args)
    with torchtriage.watch(models, opts, on_anomaly="record", report=False, checks=checks) as s:
        train()
    assert torch._C._len_torch_function_stack() == 0, "a region was left on the mode stack"
    return s, train


def _one(report, code):
    found = report.filter(code=code)
    assert len(found) == 1, [(f.code, f.step) for f in report.findings]
    return found[0]


# ---------------------------------------------------------------------------- the three examples
def test_epoch_scheduler_stepped_per_batch():
    s, _ = _watch(z.loop_epoch_scheduler_stepped_per_batch)
    f = _one(s.report, "dynamics.epoch_scheduler_per_batch")
    assert ((f.category, f.severity, f.stage, f.step, f.op)
            == (Category.SILENT, Severity.WARNING, Stage.OPTIMIZER, 20, "StepLR"))
    assert (f.file, f.line) == (ZOO, _line("# BUG: per batch (StepLR counts epochs)"))
    assert f.message == ("StepLR is stepped at every optimizer step (every batch): the lr fell to 1.00% of its "
                         "initial value by step 20, and 20 steps have run at that lr since")
    assert f.evidence["parameters"] == "step_size=10, gamma=0.1"
    assert f.evidence["scheduler_steps"] == f.evidence["optimizer_steps"] == 40
    assert f.evidence["lr_initial"] == ["0.1"] and f.evidence["lr_now"] == ["1e-05"]
    assert "once per epoch" in f.next_check
    assert s.report.primary is f
    lr = s.series["lr"]
    assert lr[0] == 0.1 and math.isclose(lr[25], 0.001) and len(lr) == 64


def test_lr_so_high_the_loss_grows_geometrically_before_any_nan():
    s, _ = _watch(z.loop_lr_too_high)
    f = _one(s.report, "dynamics.divergence")
    nan = _one(s.report, "numerical.nonfinite_loss")
    assert (f.category, f.severity, f.stage, f.step) == (Category.NUMERICAL, Severity.WARNING, Stage.LOSS, 0)
    assert f.order < nan.order and nan.step == 40 and s.report.primary is f
    ev = f.evidence
    assert (ev["start_step"], ev["step_now"], ev["value_at_start"], ev["lr"]) == (0, 5, "9.459", "1.2")
    assert ev["growth_per_step"] == "×6.34"
    assert f.message == ("the loss grows geometrically from step 0: 9.459 → 9.67e+04 in 5 steps (×6.34 per step), "
                         "before any NaN")
    assert "learning rate" in f.next_check
    assert s.report.filter(code="dynamics.exploding_gradients") == []  # the same cause, said once


def test_a_loss_that_climbs_back_from_a_dip_is_no_divergence():
    from torchtriage._dynamics._trends import Growth

    # A GAN critic's hinge loss: up to 1.9, a dip to 5e-4 for a few steps, back to 1.2 (x4.7 a step).
    series = [1.9, 1.4, 1.1, 0.8, 0.3, 0.05, 5.3e-4, 2.5e-3, 1.2e-2, 5.5e-2, 0.26, 1.2, 0.9, 1.0]
    g = Growth()
    assert [g.add(i, v) for i, v in enumerate(series)] == [None] * len(series)
    # The same dip, then a climb past everything seen before it: divergence, from the dip.
    g = Growth()
    found = [g.add(i, v) for i, v in enumerate(series[:11] + [2.5, 7.0, 40.0])]
    hit = next(r for r in found if r is not None)
    assert (hit["start"], hit["end"], hit["first"]) == (6, 11, 5.3e-4)


def test_a_critic_output_maximized_with_backward_mone_is_recorded_as_minimized():
    # WGAN as in the original code: `D_real.backward(mone)` maximizes the critic's mean output on
    # real samples, which grows steadily from ~0 while the critic learns: the objective the
    # optimizer minimizes is -D_real, falling. No divergence, no gradient growth.
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 1))
    for p in critic.parameters():
        nn.init.normal_(p, std=1e-3)
    nn.init.constant_(critic[2].bias, 1e-4)
    opt = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
    one = torch.tensor(1.0)
    mone = one * -1
    real = torch.randn(256, 2) + 3.0
    fake = torch.randn(256, 2)
    seen = []
    with torchtriage.watch(critic, opt, on_anomaly="record", report=False) as s:
        for _ in range(60):
            critic.zero_grad()
            D_real = critic(real).mean()
            seen.append(D_real.item())
            D_real.backward(mone)
            D_fake = critic(fake).mean()
            D_fake.backward(one)
            opt.step()
    loss = s.series["loss"]
    assert loss == [-v for v in seen]  # -D_real: the objective minimized
    assert seen[-1] > 100 * abs(seen[0])  # D_real grew from ~0
    codes = [f.code for f in s.report.findings if f.severity >= Severity.WARNING]
    assert "dynamics.divergence" not in codes and "dynamics.exploding_gradients" not in codes


def test_accuracy_with_n1_against_n_broadcasts_in_evaluation_code():
    s, train = _watch(z.loop_accuracy_broadcasts)
    f = _one(s.report, "silent.metric_broadcast")
    assert (f.category, f.severity, f.op, f.step) == (Category.SILENT, Severity.ERROR, "eq", 5)
    assert (f.file, f.line) == (ZOO, _line("# BUG: (N, 1) == (N,)"))
    assert f.message == ("[256, 1] and [256] broadcast to [256, 256] in eq outside the loss (evaluation or metric "
                         "code): every prediction is compared with every label")
    ev = f.evidence
    assert (ev["left_shape"], ev["right_shape"], ev["broadcast_shape"], ev["in"]) == (
        (256, 1), (256,), (256, 256), "evaluation")
    assert ev["metric_computed"] == f"{train.accs[0]:.4g}"
    model = s.models[0]
    x, y = z._blobs()
    with torch.no_grad():
        right = (model.eval()(x).argmax(dim=1) == y).float().mean().item()
    assert ev["metric_aligned"] == f"{right:.4g}" and ev["metric_aligned"] != ev["metric_computed"]


# ---------------------------------------------------------------------------- schedules
def test_cosine_with_t_max_in_epochs_stepped_per_batch():
    s, _ = _watch(z.loop_cosine_t_max_in_epochs_per_batch)
    f = _one(s.report, "dynamics.epoch_scheduler_per_batch")
    assert (f.step, f.op, f.line) == (10, "CosineAnnealingLR", _line("T_max counts epochs"))
    assert f.message == ("CosineAnnealingLR(T_max=10) is stepped at every optimizer step (every batch): the lr "
                         "reached its minimum at step 10 and cycles every 20 steps")


def test_scheduler_before_optimizer_is_an_info_beside_torchs_one_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s, _ = _watch(z.loop_scheduler_before_optimizer)
    torch_warnings = [w for w in caught if "Detected call of `lr_scheduler.step()` before" in str(w.message)]
    assert len(torch_warnings) == 1  # torch says it once, at the first call
    f = _one(s.report, "dynamics.scheduler_before_optimizer")
    assert (f.severity, f.op, f.line) == (Severity.INFO, "OneCycleLR", _line("# BUG: before opt.step()"))
    assert f.evidence == {"scheduler": "OneCycleLR", "scheduler_steps": 8, "torch_warning": "once, at the first call",
                          "source_line": "sched.step()  # BUG: before opt.step()"}
    assert s.report.ok


def test_warmup_that_never_ends():
    torch.manual_seed(0)
    s, _ = _watch(z.loop_warmup_never_ends, 1e-5)
    f = _one(s.report, "dynamics.warmup_never_ends")
    assert (f.severity, f.step) == (Severity.WARNING, 119)
    assert f.message == ("the lr rose through all 120 steps and ended at 11.9% of its initial lr 1e-05: "
                         "the warm-up never ended")
    assert f.evidence["lr_last"] == "1.19e-06" and f.evidence["lr_ever_decreased"] is False
    # the harm, measured: over the whole run the loss barely moved
    assert f.evidence["run_kept_learning"] is False
    assert abs(float(f.evidence["loss_at_end"]) - float(f.evidence["loss_at_finding"])) < 0.1


def test_a_warmup_longer_than_a_run_that_learns_is_an_info():
    # the same schedule, a base lr at which the run learns while still warming up (issue 24:
    # a warm-up longer than the observed run is no harm when the loss falls)
    torch.manual_seed(0)
    s, _ = _watch(z.loop_warmup_never_ends, 0.1)
    f = _one(s.report, "dynamics.warmup_never_ends")
    assert f.severity is Severity.INFO and f.evidence["run_kept_learning"] is True
    assert float(f.evidence["loss_at_end"]) < 0.8 * float(f.evidence["loss_at_finding"])
    assert s.report.ok


def test_lr_reaching_zero_long_before_the_end():
    torch.manual_seed(0)
    s, _ = _watch(z.loop_lr_decays_to_zero_early)
    f = _one(s.report, "dynamics.lr_zero")
    assert (f.severity, f.step, f.op) == (Severity.WARNING, 3, "AdamW")
    assert f.evidence["run_kept_learning"] is False
    assert f.message == "the lr reached 0 at step 3 and 10 optimizer steps have run at lr 0 since"
    assert f.evidence["lr_before"] == "0.001"


# ---------------------------------------------------------------------------- not learning
def test_stagnation_lr_far_too_low():
    s, _ = _watch(z.loop_lr_too_low)
    f = _one(s.report, "dynamics.stagnation")
    assert (f.category, f.severity, f.stage, f.step) == (Category.SILENT, Severity.WARNING, Stage.OPTIMIZER, 25)
    ev = f.evidence
    assert ev["sampled_steps"] == [25, 50] and ev["lr"] == "1e-07"
    assert all(float(r) < 1e-5 for r in ev["update_to_parameter_ratio"])
    assert "lr=1e-07" in f.cause


def test_stagnation_gradients_clipped_to_nothing():
    s, _ = _watch(z.loop_clipped_to_nothing)
    f = _one(s.report, "dynamics.stagnation")
    assert f.evidence["clip_grad_norm_seen"] is True and f.evidence["lr"] == "0.1"
    assert "clipped to almost nothing" in f.cause


def test_regression_loss_stuck_at_the_target_variance():
    s, _ = _watch(z.loop_inputs_centered_per_sample)
    f = _one(s.report, "dynamics.loss_at_prior")
    y = 2 * (torch.rand(128, 1, generator=torch.Generator().manual_seed(1)) * 4) + 1
    assert f.evidence["prior"] == f"{y.var(unbiased=False).item():.4g}"
    assert f.message.startswith("the mse_loss loss stays at ") and "the targets' variance is" in f.message


def test_loss_stuck_at_the_label_prior():
    s, _ = _watch(z.loop_labels_shuffled_apart)
    f = _one(s.report, "dynamics.loss_at_prior")
    assert (f.severity, f.stage) == (Severity.WARNING, Stage.LOSS)
    prior = float(f.evidence["prior"])
    assert abs(prior - math.log(4)) < 0.05 and abs(float(f.evidence["mean_of_last_20_losses"]) - prior) < 0.03 * prior
    assert f.message.startswith("the cross_entropy loss stays at ")
    assert "log(4) = 1.3863" in f.evidence["prior_is"]


# ---------------------------------------------------------------------------- gradients
def test_vanishing_gradients_in_a_deep_sigmoid_stack():
    s, _ = _watch(z.loop_deep_sigmoid_stack)
    f = _one(s.report, "dynamics.vanishing_gradients")
    assert (f.category, f.severity, f.module, f.step) == (Category.GRADIENT, Severity.INFO, "0", 0)
    assert f.evidence["largest_layer"] == "25" and f.evidence["sampled_steps"] == [0, 1]
    assert float(f.evidence["ratio"]) < 1e-6


def test_rnn_without_clipping_explodes_named_before_the_nan():
    s, _ = _watch(z.loop_rnn_without_clipping)
    f = _one(s.report, "dynamics.exploding_gradients")
    nan = s.report.findings[0]
    assert (f.category, f.module, f.step) == (Category.GRADIENT, "rnn", 15) and nan.step == 16
    assert f.evidence["layer_type"] == "RNN" and f.evidence["clipping_seen"] is False
    assert f.cause.startswith("rnn is a recurrent layer and no gradient clipping was seen")
    assert "clip_grad_norm_" in f.next_check


@pytest.mark.parametrize("loop, code, bug, max_norm", [
    (z.loop_clip_before_backward, "dynamics.clip_before_backward", "# BUG: before backward", 1.0),
    (z.loop_clip_after_step, "dynamics.clip_after_step", "# BUG: after step", 0.1),
])
def test_clip_grad_norm_in_the_wrong_place(loop, code, bug, max_norm):
    s, _ = _watch(loop)
    f = _one(s.report, code)
    assert ((f.category, f.severity, f.op, f.line)
            == (Category.GRADIENT, Severity.WARNING, "clip_grad_norm_", _line(bug)))
    assert f.evidence["max_norm"] == max_norm
    assert "zero_grad(), loss.backward(), clip_grad_norm_(...), optimizer.step()" in f.next_check


@pytest.mark.parametrize("loop, severity", [(z.loop_accumulation_not_divided_sgd, Severity.WARNING),
                                            (z.loop_accumulation_not_divided_adam, Severity.INFO)])
def test_accumulated_loss_not_divided(loop, severity):
    s, _ = _watch(loop)
    f = _one(s.report, "dynamics.accumulation_not_divided")
    assert (f.severity, f.line, f.step) == (severity, _line("# BUG: not divided by accum"), 1)
    assert f.message == ("4 backward() calls accumulate into each optimizer step and the loss is not divided by 4: "
                         "the gradient is 4× the mean")
    assert f.evidence["backward_calls_per_step"] == 4 and f.evidence["loss_node"] == "NllLossBackward0"
    assert f.next_check.endswith("(loss / 4).backward()")


# ---------------------------------------------------------------------------- softmax dims, metrics
def test_log_softmax_over_one_unit_names_the_cause():
    s, _ = _watch(z.loop_log_softmax_over_one_unit)
    f = _one(s.report, "silent.softmax_single_unit")
    assert (f.severity, f.stage, f.module, f.step) == (Severity.ERROR, Stage.FORWARD, "", 0)
    # the line of the model's forward where the op ran (one replay of the call), not the call
    assert (f.file, f.line) == (ZOO, _line("# BUG: one unit"))
    assert f.message == "log_softmax over dim 1 of size 1 (shape [32, 1]): the output is always 0"
    assert "every gradient is exactly zero" in f.cause
    assert f.evidence["output_is_always"] == "0"


def test_a_negative_dim_saved_by_autograd_is_read_as_written():
    # `.log_softmax(-1)` at the end of forward: autograd hands the saved dim back as
    # 18446744073709551615; read modulo the rank that was dim 0, of size 1 with a batch of one
    # utterance, and a correct speech model was told its output is constant (issue 24)
    class Acoustic(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(8, 16, batch_first=True)
            self.phone_layer = nn.Linear(16, 5)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.phone_layer(out).log_softmax(-1)

    torch.manual_seed(0)
    model = Acoustic()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(1, 24, 8), torch.randint(0, 5, (1, 24))
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            loss = F.nll_loss(model(x).transpose(1, 2), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not s.report.filter(code="silent.softmax_single_unit"), str(s.report)
    assert s.report.ok


def test_cross_entropy_on_one_output_unit():
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.zeros(16, dtype=torch.long)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    f = _one(s.report, "silent.softmax_single_unit")
    assert f.message == "cross_entropy over dim 1 of size 1 (shape [16, 1]): the output is always 0"


def test_softmax_over_the_batch_dimension():
    s, _ = _watch(z.loop_softmax_over_batch)
    f = _one(s.report, "silent.softmax_over_batch")
    assert (f.severity, f.line, f.step) == (Severity.WARNING, _line("# BUG: dim 0 is the batch"), 0)
    assert f.message == ("softmax over dim 0, the batch dimension (shape [32, 4]): it works across the samples of "
                         "the batch instead of across classes")


def test_log_softmax_module_over_the_batch_names_the_module():
    # nn.LogSoftmax inside an nn.Sequential: no line of the user's inside it, so the call's line
    s, _ = _watch(z.loop_log_softmax_module_over_batch)
    f = _one(s.report, "silent.softmax_over_batch")
    assert (f.module, f.line, f.step) == ("3", _line("# BUG: the model's LogSoftmax(dim=0)"), 0)

def test_argmax_over_the_batch_dimension_in_validation():
    s, _ = _watch(z.loop_argmax_over_batch_in_validation)
    f = _one(s.report, "silent.softmax_over_batch")
    assert (f.severity, f.op, f.line) == (Severity.WARNING, "argmax", _line("# BUG: argmax over the batch"))
    assert (f.evidence["input_shape"], f.evidence["dim"]) == ((128, 4), 0)
    assert f.message.startswith("argmax over dim 0, the batch dimension (shape [")


def test_validation_metric_in_train_mode_with_dropout():
    s, _ = _watch(z.loop_validation_in_train_mode)
    f = _one(s.report, "silent.train_mode_while_evaluating")
    assert f.evidence["modules_affected"] == ["2 (Dropout p=0.5)"]


# ---------------------------------------------------------------------------- attention that sees the future
def test_gpt_without_causal_mask_found_by_the_automatic_probe():
    s, _ = _watch(z.loop_gpt, False)
    f = _one(s.report, "silent.attention_sees_future")
    assert (f.severity, f.op, f.step, f.line) == (Severity.ERROR, "TinyGPT", 0, _line("# BUG: no causal mask"))
    assert f.evidence["probe"] == "automatic: targets are the inputs shifted by one"
    assert f.evidence["rows_probed"] == 2 and f.evidence["perturbed_from"] == 8
    assert "automatic causal probe" in f.cause


@pytest.mark.parametrize("by_keyword", [False, True])
def test_probe_of_a_model_computing_its_loss_inside_forward(by_keyword):
    # The targets reach the loss inside the model's call, before the call has returned: the probe
    # reads the ids of that call (positional or `input_ids=`), and names the op where the future
    # first reaches an earlier position, in the model's own code.
    s, _ = _watch(z.loop_loss_inside_forward, True, by_keyword)
    f = _one(s.report, "silent.attention_sees_future")
    assert (f.severity, f.step, f.module, f.op) == (Severity.ERROR, 0, "attn", "softmax")
    assert (f.file, f.line) == (ZOO, _line("# BUG: dim=-2 mixes the queries"))
    assert f.evidence["leaks_in"] == "softmax (attn)" and f.evidence["rows_probed"] == 2
    assert "softmax in attn" in f.cause and "automatic causal probe" in f.cause
    assert "dim=-1" in f.next_check


@pytest.mark.parametrize("by_keyword", [False, True])
def test_probe_of_a_correct_model_computing_its_loss_inside_forward_is_quiet(by_keyword, monkeypatch):
    from torchtriage._dynamics import _checker

    ran = []
    monkeypatch.setattr(_checker, "probe", lambda *a: ran.append(a) or _probe(*a))
    s, _ = _watch(z.loop_loss_inside_forward, False, by_keyword)
    assert len(ran) == 1 and s.report.findings == ()


def test_gpt_library_attention_without_mask_names_the_module_and_the_call():
    s, _ = _watch(z.loop_gpt, False)
    f = _one(s.report, "silent.attention_sees_future")
    # inside nn.MultiheadAttention there is no line of the user's: the line is the model's call
    assert (f.module, f.line) == ("blocks.layers.0.self_attn", _line("# BUG: no causal mask"))
    assert f.evidence["leaks_in"] == "multi_head_attention_forward (blocks.layers.0.self_attn)"


def test_gpt_with_causal_mask_passed_through_is_quiet_and_unchanged():
    s, _ = _watch(z.loop_gpt, True)
    assert s.report.findings == ()
    # the probe ran (2 forwards in eval mode) without touching the run's numbers
    torch.manual_seed(0)
    models, opts, train = z.loop_gpt(True)
    train()
    for (name, a), b in zip(models.state_dict().items(), s.models[0].state_dict().values()):
        assert torch.equal(a, b), name


# ---------------------------------------------------------------------------- health series
def test_health_series_every_step_and_per_group_lr():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.01}], lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(5):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    h = s.health
    assert sorted(h.names()) == ["grad_norm", "loss", "lr", "lr[0.1]"]
    assert h.points("lr[0.1]") == [(i, 0.01) for i in range(5)]
    assert [st for st, _ in h.points("loss")] == [0, 1, 2, 3, 4] and h.last("lr") == 0.1


def test_series_store_is_bounded_and_keeps_anomalies_exact():
    store = SeriesStore()
    n = 100_000
    for i in range(n):
        if i == 50_000:
            store.pin(50_000, radius=5)
        store.add("loss", i, float(i))
    pts = store.points("loss")
    assert len(pts) <= HEAD + TAIL + MIDDLE + 11
    assert (pts[:HEAD]
            == [(i, float(i)) for i in range(HEAD)] and pts[-TAIL:] == [(i, float(i)) for i in range(n - TAIL, n)])
    assert [(i, float(i)) for i in range(49_995, 50_006)] == [p for p in pts if 49_995 <= p[0] <= 50_005]
    assert [p[0] for p in pts] == sorted(p[0] for p in pts) and store.count("loss") == n
    assert store.decimated() == ["loss"]


# ---------------------------------------------------------------------------- pictures
def test_terminal_report_has_a_loss_sparkline():
    from torchtriage._render._spark import sparkline
    from torchtriage.report import render_text

    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([1.0, None, float("nan"), 1e4]) == "▁ ×█"  # log scale: 1 and 1e4 at the ends
    s, _ = _watch(z.loop_lr_too_high)
    lines = render_text(s.report).splitlines()
    assert lines[-2].startswith("loss ▁▁▁▂▂▂▃▃▃▃▄▄▄▄▅▅▅▆▆▆▆▇▇▇▇██") and lines[-2].endswith(", steps 0–59")
    assert lines[-2].count("×") == 13  # the buckets holding the NaN steps at the end


def test_html_report_draws_loss_grad_norm_and_lr_with_the_anomaly_marked():
    from torchtriage.report import render_html

    s, _ = _watch(z.loop_epoch_scheduler_stepped_per_batch)
    page = render_html(s.report)
    for name in ("loss", "grad_norm", "lr"):
        assert f'<figcaption class="chart-title">{name}</figcaption>' in page
    assert page.count('class="mark"') == 3 and page.count(">step 20</text>") == 3  # the primary finding's step


def test_html_chart_of_a_decimated_series_uses_the_kept_steps():
    from torchtriage import Report
    from torchtriage.report import render_html

    steps = list(range(2000)) + list(range(2000, 100_000, 64))
    rep = Report((), meta={"series_steps": {"loss": steps}}, series={"loss": [1.0 / (1 + s) for s in steps]})
    ticks = re.findall(r'class="tick"[^>]*text-anchor="middle">(\d+)<', render_html(rep))
    assert ticks == ["0", "20000", "40000", "60000", "80000"]  # steps, not the 3,531 kept points' indices


def test_gpt_without_causal_mask_under_run(tmp_path):
    import json
    from pathlib import Path

    from conftest import run_cli

    script = tmp_path / "train.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                      "from zoo.dynamics import loop_gpt\nmodel, opt, train = loop_gpt(False)\ntrain()\n",
                      encoding="utf-8")
    out = tmp_path / "report.json"
    p = run_cli("run", "--json", str(out), str(script), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    findings = json.loads(out.read_text(encoding="utf-8"))["findings"]
    assert [(f["code"], f["line"], f["evidence"]["probe"]) for f in findings] == [
        ("silent.attention_sees_future", _line("# BUG: no causal mask"),
         "automatic: targets are the inputs shifted by one")]
    assert re.search(r"\nloss [▁▂▃▄▅▆▇█]{4}  [0-9.]+ → [0-9.]+, steps 0–3\n", p.stderr), p.stderr


def test_metric_region_leaves_the_mode_stack_when_backward_runs_through_it():
    # A submodule called after the root's forward puts the session in the "forward" stage, so the
    # region passes `loss.backward()` through while torch has it off the stack: leaving from
    # inside must wait, not search the stack (the region used to stay pushed after the session).
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y) + F.mse_loss(model[2](torch.relu(model[0](x))), y)
            loss.backward()
            opt.step()
    assert torch._C._len_torch_function_stack() == 0
    assert s.report.findings == ()


def test_a_mask_built_by_broadcasting_is_not_a_metric():
    # lengths[:, None] > positions, with as many sequences as positions: (N, 1) vs (N,) by chance
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y, lengths = torch.randn(8, 8, 4), torch.randn(8, 8), torch.randint(1, 9, (8,))
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            out = model(x).squeeze(-1)
            mask = lengths.unsqueeze(1) > torch.arange(8)
            loss = ((out - y) ** 2).masked_fill(~mask, 0).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert s.report.findings == ()


def test_sampling_every_step_keeps_one_read_per_step_and_a_bounded_queue():
    from tests._syncs import SyncCounter

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    per_step, queued = [], []
    with SyncCounter() as counter:
        with torchtriage.watch(model, opt, on_anomaly="record", report=False, dynamics_every=1) as s:
            dyn = s.checker("dynamics")
            for _ in range(12):
                n0 = len(counter.calls)
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                per_step.append(len(counter.calls) - n0)
                queued.append(len(dyn.flags))
    assert per_step == [1] * 12
    # (+1 after step 0: the numbers of the probe of samples that mix across the batch, `_batchmix`)
    assert queued[0] <= 3 and max(queued[1:]) <= 2  # the last step's sample (grad norms, update norms), not the run's
    assert len(dyn.vanish.previous) == 2 and dyn.ratios[-1][0] == 11  # every step's numbers arrived


def test_series_store_since_gives_a_polling_reader_the_new_points():
    store = SeriesStore()
    seen, got = 0, []
    for i in range(HEAD + TAIL + 500):
        store.add("loss", i, float(i))
        if i % 7 == 0:
            got += store.since("loss", seen)
            seen = store.count("loss")
    got += store.since("loss", seen)
    assert got == [(i, float(i)) for i in range(HEAD + TAIL + 500)]
    assert store.since("loss", store.count("loss")) == [] and store.since("nope", 0) == []


def test_harm_gate_measures_from_the_findings_step_even_past_its_window():
    # a loss passing through the label prior at step 70 and falling on for 600 steps (issue 24):
    # the losses at step 70 are gone from the recent window by the end, so they are taken at hold
    from torchtriage._dynamics._common import finding as make
    from torchtriage._dynamics._harm import HarmGate

    gate = HarmGate()
    f = make("loss_at_prior", stage=Stage.LOSS, step=70, loss="cross_entropy", value="1.409", steps=71,
             prior="1.386", what="x", evidence={})
    flat = make("loss_at_prior", stage=Stage.LOSS, step=70, loss="cross_entropy", value="1.409", steps=71,
                prior="1.386", what="x", evidence={})
    for step in range(700):
        gate.loss(step, 1.4 if step <= 80 else 1.4 - 0.8 * (step - 80) / 620)
        if step == 70:
            gate.hold(f)
    (verdict,) = gate.release()
    assert verdict.severity is Severity.INFO and verdict.evidence["loss_at_finding"] == "1.4"
    assert verdict.evidence["loss_at_end"] == "0.6071" and verdict.evidence["run_kept_learning"] is True

    gate = HarmGate()
    for step in range(700):
        gate.loss(step, 1.4 + 0.01 * (step % 3))
        if step == 70:
            gate.hold(flat)
    (verdict,) = gate.release()
    assert verdict.severity is Severity.WARNING and verdict.evidence["run_kept_learning"] is False


def test_a_loss_of_both_signs_rising_from_near_0_is_measured_from_its_size():
    from torchtriage._dynamics._trends import Growth

    # PPO's loss (the clipped surrogate, negative, plus the value loss): around +-0.02, one
    # rollout's losses 0.0018 -> 0.015, then a new rollout's value loss at 0.81 (x41 its size).
    mixed = [(-0.02, 0.015, -0.03, 0.02, 0.68, -0.01)[i % 6] for i in range(60)]
    series = mixed + [0.0018, 0.0032, 0.0044, 0.0129, 0.0141, 0.0152, 0.81]
    g = Growth()
    assert [g.add(i, v) for i, v in enumerate(series)] == [None] * len(series)
    # The same loss blowing up: x1000 of its size in 6 steps is still divergence.
    g = Growth()
    found = [g.add(i, v) for i, v in enumerate(mixed + [0.0018, 0.01, 0.1, 1.0, 5.0, 20.0, 90.0])]
    hit = next(r for r in found if r is not None)
    assert (hit["start"], hit["first"], hit["last"]) == (60, 0.0018, 20.0)


def test_a_gan_whose_two_models_gradient_norms_differ_by_orders_of_magnitude_is_no_spike():
    """A discriminator and a generator step in every iteration: their gradient norms (here about
    1000x apart) alternate in the run's one "grad_norm" series, and the reads that carry them
    come a step late on most steps and at once on the sampled ones. Each model's norm is compared
    with its own: no jump."""
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
    D = nn.Sequential(nn.Linear(16, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1), nn.Sigmoid())
    opt_d, opt_g = torch.optim.Adam(D.parameters(), 1e-4), torch.optim.Adam(G.parameters(), 1e-4)
    real_data = torch.randn(256, 16)
    with torchtriage.watch([G, D], [opt_d, opt_g], on_anomaly="record", report=False) as s:
        for i in range(40):
            real, z = real_data[(i * 16) % 256:][:16], torch.randn(16, 8)
            D.zero_grad()
            err_real = F.binary_cross_entropy(D(real), torch.ones(16, 1))
            err_real.backward()
            fake = G(z)
            F.binary_cross_entropy(D(fake.detach()), torch.zeros(16, 1)).backward()
            opt_d.step()
            G.zero_grad()
            content = F.mse_loss(fake, real)
            (1e-3 * content + 1e-6 * F.binary_cross_entropy(D(fake), torch.ones(16, 1))).backward()
            opt_g.step()
    norms = s.health.values("grad_norm")
    assert max(norms[0::2]) / max(norms[1::2]) > 100 or max(norms[1::2]) / max(norms[0::2]) > 100
    assert s.report.filter(code="dynamics.exploding_gradients") == []
