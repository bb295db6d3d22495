"""Exception triage by family (issue 12): every error raised by real torch calls, the way users
write it; each test checks the category, the code, the operands named with their metadata,
the torch function and the user's line (the line marked `# BUG`)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Category

HERE = __file__


def _bug_line(fn):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if "# BUG" in line)


def _triage(fn):
    try:
        fn()
    except Exception as exc:  # the user's error, whatever its type
        return torchtriage.triage_exception(exc).primary
    raise AssertionError(f"{fn.__name__} raised nothing")


def _check(fn, category, code, operands=None):
    """Triage fn's error; assert category, code, the user's line and each named operand's metadata."""
    f = _triage(fn)
    assert (f.category.value, f.code) == (category, code), (f.code, f.message)
    assert (f.file, f.line) == (HERE, _bug_line(fn)), f.line
    for name, text in (operands or {}).items():
        assert str(f.evidence[f"operand {name}"]) == text, (name, f.evidence)
    return f


# ---------------------------------------------------------------- device
def rnn_hidden_state_without_device():
    with torch.device("meta"):  # stands for .cuda(): the same message on a GPU
        rnn = nn.GRU(4, 5)
    x = torch.randn(3, 2, 4, device="meta")
    h0 = torch.zeros(1, 2, 5)
    return rnn(x, h0)  # BUG


def test_rnn_initial_state_on_another_device_names_the_state_and_the_module():
    f = _check(rnn_hidden_state_without_device, "device", "device.rnn_hidden",
               {"x": "float32[3, 2, 4] meta", "h0": "float32[1, 2, 5] cpu"})
    assert f.message == "GRU: the RNN's input is on meta but its initial state h0 is on cpu"
    assert f.module == "GRU" and f.evidence["function"] == "torch._VF.gru"
    assert "device=x.device" in f.next_check


def numpy_of_meta_tensor():
    feats = torch.zeros(2, 3, device="meta")
    return feats.numpy()  # BUG


def asarray_of_grad_tensor():
    w = torch.zeros(3, requires_grad=True)
    return np.asarray(w)  # BUG


def numpy_of_grad_tensor():
    pred = torch.ones(2, requires_grad=True) * 2
    return pred.numpy()  # BUG


def asarray_of_meta_tensor():
    emb = torch.zeros(4, 2, device="meta")  # stands for embeddings left on the GPU
    return np.asarray(emb)  # BUG


def test_numpy_on_accelerator_and_requires_grad_tensors():
    f = _check(numpy_of_meta_tensor, "device", "device.numpy", {"feats": "float32[2, 3] meta"})
    assert f.message == "Tensor.numpy: feats is on meta: NumPy can only read CPU memory (feats: float32[2, 3] meta)"
    assert f.next_check.startswith("use feats.detach().cpu().numpy()")
    f = _check(asarray_of_meta_tensor, "device", "device.numpy", {"emb": "float32[4, 2] meta"})
    assert f.message == "Tensor.numpy: emb is on meta: NumPy can only read CPU memory (emb: float32[4, 2] meta)"
    f = _check(asarray_of_grad_tensor, "gradient", "gradient.numpy_requires_grad",
               {"w": "float32[3] cpu requires_grad"})
    assert f.message.startswith("Tensor.numpy: w requires grad")
    f = _check(numpy_of_grad_tensor, "gradient", "gradient.numpy_requires_grad",
               {"pred": "float32[2] cpu requires_grad non-leaf"})
    assert f.next_check == "use pred.detach().cpu().numpy(); for a scalar loss use loss.item()"


def pin_memory_of_device_tensor():
    batch = torch.zeros(4, 3, device="meta")
    return batch.pin_memory()  # BUG


def test_pin_memory_of_a_tensor_already_on_a_device():
    f = _check(pin_memory_of_device_tensor, "device", "device.pin_memory", {"batch": "float32[4, 3] meta"})
    assert f.message.startswith("Tensor.pin_memory: pin_memory() on a MetaFloatType tensor")


def class_counts_with_labels_on_another_device():
    labels = torch.tensor([0, 2, 2], device="meta")  # stands for the batch's labels on the GPU
    counts = torch.zeros(3)
    return counts.index_add_(0, labels, torch.ones(3))  # BUG


