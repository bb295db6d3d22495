"""Session 10: normalization scales left in the decayed group by a no-decay split that exempts
1-D tensors (`_dynamics/_normdecay.py`, `dynamics.norm_weights_decayed`). The bug is the
DeepSpeed-Chat / BERT recipe's name list (`["bias", "LayerNorm.weight"]`) on a model whose norms
are named otherwise; the look-alikes stay quiet: the list that matches, a split by rank
(nanoGPT), one group, no decay at all. Adam's coupled L2 decay is reported as an info."""

from __future__ import annotations

import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()
CODE = "dynamics.norm_weights_decayed"


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


class Block(nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.fc2(F.gelu(self.fc1(self.self_attn_layer_norm(x))))
        return self.final_layer_norm(x)


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), Block(), Block(), nn.Linear(32, 1))


def grouped(m: nn.Module, weight_decay: float, no_decay_name_list: list[str]) -> list[dict]:
    return [
        {"params": [p for n, p in m.named_parameters() if not any(nd in n for nd in no_decay_name_list)],
         "weight_decay": weight_decay},
        {"params": [p for n, p in m.named_parameters() if any(nd in n for nd in no_decay_name_list)],
         "weight_decay": 0.0},
    ]


def train(m: nn.Module, make_opt, steps: int = 60) -> torchtriage.Report:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(16, 1, generator=g)
    with torchtriage.watch(m, on_anomaly="record", report=False, discover=True) as s:
        opt = make_opt()
        for _ in range(steps):
            x = torch.randn(32, 16, generator=g)
            loss = F.mse_loss(m(x), x @ w)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


def norm_decay(report: torchtriage.Report) -> list[tuple[str, str]]:
    return [(f.code, f.message) for f in report.findings if f.code == CODE]


def test_bert_no_decay_names_on_a_model_whose_norms_are_named_layer_norm():
    m = model()

    def make():
        groups = grouped(m, 0.1, ["bias", "LayerNorm.weight"])
        return torch.optim.AdamW(groups, lr=3e-3)  # <- adamw

    [f] = train(m, make).filter(code=CODE)
    assert f.severity is Severity.WARNING and f.line == line("adamw")
    ev = f.evidence
    assert ev["decayed_norm_scale_count"] == 4 and ev["undecayed_1d_tensors"] == 10
    assert ev["decayed_norm_scales"] == ["1.self_attn_layer_norm.weight", "1.final_layer_norm.weight",
                                         "2.self_attn_layer_norm.weight", "2.final_layer_norm.weight"]
    assert ev["sum_lr_times_weight_decay"] == "0.018" and ev["optimizer_steps"] == 60
    assert f.message.startswith(
        "weight decay 0.1 lands on 4 normalization scales (1.self_attn_layer_norm.weight, "
        "1.final_layer_norm.weight, 2.self_attn_layer_norm.weight) while the weight_decay=0 group holds 10 other "
        "1-D tensors (0.bias, 1.self_attn_layer_norm.bias): the no-decay split misses the norm weights; the decay "
        "pulled them by 1.80% over the run (")
    assert "harm" in ev and float(ev["mean_decay_pull"]) >= 0.1 * float(ev["mean_change_of_scales"])


def test_coupled_l2_decay_through_adam_is_an_info():
    m = model()
    [f] = train(m, lambda: torch.optim.Adam(grouped(m, 0.1, ["bias", "LayerNorm.weight"]), lr=3e-3)).filter(code=CODE)
    assert f.severity is Severity.INFO and f.evidence["coupled_decay"] is True and "harm" not in f.evidence


def test_a_no_decay_list_that_matches_the_norms_is_quiet():
    m = model()
    names = ["bias", "layer_norm.weight", "layernorm.weight", "norm.weight", "ln_f.weight"]
    assert norm_decay(train(m, lambda: torch.optim.AdamW(grouped(m, 0.1, names), lr=3e-3))) == []


def test_a_split_by_rank_is_quiet():
    m = model()

    def make():
        decay = [p for p in m.parameters() if p.dim() >= 2]
        no_decay = [p for p in m.parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                  {"params": no_decay, "weight_decay": 0.0}], lr=3e-3)

    assert norm_decay(train(m, make)) == []


def test_one_group_decaying_everything_is_quiet():
    # no split: the program states no intent to exempt anything
    m = model()
    assert norm_decay(train(m, lambda: torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.1))) == []


def test_groups_split_for_the_lr_only_are_quiet():
    m = model()

    def make():
        head = list(m[3].parameters())
        rest = [p for p in m.parameters() if all(p is not q for q in head)]
        return torch.optim.AdamW([{"params": rest}, {"params": head, "lr": 1e-2}], lr=3e-3, weight_decay=0.1)

    assert norm_decay(train(m, make)) == []


class LayerNormalization(nn.Module):
    """A norm module of the user's own, named as Fast-LLM names it (not `*Norm`)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias)


def test_a_norm_module_named_normalization_is_a_norm():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), LayerNormalization(32), nn.Linear(32, 1))

    def make():
        free = [m[0].bias, m[2].bias]
        groups = [{"params": [p for p in m.parameters() if all(p is not q for q in free)], "weight_decay": 0.1},
                  {"params": free, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=3e-3)  # <- fastllm groups

    [f] = train(m, make).filter(code=CODE)
    assert f.line == line("fastllm groups") and f.parameter == "1.weight"
