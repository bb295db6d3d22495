"""Exception triage (issue 2 §4): every classification with a real tiny model, exact finding."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn as nn

import torchtriage
from torchtriage import Category, Stage
from torchtriage._catalogue import catalogue, fields_of
from torchtriage._triage import RULES, classify
from zoo import forward as z

HERE = __file__


def _watched(model, fn):
    """Run fn() in a session with only the triage check; return (finding, exception)."""
    with pytest.raises(Exception) as info:
        with torchtriage.watch(model, checks=["triage"], on_anomaly="record", report=False) as s:
            fn()
    (finding,) = s.report.findings
    return finding, info.value


FORWARD_CASES = [
    # model, input, category, code, module, op, message
    (z.WrongInFeatures, lambda: torch.randn(4, 8), "shape", "shape.linear_in_features", "head", "matmul",
     "head: Linear expects 32 input features, got 16 (input 4x16, weight.T 32x1)"),
    (z.ResidualWidthMismatch, lambda: torch.randn(4, 8), "shape", "shape.broadcast", "", "ResidualWidthMismatch",
     "sizes 8 and 16 do not broadcast at dimension 1"),
    (z.ConcatWrongAxis, lambda: torch.randn(4, 8), "shape", "shape.cat", "", "cat",
     "cat: tensor 1 has size 6 where 4 is expected (all dimensions but 0 must match)"),
    (z.StackRagged, lambda: torch.randn(4, 8), "shape", "shape.stack", "", "stack",
     "stack: entry 0 is [4, 8] but entry 1 is [3, 8]; stacked tensors must have equal shapes"),
    (z.ViewFixedBatch, lambda: torch.randn(4, 8), "shape", "shape.view", "", "view/reshape",
     "view/reshape to [32, 2, 4] is impossible for a tensor of 32 elements"),
    (z.BatchNormOneSample, lambda: torch.randn(1, 8), "shape", "shape.batchnorm_one_sample", "norm", "batch_norm",
     "norm: batch norm got one value per channel in training (input torch.Size([1, 4]))"),
    (z.CleanMLP, lambda: torch.arange(16).view(2, 8), "dtype", "dtype.integer_input", "body.0", "matmul",
     "body.0: integer tensor (Long) multiplied with floating point (Float)"),
    (z.CleanMLP, lambda: torch.randn(2, 8, dtype=torch.float64), "dtype", "dtype.double_input", "body.0", "matmul",
     "body.0: float64 input with a float32 layer (Double and Float)"),
    (z.CleanMLP, lambda: torch.randn(2, 8).half(), "dtype", "dtype.half_input", "body.0", "matmul",
     "body.0: half-precision and float32 operands meet (Half and Float)"),
    (z.EmbeddingFloatIds, lambda: torch.tensor([1.0, 2.0]), "dtype", "dtype.index", "embed", "embedding",
     "indices must be integers (Long, Int), got a floating or other dtype"),
    (z.FlattenAfterTranspose, lambda: torch.randn(2, 3, 4), "layout", "layout.view_noncontiguous", "", "view",
     "view() on a non-contiguous tensor (h: shape [2, 4, 3], stride [12, 1, 4]): its strides do not allow a view"),
    (z.ChannelsLastFlatten, lambda: torch.randn(2, 3, 4, 4), "layout", "layout.channels_last", "", "view",
     "view() on h, which is in channels_last memory format"),
    (z.HugeAttentionScores, lambda: torch.randn(2, 4), "memory", "memory.oom", "", "HugeAttentionScores", None),
]


@pytest.mark.parametrize("cls, make, category, code, module, op, message", FORWARD_CASES,
                         ids=[f"{c[0].__name__}-{c[3]}" for c in FORWARD_CASES])
def test_forward_faults_name_category_module_line_and_message(cls, make, category, code, module, op, message):
    model = cls()
    x = make()
    f, exc = _watched(model, lambda: model(x))
    assert (f.category.value, f.code, f.module, f.op, f.stage, f.step) == (category, code, module, op, Stage.FORWARD, 0)
    # The user's frame is the model's faulty line (zoo files are user code), except for dtype
    # faults raised inside nn.Linear, where the innermost user line is CleanMLP.forward.
    expected_line = z.bug_line(cls) if cls is not z.CleanMLP else _line_containing(z.CleanMLP, "return self.body(x)")
    assert f.file == z.__file__ and f.line == expected_line
    if message is not None:
        assert f.message == message
    else:
        assert f.message.startswith("out of memory: RuntimeError: ") and "can't allocate memory" in f.message
    assert f.evidence["exception"].startswith(type(exc).__name__ + ": ")
    assert f.cause and f.next_check


@pytest.mark.parametrize("cls, bug_in, code, module, op, message", [
    # three blocks of one class in a ModuleList: the path names the third, the line is the shared forward's
    (z.ThirdBlockKeyWidth, z._Attn, "shape.bmm", "blocks.2.attn", "bmm",
     "batched matmul operands do not fit: expected batch2 to start with [2, 8], got [2, 6]"),
    (z.BoxHeadInFeatures, z.BoxHeadInFeatures, "shape.linear_in_features", "heads.box", "matmul",
     "heads.box: Linear expects 6 input features, got 8 (input 10x8, weight.T 6x4)"),
])
def test_faults_inside_modulelist_and_moduledict_are_named_by_their_path(cls, bug_in, code, module, op, message):
    model = cls()
    f, _ = _watched(model, lambda: model(torch.randn(2, 5, 8)))
    assert (f.category, f.code, f.stage, f.step, f.module, f.op, f.file, f.line, f.message) == (
        Category.SHAPE, code, Stage.FORWARD, 0, module, op, z.__file__, z.bug_line(bug_in), message)


def _line_containing(cls, text):
    import inspect

    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_evidence_has_module_inputs_parameters_and_operands():
    model = z.WrongInFeatures()
    x = torch.randn(4, 8)
    f, _ = _watched(model, lambda: model(x))
    assert f.evidence["operands"] == "a=4x16, b=32x1, got=16"
    assert f.evidence["input[0]"].shape == (4, 16) and f.evidence["input[0]"].dtype == "torch.float32"
    assert f.evidence["param weight"].shape == (1, 32) and f.evidence["param bias"].shape == (1,)
    assert f.evidence["source_line"] == "return self.head(h)  # BUG"
    assert f.next_check == "set in_features=16 or fix the layer before it (a missing flatten, a wrong hidden size)"
    d = f.to_dict()
    assert d["evidence"]["input[0]"]["shape"] == [4, 16] and d["line"] == z.bug_line(z.WrongInFeatures)


def test_meta_model_with_cpu_input_is_a_device_fault_naming_both_devices():
    with torch.device("meta"):
        model = z.CleanMLP()
    x = torch.randn(2, 8)
    f, _ = _watched(model, lambda: model(x))
    assert (f.category, f.code, f.module) == (Category.DEVICE, "device.module_input", "body.0")
    assert f.message == "body.0: its parameters are on meta but input[0] is on cpu"
    assert f.next_check.startswith("the meta side has shapes but no data: materialize it")
    assert f.evidence["param weight"].device == "meta"


def test_meta_tensor_read_is_a_device_fault():
    try:
        torch.randn(3, device="meta").sum().item()
    except RuntimeError as e:
        f = torchtriage.triage_exception(e).primary
    assert (f.category, f.code, f.module) == (Category.DEVICE, "device.meta", None)
    assert f.message == "a meta tensor (shape only, no data) reached an op that needs values"


LOSS_CASES = [
    (z.ce_with_column_target, "shape", "shape.loss_target_dims",
     "loss: the target has too many dimensions for class indices "
     "(0D or 1D target tensor expected, multi-target not supported)"),
    (z.ce_with_other_batch, "shape", "shape.loss_batch", "loss: input batch size 4 differs from target batch size 5"),
    (z.ce_with_float_target, "dtype", "dtype.loss_target", "loss target has dtype Float, expected Long or Byte"),
]


@pytest.mark.parametrize("step, category, code, message", LOSS_CASES, ids=[c[2] for c in LOSS_CASES])
def test_loss_faults_are_staged_loss_at_the_users_loss_line(step, category, code, message):
    model = nn.Linear(8, 3)
    x = torch.randn(4, 8)
    f, _ = _watched(model, lambda: step(model, x))
    assert (f.category.value, f.code, f.module, f.stage, f.op) == (category, code, None, Stage.LOSS, "cross_entropy")
    assert (f.file, f.line) == (z.__file__, z.bug_line(step))
    assert f.message == message


def test_gradient_no_graph_after_item_rebuild():
    model = z.CleanMLP()
    f, _ = _watched(model, lambda: z.loss_rebuilt_from_item(model, torch.randn(2, 8)))
    assert (f.category, f.code, f.stage, f.op, f.line) == (
        Category.GRADIENT, "gradient.no_graph", Stage.BACKWARD, "backward", z.bug_line(z.loss_rebuilt_from_item))
    assert f.message == "backward() on a tensor that has no graph (it does not require grad)"
    assert ".item()" in f.next_check


def test_gradient_saved_tensor_modified_inplace():
    model = z.SigmoidThenInplace()
    f, _ = _watched(model, lambda: z.backward_through_saved_inplace(model, torch.randn(2, 8)))
    assert (f.category, f.code, f.stage) == (Category.GRADIENT, "gradient.inplace_saved", Stage.BACKWARD)
    assert f.line == z.bug_line(z.backward_through_saved_inplace)
    assert f.message == ("a tensor saved for backward (torch.FloatTensor [2, 1], output 0 of Sigmoid) "
                         "was modified in place (version 1, expected 0)")


def test_gradient_backward_through_graph_twice_counts_the_step():
    model = z.CleanMLP()
    f, _ = _watched(model, lambda: z.hidden_state_kept_across_steps(model, torch.randn(2, 8)))
    assert (f.category, f.code, f.stage, f.step) == (Category.GRADIENT, "gradient.backward_twice", Stage.BACKWARD, 1)
    assert f.line == z.bug_line(z.hidden_state_kept_across_steps)
    # the old graph enters at `h = torch.tanh(model.body[0](x) + h)`: h, carried across steps
    assert f.message.endswith("(through h)")
    assert f.next_check.startswith("detach it where it is carried (h = h.detach() before the next step")


CUDA_MESSAGES = [
    # real texts of PyTorch's CUDA errors, reproduced as strings (no GPU needed)
    ("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! "
     "(when checking argument for argument mat1 in method wrapper_CUDA_addmm)", "device.mismatch",
     "tensors on different devices meet in one op: cuda:0 and cpu"),
    ("Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors "
     "on cuda:0 (when checking argument in method wrapper_CUDA_addmm)", "device.mismatch",
     "tensors on different devices meet in one op: cpu and cuda:0"),
    ("Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
     "device.input_weight", "input on cuda, weight on cpu"),
    ("Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor) should be the same",
     "dtype.half_input", "half-precision and float32 operands meet (Half and Float)"),
    ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB",
     "memory.oom", "out of memory: RuntimeError: CUDA out of memory. "
                   "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB"),
    ("expected scalar type Long but found Float", "dtype.scalar_type", "an op expected dtype Long but found Float"),
    ("Found dtype Float but expected Long", "dtype.loss_target", "loss target has dtype Float, expected Long"),
]


@pytest.mark.parametrize("text, code, message", CUDA_MESSAGES, ids=[c[1] + str(i) for i, c in enumerate(CUDA_MESSAGES)])
def test_cuda_message_texts(text, code, message):
    try:
        raise RuntimeError(text)
    except RuntimeError as e:
        f = torchtriage.triage_exception(e).primary
    assert (f.code, f.message, f.file, f.module, f.step) == (code, message, HERE, None, None)


def test_out_of_memory_error_type_is_memory_whatever_the_text():
    try:
        raise torch.OutOfMemoryError("allocator gave up")
    except torch.OutOfMemoryError as e:
        f = torchtriage.triage_exception(e).primary
    assert ((f.category, f.code, f.message)
            == (Category.MEMORY, "memory.oom", "out of memory: OutOfMemoryError: allocator gave up"))


def test_unknown_exception_is_other_with_the_user_line_never_forced():
    model = z.CleanMLP()

    def step():
        {}["missing"]

    f, _ = _watched(model, step)
    assert (f.category, f.code, f.message) == (Category.OTHER, "other.exception", "KeyError: 'missing'")
    assert f.file == HERE and f.evidence["source_line"] == '{}["missing"]'
    assert torchtriage.classify_issue(KeyError("x")) == ["other"]


def test_a_wrapped_exception_is_classified_by_its_cause():
    try:
        try:
            nn.Linear(4, 2)(torch.randn(3, 5))
        except RuntimeError as inner:
            raise ValueError("training failed") from inner
    except ValueError as e:
        f = torchtriage.triage_exception(e).primary
    assert (f.code, f.module) == ("shape.linear_in_features", "Linear")
    assert f.message == "Linear: Linear expects 4 input features, got 5 (input 3x5, weight.T 4x2)"


def test_outside_a_session_the_module_is_named_by_its_class_and_there_is_no_step():
    model = z.WrongInFeatures()
    try:
        model(torch.randn(4, 8))
    except RuntimeError as e:
        report = torchtriage.triage_exception(e)
    f = report.primary
    assert (f.module, f.step, f.stage, f.line) == ("Linear", None, Stage.FORWARD, z.bug_line(z.WrongInFeatures))
    with pytest.raises(TypeError, match="triage_exception\\(\\) takes an exception, got str"):
        torchtriage.triage_exception("boom")


@pytest.mark.parametrize("policy", ["raise", "warn", "record"])
def test_the_users_exception_is_reraised_unchanged_under_every_policy(policy):
    model = z.WrongInFeatures()
    x = torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError) as info:
            with torchtriage.watch(model, on_anomaly=policy, report=False) as s:
                model(x)
    assert str(info.value) == "mat1 and mat2 shapes cannot be multiplied (4x16 and 32x1)"
    assert s.report.primary.code == "shape.linear_in_features"
    assert s.exception is info.value


def test_clean_training_gives_an_empty_report():
    model = z.CleanMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchtriage.watch(model, opt, checks=["triage"], on_anomaly="record", report=False) as s:
        for _ in range(3):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert s.report.findings == () and s.report.primary is None and s.step == 3
    assert torchtriage.classify_issue(s.report) == []


def test_the_session_can_go_on_after_a_caught_forward_error():
    model = z.CleanMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchtriage.watch(model, opt, checks=["triage"], on_anomaly="record", report=False) as s:
        with pytest.raises(RuntimeError):
            model(torch.randn(2, 7))
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
    assert s._depth == 0 and s.step == 1 and s.report.findings == ()  # caught: not the session's exception


def test_chinese_messages(monkeypatch):
    from torchtriage import _catalogue

    monkeypatch.setattr(_catalogue, "_lang", "zh")
    model = z.WrongInFeatures()
    f, _ = _watched(model, lambda: model(torch.randn(4, 8)))
    assert f.message == "head：Linear 期望 32 个输入特征，实际为 16（输入 4x16，weight.T 32x1）"
    assert f.cause == "该层的 in_features 与输入最后一维的大小不一致"


def test_every_rule_has_messages_in_both_languages_with_the_same_fields():
    tables = catalogue()
    keys = [k for k in tables["en"] if k.startswith(("triage.", "contract.", "seed."))]
    assert len(keys) > 150
    for key in keys:
        assert key in tables["zh"], key
        assert fields_of(tables["en"][key]) == fields_of(tables["zh"][key]), key
    for rule in RULES:
        for suffix in ("", ".cause", ".next"):
            assert f"triage.{rule.code}{suffix}" in tables["en"]


def test_rules_are_specific_before_general():
    # a dtype clash in a matmul must not read as a shape clash
    hit = classify(RuntimeError("mat1 and mat2 must have the same dtype, but got Long and Float"))
    assert hit is not None and hit[0].code == "dtype.matmul"
    assert classify(RuntimeError("something else entirely")) is None
    assert re.fullmatch(r"\w+\.\w+", RULES[0].code)


@pytest.mark.parametrize("text,code", [
    # nn.MultiheadAttention's own words say "2D"; the two shapes say the sizes differ
    ("The shape of the 2D attn_mask is torch.Size([6, 6]), but should be (5, 5).", "shape.size"),
    ("The shape of the 3D attn_mask is torch.Size([2, 6, 6]), but should be (4, 5, 5).", "shape.size"),
    ("Expected input of shape (8, 3, 32, 32), got (8, 32, 32)", "shape.rank"),
    ("Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [16, 4]", "shape.rank"),
])
def test_two_printed_shapes_tell_a_size_mismatch_from_a_rank_mismatch(text, code):
    from torchtriage._triage._vocab import read

    assert read(text).code == code