def test_index_tensor_on_another_device_names_the_index():
    f = _check(class_counts_with_labels_on_another_device, "device", "device.index",
               {"counts": "float32[3] cpu", "labels": "int64[3] meta"})
    assert f.message == ("Tensor.index_add_: the index labels is on meta, the indexed tensor on cpu "
                         "(counts: float32[3] cpu, labels: int64[3] meta)")
    assert f.next_check.startswith("move the index with labels.to(x.device)")


def test_index_tensor_on_another_device_cuda_text():
    # CUDA's indexing check (x[idx] with idx on another GPU, or a CUDA index into a CPU tensor)
    # names only the indexed tensor's device: an index on the CPU is accepted, so the index is
    # "on a device other than cpu"; meta indexing does not run that check (text as CUDA prints it)
    e = RuntimeError("indices should be either on cpu or on the same device as the indexed tensor (cuda:0)")
    f = torchtriage.triage_exception(e).primary
    assert (f.category, f.code) == (Category.DEVICE, "device.index")
    assert f.message == "the index is on a device other than cpu, the indexed tensor on cuda:0"


# ---------------------------------------------------------------- dtype
def mean_of_integer_counts():
    counts = torch.tensor([3, 1, 4, 1])
    return counts.mean()  # BUG


def std_of_integer_labels():
    labels = torch.arange(6)
    return labels.std()  # BUG


def softmax_of_integer_scores():
    scores = torch.arange(6).view(2, 3)
    return scores.softmax(dim=-1)  # BUG


def test_reductions_on_integer_tensors():
    f = _check(mean_of_integer_counts, "dtype", "dtype.integer_reduction", {"counts": "int64[4] cpu"})
    assert f.message == ("Tensor.mean: mean() on an integer tensor (Long): the result needs a floating dtype "
                         "(counts: int64[4] cpu)")
    assert f.next_check.startswith("cast first (counts.float().mean())")
    _check(std_of_integer_labels, "dtype", "dtype.integer_reduction", {"labels": "int64[6] cpu"})
    f = _check(softmax_of_integer_scores, "dtype", "dtype.integer_reduction", {"scores": "int64[2, 3] cpu view"})
    assert f.op == "Tensor.softmax"


def gather_with_float_index():
    logits = torch.randn(3, 4)
    idx = torch.zeros(3, 1)
    return logits.gather(1, idx)  # BUG


def cross_entropy_float_target():
    logits = torch.randn(3, 4)
    target = torch.tensor([0.0, 1.0, 2.0])
    return F.cross_entropy(logits, target)  # BUG


def test_index_and_target_dtypes():
    _check(gather_with_float_index, "dtype", "dtype.index", {"logits": "float32[3, 4] cpu", "idx": "float32[3, 1] cpu"})
    f = _check(cross_entropy_float_target, "dtype", "dtype.loss_target", {"target": "float32[3] cpu"})
    assert f.message == "loss target has dtype Float, expected Long or Byte"


def float64_numpy_input():
    model = nn.Linear(3, 2)
    x = torch.from_numpy(np.random.rand(4, 3))
    return model(x)  # BUG


def half_times_float():
    a = torch.randn(2, 3).half()
    b = torch.randn(3, 2)
    return a @ b  # BUG


def integer_requires_grad():
    steps = torch.zeros(3, dtype=torch.long)
    return steps.requires_grad_()  # BUG


def test_float64_numpy_input_mixed_precision_and_integer_requires_grad():
    f = _check(float64_numpy_input, "dtype", "dtype.double_input", {"x": "float64[4, 3] cpu"})
    assert f.message == "Linear: float64 input with a float32 layer (Double and Float)"
    f = _check(half_times_float, "dtype", "dtype.half_input", {"a": "float16[2, 3] cpu", "b": "float32[3, 2] cpu"})
    assert f.message == "half-precision and float32 operands meet (Half and Float)" and f.op == "matmul"
    f = _check(integer_requires_grad, "dtype", "dtype.requires_grad_integer", {"steps": "int64[3] cpu"})
    assert f.message == ("requires_grad on an integer tensor (steps: int64[3] cpu): only floating point and "
                         "complex tensors can require gradients")


# ---------------------------------------------------------------- shape
def squeeze_then_softmax():
    x = torch.randn(1, 5)  # the last batch holds one sample
    logits = x.squeeze()
    return logits.softmax(dim=1)  # BUG


def squeeze_inline_then_sum():
    batch = torch.randn(1, 5)
    return batch.squeeze().sum(dim=1)  # BUG


