"""Fixed reports for the renderers' golden tests: every value is literal, so the rendered
text, JSON and HTML only change when a renderer does."""

from __future__ import annotations

from torchtriage import Finding, Report

_LINEAR_OUT = {"shape": [8, 16], "dtype": "torch.float32", "device": "cpu", "contiguous": True, "numel": 128,
               "nan": 0, "posinf": 3, "neginf": 0, "min": -2.5, "max": 87.25, "requires_grad": True,
               "stride": [16, 1]}
_EXP_IN = {"shape": [8, 16], "dtype": "torch.float32", "device": "cpu", "contiguous": False, "numel": 128,
           "nan": 0, "posinf": 0, "neginf": 0, "min": -1.0, "max": 91.5, "requires_grad": True,
           "stride": [1, 8]}

NAN_MODEL = {
    "": "TinyNet",
    "embed": "Linear",
    "blocks": "ModuleList",
    "blocks.0": "Block",
    "blocks.0.fc": "Linear",
    "blocks.0.act": "Exp",
    "blocks.1": "Block",
    "blocks.1.fc": "Linear",
    "blocks.1.act": "GELU",
    "head": "Linear",
}


def empty_report() -> Report:
    return Report((), meta={"steps": 5, "torch": "2.13.0", "script": "train.py"})


def nan_report() -> Report:
    """A forward NaN born in blocks.0.act (exp overflow), propagated by blocks.1 and head;
    with a loss and a grad-norm series and the model's layout."""
    producer = Finding(
        category="numerical", code="numerical.forward_producer", severity="error", stage="forward", step=6,
        module="blocks.0.act", op="aten.exp.default", file="/home/user/project/train.py", line=42,
        message="blocks.0.act (Exp) produced +Inf from finite inputs at step 6",
        cause="exp overflows float32 above 88.72; the input reached 91.5",
        next_check="Subtract the row max before exp, or use torch.logsumexp / softmax.",
        evidence={"input": _EXP_IN, "output": _LINEAR_OUT, "source_line": "h = torch.exp(self.fc(x)) <b>",
                  "propagated_by": ["blocks.1", "blocks.1.fc", "head"], "threshold": 88.72},
        order=3)
    grad = Finding(
        category="gradient", code="gradient.exploding", severity="warning", stage="backward", step=5,
        module="embed", parameter="embed.weight", message="gradient norm of embed.weight grew 1e4x in 3 steps",
        cause="learning rate too high for this scale", next_check="Lower the learning rate or clip gradients.",
        evidence={"grad_norm": 1234.5, "ratio": 10000.0}, order=2)
    info = Finding(
        category="silent", code="silent.frozen_params", severity="info", stage="optimizer", step=0,
        module="embed", message="3 parameters are frozen (requires_grad=False) and not in the optimizer",
        cause="intentional freezing", evidence={"parameters": ["embed.bias"]}, order=1, count=4)
    loss = [2.31, 2.02, 1.71, 1.55, 1.42, 1.38, float("nan"), None, float("nan")]
    grad_norm = [0.5, 0.9, 3.1, 40.0, 800.0, 1234.5, float("inf"), None, None]
    return Report((producer, grad, info),
                  meta={"steps": 9, "torch": "2.13.0", "script": "train.py", "argv": ["train.py", "--lr", "10"],
                        "exit_code": 0, "models": {"model": NAN_MODEL}},
                  series={"loss": loss, "grad_norm": grad_norm})


def mixed_report() -> Report:
    """Several categories, no series, no models, a root-module finding and HTML-special text."""
    shape = Finding(
        category="shape", code="shape.matmul", severity="error", stage="forward", step=0, module="",
        op="aten.mm.default", file="/home/user/project/model.py", line=7,
        message="mat1 and mat2 shapes cannot be multiplied (8x3 and 4x2) in <root>",
        cause="Linear(in_features=4) got 3 features & more", next_check="Check the input's last dimension.",
        evidence={"mat1": [8, 3], "mat2": [4, 2], "source_line": "return self.fc(x)"}, order=1)
    dtype = Finding(category="dtype", code="dtype.target", severity="error", stage="loss", step=0,
                    message="cross_entropy target is float32; expected int64 class indices",
                    evidence={"target_dtype": "torch.float32"}, order=2)
    hint = Finding(category="other", code="other.hint", severity="info",
                   message="DataLoader uses num_workers=0", next_check="Try num_workers=2.", order=3)
    return Report((dtype, shape, hint), meta={"steps": 1, "torch": "2.13.0", "exit_code": 1})


REPORTS = {"empty": empty_report, "nan": nan_report, "mixed": mixed_report}
