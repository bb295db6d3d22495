"""The rows a loss supervises are nodes of the step's graph (`data.target_misaligned`, variant
`graph_rows`, `_silent/_graphrows.py`): a growing graph fed one snapshot per step whose loss
mask is computed for the next snapshot."""

from __future__ import annotations

import torch
import torch.nn as nn

import torchtriage
from _lines import line_in

N, PER = 60, 6  # nodes, nodes arriving per time step


class MeanConv(nn.Module):
    """One round of mean aggregation over an edge list, then a linear readout per node."""

    def __init__(self) -> None:
        super().__init__()
        self.self_lin = nn.Linear(4, 16)
        self.nbr_lin = nn.Linear(4, 16)
        self.out = nn.Linear(16, 2)

    def forward(self, x, edge_index):
        src, dst = edge_index
        agg = torch.zeros_like(x).index_add_(0, dst, x[src])
        deg = torch.bincount(dst, minlength=x.shape[0]).clamp_min(1).unsqueeze(1)
        return self.out(torch.relu(self.self_lin(x) + self.nbr_lin(agg / deg)))


def _snapshots():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 4, generator=g)
    y = x[:, :2] * 0.5 + 0.1 * torch.randn(N, 2, generator=g)
    arrival = torch.arange(N) // PER
    out = []
    for t in range(N // PER):
        alive = (arrival <= t).nonzero().flatten()
        pairs = [(int(i), int(i) - k) for i in alive if i > 0 for k in (1, 2) if int(i) - k >= 0]
        e = torch.tensor(pairs).T
        out.append((t, torch.cat([e, e.flip(0)], dim=1)))
    return x, y, arrival, out


def _train(ahead: int):
    x, y, arrival, snaps = _snapshots()
    model = MeanConv()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _epoch in range(2):
            for t, edge_index in snaps:
                pred = model(x, edge_index)
                mask = arrival <= t + ahead
                loss = nn.functional.mse_loss(pred[mask], y[mask])  # LOSS
                opt.zero_grad()
                loss.backward()
                opt.step()
    return s.report


def _rows(report):
    return [f for f in report.findings if f.code == "data.target_misaligned"]


def test_a_loss_mask_of_the_next_snapshot_supervises_rows_not_in_the_graph():
    [f] = _rows(_train(1))
    at = line_in(__file__, "  # LOSS", ending=True)
    assert (f.severity.value, f.category.value, f.line) == ("warning", "data", at)
    ev = f.evidence
    assert ev["steps_compared"] == 2 and ev["outside_rows_in_the_next_graph"] == ["6/6", "6/6"]
    assert (ev["rows_outside_the_graph"], ev["rows_selected"]) == (12, 30)
    assert f.message.startswith("in 2 steps the loss supervised 12 of its 30 rows outside the graph")
    assert "t + 1" in f.cause and "birth_time <= t" in f.next_check


def test_a_mask_of_the_same_snapshot_is_quiet():
    assert not _rows(_train(0))


def test_isolated_training_nodes_of_a_static_graph_are_quiet():
    """A citation-style graph: some training nodes have no edge at all, every step."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 4, generator=g)
    y = torch.randn(40, 2, generator=g)
    src = torch.arange(0, 30)
    edge_index = torch.stack([torch.cat([src, (src + 1) % 30]), torch.cat([(src + 1) % 30, src])])
    train_mask = torch.zeros(40, dtype=torch.bool)
    train_mask[::2] = True  # nodes 30..39 are isolated, half of them trained on
    model = MeanConv()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(8):
            out = model(x, edge_index)
            loss = nn.functional.mse_loss(out[train_mask], y[train_mask])
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not _rows(s.report)