def test_dim_out_of_range_after_squeeze_of_a_batch_of_one():
    f = _check(squeeze_then_softmax, "shape", "shape.dim_range_squeeze", {"logits": "float32[5] cpu view"})
    assert f.message == ("Tensor.softmax: dim 1 does not exist: logits (squeezed from [1, 5]) is 1-D, squeeze() "
                         "removed every dimension of size 1, the batch dimension of a one-sample batch too "
                         "(logits: float32[5] cpu view)")
    assert f.next_check.startswith("name the dimension to drop: squeeze(-1)")
    f = _check(squeeze_inline_then_sum, "shape", "shape.dim_range_squeeze", {"batch": "float32[1, 5] cpu"})
    assert "batch.squeeze() (squeezed from [1, 5]) is 1-D" in f.message


def transpose_out_of_range():
    h = torch.randn(2, 3)
    return h.transpose(1, 2)  # BUG


def test_dim_out_of_range_without_squeeze_is_the_plain_dim_code():
    f = _check(transpose_out_of_range, "shape", "shape.dim_range", {"h": "float32[2, 3] cpu"})
    assert f.message.startswith("Tensor.transpose: dim 2 does not exist: h has 2 dimension(s) (valid dims -2..1)")


def dot_of_matrices():
    q = torch.randn(2, 4)
    k = torch.randn(2, 4)
    return torch.dot(q, k)  # BUG


def outer_of_matrix():
    u = torch.randn(2, 2)
    v = torch.randn(3)
    return torch.outer(u, v)  # BUG


def ger_of_matrix():
    u = torch.randn(2, 2)
    v = torch.randn(3)
    return torch.ger(u, v)  # BUG


def test_one_dimensional_only_ops():
    f = _check(dot_of_matrices, "shape", "shape.one_d_only", {"q": "float32[2, 4] cpu", "k": "float32[2, 4] cpu"})
    assert f.message == ("torch.dot: dot takes 1-D vectors, got 2-D and 2-D tensors "
                         "(q: float32[2, 4] cpu, k: float32[2, 4] cpu)")
    assert f.op == "dot"
    assert f.to_dict()["evidence"]["operand q"] == {
        "name": "q", "shape": [2, 4], "dtype": "float32", "device": "cpu", "layout": "strided",
        "requires_grad": False, "is_view": False, "is_leaf": True}
    f = _check(outer_of_matrix, "shape", "shape.one_d_only", {"u": "float32[2, 2] cpu"})
    assert "outer takes 1-D vectors, got 2-D tensors" in f.message
    f = _check(ger_of_matrix, "shape", "shape.one_d_only", {"u": "float32[2, 2] cpu", "v": "float32[3] cpu"})
    assert f.message.startswith("torch.ger: outer takes 1-D vectors, got 2-D tensors")


def bmm_of_2d():
    q = torch.randn(4, 8)
    k = torch.randn(2, 8, 4)
    return torch.bmm(q, k)  # BUG


def einsum_missing_batch():
    a = torch.randn(3, 4)
    b = torch.randn(2, 4, 5)
    return torch.einsum("bij,bjk->bik", a, b)  # BUG


def conv_on_unbatched_2d():
    conv = nn.Conv2d(3, 8, 3)
    img = torch.randn(28, 28)
    return conv(img)  # BUG


def conv_wrong_channels():
    conv = nn.Conv2d(3, 8, 3)
    img = torch.randn(2, 28, 28, 3)  # NHWC
    return conv(img)  # BUG


def test_bmm_einsum_and_conv_rank_and_channel_mismatches():
    f = _check(bmm_of_2d, "shape", "shape.bmm_rank", {"q": "float32[4, 8] cpu", "k": "float32[2, 8, 4] cpu"})
    assert f.message.startswith("torch.bmm: bmm needs 3-D (batch, n, m) tensors: batch1 is not 3-D")
    f = _check(einsum_missing_batch, "shape", "shape.einsum_rank", {"a": "float32[3, 4] cpu"})
    assert "einsum operand 0 has 2 dimension(s) but the equation names 3" in f.message
    f = _check(conv_on_unbatched_2d, "shape", "shape.conv_rank", {"img": "float32[28, 28] cpu"})
    assert f.message == "Conv2d: conv2d expects 3D (unbatched) or 4D (batched) input, got size [28, 28]"
    assert f.module == "Conv2d"
    f = _check(conv_wrong_channels, "shape", "shape.conv_channels", {"img": "float32[2, 28, 28, 3] cpu"})
    assert "permute(0, 3, 1, 2)" in f.next_check


def bmm_inner_size():
    scores = torch.randn(2, 3, 4)
    values = torch.randn(2, 5, 6)
    return torch.bmm(scores, values)  # BUG


def einsum_size_mismatch():
    a = torch.randn(2, 3, 4)
    b = torch.randn(2, 5, 6)
    return torch.einsum("bij,bjk->bik", a, b)  # BUG


def conv1d_on_batch_seq_features():
    conv = nn.Conv1d(16, 32, 3)
    seq = torch.randn(4, 100, 16)  # (batch, time, features): Conv1d wants (batch, channels, time)
    return conv(seq)  # BUG


def test_bmm_einsum_and_conv_size_and_channel_mismatches():
    f = _check(bmm_inner_size, "shape", "shape.bmm",
               {"scores": "float32[2, 3, 4] cpu", "values": "float32[2, 5, 6] cpu"})
    assert f.message == "batched matmul operands do not fit: expected batch2 to start with [2, 4], got [2, 5]"
    f = _check(einsum_size_mismatch, "shape", "shape.einsum_size",
               {"a": "float32[2, 3, 4] cpu", "b": "float32[2, 5, 6] cpu"})
    assert f.message.startswith("torch._VF.einsum: einsum subscript j is 5 in operand 1 but 4 earlier")
    f = _check(conv1d_on_batch_seq_features, "shape", "shape.conv_channels", {"seq": "float32[4, 100, 16] cpu"})
    assert f.message == ("Conv1d: convolution expects 16 input channels, got 100 "
                         "(input [4, 100, 16], weight [32, 16, 3])")
    assert f.next_check == ("check in_channels and the axis order: Conv1d reads (batch, channels, length) and the "
                            "input's last axis holds the expected channels, so it is (batch, length, features): "
                            "pass x.transpose(1, 2)")
    assert f.module == "Conv1d"


def reshape_wrong_numel():
    feats = torch.randn(6, 5)
    return feats.reshape(4, 8)  # BUG


def test_reshape_numel_names_the_tensor():
    f = _check(reshape_wrong_numel, "shape", "shape.view", {"feats": "float32[6, 5] cpu"})
    assert f.message == "view/reshape to [4, 8] is impossible for a tensor of 30 elements"


def rnn_batch_first_confusion():
    lstm = nn.LSTM(4, 5)  # batch_first=False
    x = torch.randn(2, 7, 4)  # (batch, seq, feature)
    state = (torch.zeros(1, 2, 5), torch.zeros(1, 2, 5))
    return lstm(x, state)  # BUG


def test_rnn_batch_first_confusion():
    f = _check(rnn_batch_first_confusion, "shape", "shape.rnn_batch_first", {"x": "float32[2, 7, 4] cpu"})
    assert f.message == ("LSTM: batch_first=False reads input [2, 7, 4] with batch size 7, "
                         "but the state was made for batch 2")
    assert f.next_check.startswith("pass batch_first=True")


# ---------------------------------------------------------------- autograd
def inplace_on_leaf():
    w = torch.zeros(3, requires_grad=True)
    w.add_(1)  # BUG


def inplace_on_view_made_under_no_grad():
    w = torch.randn(4, requires_grad=True)
    with torch.no_grad():
        head = w[:2]
    head.mul_(2)  # BUG


def test_inplace_on_a_leaf_and_on_a_view_made_under_no_grad():
    _check(inplace_on_leaf, "gradient", "gradient.leaf_inplace", {"w": "float32[3] cpu requires_grad"})
    f = _check(inplace_on_view_made_under_no_grad, "gradient", "gradient.view_no_grad",
               {"head": "float32[2] cpu requires_grad view"})
    assert f.message == ("Tensor.mul_: in-place change of head, a view created under torch.no_grad(), while grad "
                         "mode is on (head: float32[2] cpu requires_grad view)")


def backward_twice():
    w = torch.ones(2, requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    loss.backward()  # BUG


def backward_of_per_sample_loss():
    pred = torch.randn(4, requires_grad=True)
    loss = F.mse_loss(pred, torch.zeros(4), reduction="none")
    loss.backward()  # BUG


def test_backward_through_a_freed_graph_and_of_a_non_scalar():
    f = _check(backward_twice, "gradient", "gradient.backward_twice",
               {"loss": "float32[] cpu requires_grad non-leaf"})
    # the gradient seed torch passes on through *args is no operand of the user's
    assert [k for k in f.evidence if k.startswith("operand ")] == ["operand loss"]
    f = _check(backward_of_per_sample_loss, "gradient", "gradient.non_scalar",
               {"loss": "float32[4] cpu requires_grad non-leaf"})
    assert f.message == "backward() on loss of shape [4]: only a scalar has an implicit gradient"
    assert f.next_check.startswith("reduce it first (loss.mean().backward())")


def saved_output_modified_inplace():
    x = torch.ones(2, 1, requires_grad=True)
    gate = x.sigmoid()
    gate.mul_(2)
    gate.sum().backward()  # BUG


def test_version_counter_error_names_the_tensor_and_the_line_that_made_it():
    f = _check(saved_output_modified_inplace, "gradient", "gradient.inplace_saved",
               {"gate": "float32[2, 1] cpu requires_grad non-leaf",  # the tensor changed in place
                "gate.sum()": "float32[] cpu requires_grad non-leaf"})  # what backward() was called on
    line = _bug_line(saved_output_modified_inplace) - 2
    assert f.next_check.endswith(f"; it is gate (test_triage_families.py:{line} gate = x.sigmoid())")
    assert f.evidence["produced_by"] == f"; it is gate (test_triage_families.py:{line} gate = x.sigmoid())"


# ---------------------------------------------------------------- optimizer
class MisspelledInit(nn.Module):
    def __int__(self):  # the typo: never runs
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


class LayersInAList(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(4, 4), nn.Linear(4, 2)]


def optimizer_of_misspelled_init():
    model = MisspelledInit()
    return torch.optim.Adam(model.parameters(), lr=1e-3)  # BUG


def optimizer_of_plain_list():
    net = LayersInAList()
    return torch.optim.SGD(net.parameters(), lr=0.1)  # BUG


def optimizer_of_consumed_generator():
    model = nn.Linear(2, 2)
    params = model.parameters()
    torch.optim.SGD(params, lr=0.1)
    return torch.optim.SGD(params, lr=0.1)  # BUG


def test_empty_parameter_list_is_explained_by_the_models_structure():
    f = _check(optimizer_of_misspelled_init, "gradient", "gradient.optimizer_empty")
    assert f.message == ("optimizer got no parameters: model (MisspelledInit) has no registered parameters: "
                         "MisspelledInit defines __int__() instead of __init__(), so its layers were never built "
                         "(nn.Module's own __init__ ran)")
    assert f.evidence["function"] == "torch.optim.Adam"
    f = _check(optimizer_of_plain_list, "gradient", "gradient.optimizer_empty")
    assert "its layers sit in a plain list `layers`" in f.message
    f = _check(optimizer_of_consumed_generator, "gradient", "gradient.optimizer_empty")
    assert "generator that was already consumed" in f.message


# ---------------------------------------------------------------- DDP
class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.aux = nn.Linear(4, 2)

    def forward(self, x, use_aux=False):
        h = self.body(x)
        if use_aux:
            return self.aux(h)
        return h


def ddp_step_that_skips_aux(model):
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()  # BUG


def test_ddp_unused_parameters_named_with_the_branch_that_skipped_them():
    import torch.distributed as dist

    # one process, an in-memory store: no network, no port, bounded
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = nn.parallel.DistributedDataParallel(TwoHeads())
        f = _triage(lambda: ddp_step_that_skips_aux(model))
    finally:
        dist.destroy_process_group()
    assert (f.category, f.code, f.line) == (Category.GRADIENT, "gradient.ddp_unused_parameters",
                                           _bug_line(ddp_step_that_skips_aux))
    assert f.message == "DDP: parameters aux.weight, aux.bias got no gradient in the previous step"
    branch_line = _bug_line(ddp_step_that_skips_aux) - 7
    assert f.cause.endswith(f"they are used only under a branch of forward (test_triage_families.py:{branch_line} "
                            "if use_aux:) that the step skipped")
    assert f.evidence["branch_line"] == f"{HERE}:{branch_line}"


# ---------------------------------------------------------------- everyday errors (the issue's probe)
def _emb():
    emb = nn.Embedding(10, 4)
    ids = torch.tensor([[1, 12]])
    return emb(ids)  # BUG


def _target():
    logits = torch.randn(2, 3)
    target = torch.tensor([0, 3])
    return F.cross_entropy(logits, target)  # BUG


def _cat():
    a = torch.randn(2, 3)
    b = torch.randn(2, 3, 1)
    return torch.cat([a, b])  # BUG


def _expand():
    bias = torch.randn(3, 2)
    return bias.expand(4, 3)  # BUG


EVERYDAY = [
    (_emb, "data", "data.embedding_index", "Embedding: token id 12 is out of range for an embedding of 10 rows"),
    (_target, "data", "data.target_range", "loss: target class 3 does not exist for 3 output classes (valid 0..2)"),
    (_cat, "shape", "shape.rank_mismatch",
     "torch.cat: tensors with 2 and 3 dimensions cannot be joined (a: float32[2, 3] cpu, b: float32[2, 3, 1] cpu)"),
    (_expand, "shape", "shape.expand", "Tensor.expand: expand to [4, 3]: a tensor of [3, 2] has size 2 at dim 1, "
                                       "which can only expand if it is 1 (bias: float32[3, 2] cpu)"),
]


@pytest.mark.parametrize("fn, category, code, message", EVERYDAY, ids=[c[2] for c in EVERYDAY])
def test_everyday_errors(fn, category, code, message):
    f = _check(fn, category, code)
    assert f.message == message


def test_every_error_listed_in_the_issue_gets_a_specific_code():
    cases = [rnn_hidden_state_without_device, numpy_of_meta_tensor, mean_of_integer_counts,
             optimizer_of_misspelled_init, inplace_on_view_made_under_no_grad, squeeze_then_softmax, dot_of_matrices,
             _emb, _target, _cat, _expand, conv_on_unbatched_2d, backward_of_per_sample_loss, integer_requires_grad,
             asarray_of_grad_tensor, half_times_float, bmm_of_2d, einsum_missing_batch, reshape_wrong_numel,
             rnn_batch_first_confusion, inplace_on_leaf, backward_twice, saved_output_modified_inplace,
             gather_with_float_index, cross_entropy_float_target, float64_numpy_input, std_of_integer_labels,
             transpose_out_of_range, pin_memory_of_device_tensor, outer_of_matrix, conv_wrong_channels,
             asarray_of_meta_tensor, ger_of_matrix, class_counts_with_labels_on_another_device,
             numpy_of_grad_tensor, softmax_of_integer_scores, squeeze_inline_then_sum]
    codes = {fn.__name__: _triage(fn).code for fn in cases}
    assert [n for n, c in codes.items() if c.startswith("other.")] == []


# ---------------------------------------------------------------- vocabulary and the unknown
def layer_norm_wrong_width():
    norm = nn.LayerNorm(8)
    h = torch.randn(2, 6)
    return norm(h)  # BUG


def test_an_unlisted_shape_error_is_read_by_its_vocabulary_and_names_the_operands():
    f = _check(layer_norm_wrong_width, "shape", "shape.size", {"h": "float32[2, 6] cpu"})
    assert f.message == ("torch.layer_norm: tensor sizes do not fit (h: float32[2, 6] cpu, "
                         "weight: float32[8] cpu requires_grad, bias: float32[8] cpu requires_grad)")
    assert f.module == "LayerNorm" and f.evidence["vocabulary"] == "shape"


def bce_out_of_range():
    probs = torch.tensor([1.5, 0.2])
    return F.binary_cross_entropy(probs, torch.ones(2))  # BUG


def test_an_unknown_torch_error_stays_other_but_names_function_operands_and_line():
    f = _check(bce_out_of_range, "other", "other.exception", {"probs": "float32[2] cpu"})
    assert f.message == "RuntimeError: all elements of input should be between 0 and 1"
    assert f.cause.startswith("not recognized: torchtriage does not know this error, so it names no category")
    assert "probs: float32[2] cpu" in f.cause and f.evidence["function"] == "torch._C._nn.binary_cross_entropy"


def bce_module_out_of_range():
    criterion = nn.BCELoss()
    probs = torch.tensor([1.5, 0.2])
    return criterion(probs, torch.ones(2))  # BUG


def test_an_unknown_error_in_a_module_names_the_module():
    f = _check(bce_module_out_of_range, "other", "other.exception", {"probs": "float32[2] cpu"})
    assert f.module == "BCELoss"
    assert f.cause == ("not recognized: torchtriage does not know this error, so it names no category; it surfaced "
                       "in BCELoss (torch._C._nn.binary_cross_entropy) at your line (probs: float32[2] cpu, "
                       "target: float32[2] cpu)")


def test_a_users_own_raise_is_never_read_by_vocabulary():
    def check(x):
        if x.dim() != 3:
            raise ValueError("expected a 3-D tensor with a batch dimension")  # BUG

    f = _triage(lambda: check(torch.zeros(2)))
    assert (f.category, f.code) == (Category.OTHER, "other.exception")


def test_zh_messages_for_a_family():
    from torchtriage import _catalogue

    old = _catalogue.get_language()
    _catalogue.set_language("zh")
    try:
        f = _triage(dot_of_matrices)
    finally:
        _catalogue.set_language(old)
    assert f.message == ("torch.dot: dot 只接受一维向量，实际为 2-D and 2-D 张量 "
                         "(q: float32[2, 4] cpu, k: float32[2, 4] cpu)")


@pytest.mark.parametrize("text, code, message", [
    # CUDA-only texts, as PyTorch prints them (no GPU here)
    ("CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported",
     "device.cuda_error", "CUDA reported an error: device-side assert triggered"),
    ("Input and hidden tensors are not at the same device, found input tensor at cuda:0 and hidden tensor at cpu",
     "device.rnn_hidden", "the RNN's input is on cuda:0 but its initial state hx is on cpu"),
    ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.",
     "device.numpy", "tensor is on cuda:0: NumPy can only read CPU memory"),
    ("can't convert mps:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.",
     "device.numpy", "tensor is on mps:0: NumPy can only read CPU memory"),
    ("cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned",
     "device.pin_memory", "pin_memory() on a torch.cuda.FloatTensor tensor: only dense CPU tensors can be pinned"),
    ("Expected object of device type cuda but got device type cpu for argument #1 'self' in call to _th_addmm",
     "device.placement", "tensors are on different devices"),
    ("Expected tensor for argument #1 'input' to have the same device as tensor for argument #2 'weight'; "
     "but device 0 does not equal -1 (while checking arguments for cudnn_convolution)",
     "device.placement", "tensors are on different devices"),
])
def test_accelerator_only_texts(text, code, message):
    # built, not raised here: a `raise` in the user's own frame is the user's error, never read by vocabulary
    f = torchtriage.triage_exception(RuntimeError(text)).primary
    assert (f.category, f.code, f.message, f.line) == (Category.DEVICE, code, message, None)


def test_cuda_half_float_matmul_text():
    f = torchtriage.triage_exception(RuntimeError(
        "expected mat1 and mat2 to have the same dtype, but got: float != c10::Half")).primary
    assert (f.code, f.message) == ("dtype.half_input", "half-precision and float32 operands meet (Float and Half)")


# ---------------------------------------------------------------- errors no family was written for
UNLISTED = [
    # (call, category, code): real torch errors read by their words and operands only
    (lambda x2, x1: F.pad(x1, (1, 1, 1, 1)), "shape", "shape.size"),
    (lambda x2, x1: F.interpolate(x2, scale_factor=2, mode="bilinear"), "shape", "shape.rank"),
    (lambda x2, x1: torch.cdist(x2, x2.t()), "shape", "shape.size"),
    (lambda x2, x1: torch.mm(x1, x2), "shape", "shape.rank"),
    (lambda x2, x1: x2.view(-1, -1), "shape", "shape.rank"),
    (lambda x2, x1: nn.Conv2d(3, 4, 5)(x2.expand(1, 3, 2, 3)), "shape", "shape.size"),
    (lambda x2, x1: torch.where(torch.tensor([1, 0, 1]), x1, x1), "dtype", "dtype.mismatch"),
    (lambda x2, x1: x2.masked_fill(torch.tensor([1, 0, 1]), 0.0), "dtype", "dtype.mismatch"),
    (lambda x2, x1: F.one_hot(x1), "dtype", "dtype.mismatch"),
    (lambda x2, x1: torch.optim.SGD([x1.requires_grad_()], lr=-1), "gradient", "gradient.optimizer"),
    (lambda x2, x1: torch.optim.Adam([x1.requires_grad_()], betas=(1.5, 0.9)), "gradient", "gradient.optimizer"),
]


@pytest.mark.parametrize("call, category, code", UNLISTED, ids=[f"{c[2]}-{i}" for i, c in enumerate(UNLISTED)])
def test_errors_without_a_family_are_read_by_vocabulary(call, category, code):
    x2, x1 = torch.randn(2, 3), torch.randn(3)
    f = _triage(lambda: call(x2, x1))
    assert (f.category.value, f.code) == (category, code), f.message
    assert f.evidence["vocabulary"] and f.evidence.get("function")


def test_every_family_and_vocabulary_code_has_messages_in_both_languages():
    from torchtriage._catalogue import catalogue, fields_of
    from torchtriage._triage._families import FAMILIES
    from torchtriage._triage._vocab import SIGNALS

    tables = catalogue()
    codes = {r.code for r in FAMILIES} | {s.code for s in SIGNALS} | {
        "shape.dim_range_squeeze", "shape.rnn_batch_first", "dtype.integer_reduction", "data.index_range"}
    for code in codes:
        for suffix in ("", ".cause", ".next"):
            key = f"triage.{code}{suffix}"
            assert key in tables["en"] and key in tables["zh"], key
            assert fields_of(tables["en"][key]) == fields_of(tables["zh"][key]), key


class Seq2Label(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h0 = (torch.zeros(1, x.size(0), 8), torch.zeros(1, x.size(0), 8))  # no device=
        out, _ = self.rnn(x, h0)  # BUG
        return self.head(out[:, -1])


def test_in_a_session_the_module_is_named_by_its_path_with_the_step():
    with torch.device("meta"):
        model = Seq2Label()
    x = torch.randn(2, 5, 4, device="meta")
    with pytest.raises(RuntimeError, match="Input and hidden tensors are not at the same device"):
        with torchtriage.watch(model, checks=["triage"], on_anomaly="record", report=False) as s:
            model(x)
    (f,) = s.report.findings
    assert (f.category, f.code, f.module, f.step, f.line) == (
        Category.DEVICE, "device.rnn_hidden", "rnn", 0, _bug_line(Seq2Label.forward))
    assert f.message == "rnn: the RNN's input is on meta but its initial state h0[0] is on cpu"
    assert str(f.evidence["operand h0[0]"]) == "float32[1, 2, 8] cpu"


def make_gate(x):
    return x.sigmoid()  # MADE


def saved_output_modified_under_anomaly_mode():
    x = torch.ones(2, 1, requires_grad=True)
    with torch.autograd.detect_anomaly():
        gate = make_gate(x)
        gate.mul_(2)
        gate.sum().backward()  # BUG


def test_under_anomaly_detection_the_line_that_produced_the_tensor_is_exact():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anomaly mode warns about its cost and prints the forward trace
        f = _check(saved_output_modified_under_anomaly_mode, "gradient", "gradient.inplace_saved")
    lines, start = inspect.getsourcelines(make_gate)
    made = start + next(i for i, line in enumerate(lines) if "# MADE" in line)
    assert f.evidence["produced_by"] == f"; it is gate (test_triage_families.py:{made} return x.sigmoid()  # MADE)"


class IterableNoInit(nn.Module):
    def __iter__(self):  # not a typo of __init__
        return iter(())


def optimizer_of_module_without_init():
    net = IterableNoInit()
    return torch.optim.SGD(net.parameters(), lr=0.1)  # BUG


def optimizer_of_empty_list():
    params = []
    return torch.optim.SGD(params, lr=0.1)  # BUG


def test_empty_optimizer_without_a_typo_or_from_an_empty_list():
    f = _check(optimizer_of_module_without_init, "gradient", "gradient.optimizer_empty")
    assert f.message == ("optimizer got no parameters: net (IterableNoInit) has no registered parameters: "
                         "IterableNoInit defines no __init__, so no layer was ever assigned")
    f = _check(optimizer_of_empty_list, "gradient", "gradient.optimizer_empty")
    assert f.message == "optimizer got no parameters: params (list) is empty: the iterable of parameters held nothing"


@pytest.mark.parametrize("text, operands, code", [
    # the same words, read alone and then with the failing call's tensors
    ("size mismatch between input and target", (), "shape.size"),
    ("size mismatch between input and target", (("pred", "cpu", torch.float32), ("target", "meta", torch.float32)),
     "device.placement"),  # tensors on two devices: the mismatch is where they live
    ("expected a tensor with matching dtype and layout", (), "layout.sparse"),
    ("expected a tensor with matching dtype and layout",
     (("pred", "cpu", torch.float32), ("labels", "cpu", torch.int64)), "dtype.mismatch"),  # an integer beside a float
])
def test_the_operands_weigh_with_the_words(text, operands, code):
    from torchtriage._triage._operands import Operand
    from torchtriage._triage._vocab import read

    ops = [Operand.of(name, torch.zeros(2, device=device, dtype=dtype)) for name, device, dtype in operands]
    assert read(text, ops).code == code
