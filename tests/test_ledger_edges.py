"""Graph links split apart from their reverse edges (`data.split_overlap`, key `edge_reverse`,
`_ledger/_edges.py`): an undirected graph stored as two directed edges per link, split by directed
edge id, evaluates links whose reverse is trained on. Splits by link, directed graphs and a train
AUC over the training edges stay quiet."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=None, source=textwrap.dedent(source))[0]


_line = line_in


def _reverse(report):
    return [f for f in report.findings
            if f.code == "data.split_overlap" and f.evidence.get("matched") == "reverse edges"]


def _alarms(report):
    return [(f.code, f.severity.value, f.message) for f in report.findings if f.severity.value in ("warning", "error")]


EDGE_INDEX = """
import torch, torch.nn as nn, torch.nn.functional as F

torch.manual_seed(0)
n, links = 300, 600
a, b = torch.randint(0, n, (2, links))
keep = a != b
a, b = a[keep], b[keep]
%s
x = torch.randn(n, 16)

class LinkGCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(16, 32), nn.Linear(32, 32)
    def forward(self, x, edge_index, pairs):
        src, dst = edge_index
        agg = torch.zeros(x.shape[0], x.shape[1]).index_add(0, dst, x[src])
        h = self.lin2(F.relu(self.lin1(x + agg)))
        return (h[pairs[0]] * h[pairs[1]]).sum(-1)

model = LinkGCN()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(30):
    neg = torch.randint(0, n, (2, train_edges.shape[1]))
    pos_out = model(x, train_edges, train_edges)
    neg_out = model(x, train_edges, neg)
    loss = F.binary_cross_entropy_with_logits(torch.cat([pos_out, neg_out]),
                                              torch.cat([torch.ones_like(pos_out), torch.zeros_like(neg_out)]))
    opt.zero_grad(); loss.backward(); opt.step()
with torch.no_grad():
    model.eval()
    test_scores = model(x, train_edges, test_edges)  # HERE
    print(test_scores.sigmoid().mean().item())
"""

SPLIT_DIRECTED_IDS = """
edge_index = torch.cat([torch.stack([a, b]), torch.stack([b, a])], 1)   # undirected: both ways
perm = torch.randperm(edge_index.shape[1])
test_edges, train_edges = edge_index[:, perm[:100]], edge_index[:, perm[100:]]
"""

SPLIT_LINKS = """
perm = torch.randperm(a.shape[0])
ta, tb, ra, rb = a[perm[:50]], b[perm[:50]], a[perm[50:]], b[perm[50:]]
test_edges = torch.cat([torch.stack([ta, tb]), torch.stack([tb, ta])], 1)
train_edges = torch.cat([torch.stack([ra, rb]), torch.stack([rb, ra])], 1)
"""

DIRECTED = """
edge_index = torch.stack([a, b])   # a directed graph: each edge once
perm = torch.randperm(edge_index.shape[1])
test_edges, train_edges = edge_index[:, perm[:100]], edge_index[:, perm[100:]]
"""


def test_edge_index_split_by_directed_edge_id(tmp_path):
    src = EDGE_INDEX % SPLIT_DIRECTED_IDS
    [f] = _reverse(_run(tmp_path, src))
    assert (f.severity.value, f.line) == ("warning", _line(src))
    ev = f.evidence
    assert ev["evaluated_edges"] == 100 and ev["count"] >= 60
    assert "reverse" in f.message and "both directions" in f.message


def test_edge_index_split_by_link_is_quiet(tmp_path):
    report = _run(tmp_path, EDGE_INDEX % SPLIT_LINKS)
    assert _reverse(report) == [] and _alarms(report) == []


def test_directed_graph_split_by_edge_is_quiet(tmp_path):
    report = _run(tmp_path, EDGE_INDEX % DIRECTED)
    assert _reverse(report) == [] and _alarms(report) == []


GRAPH_OBJECT = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F

class Graph:
    def __init__(self, src, dst, num_nodes):
        self.src, self.dst, self.n = torch.as_tensor(src), torch.as_tensor(dst), num_nodes
    def edges(self):
        return self.src, self.dst
    def num_nodes(self):
        return self.n

class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(200, 16)
    def forward(self, g):
        src, dst = g.edges()
        h = self.emb.weight
        return h + torch.zeros_like(h).index_add(0, dst, h[src]) / 4

class Scorer(nn.Module):
    def forward(self, g, h):
        src, dst = g.edges()
        return (h[src] * h[dst]).sum(1)

class Trainer:
    def __init__(self, g, train_pos, test_pos, test_neg):
        self.g, self.train_pos, self.test_pos, self.test_neg = g, train_pos, test_pos, test_neg
        self.enc, self.score = Encoder(), Scorer()
        self.opt = torch.optim.Adam(self.enc.parameters(), lr=0.05)

    def fit(self, epochs):
        for _ in range(epochs):
            h = self.enc(self.g)
            pos = self.score(self.train_pos, h)
            neg_g = Graph(torch.randint(0, 200, (pos.shape[0],)), torch.randint(0, 200, (pos.shape[0],)), 200)
            neg = self.score(neg_g, h)
            loss = F.softplus(-pos).mean() + F.softplus(neg).mean()
            self.opt.zero_grad(); loss.backward(); self.opt.step()

    @torch.no_grad()
    def test(self):
        h = self.enc(self.g)
        pos = self.score(self.test_pos, h)  # HERE
        neg = self.score(self.test_neg, h)
        return (pos[:, None] > neg[None, :]).float().mean().item()

rng = np.random.RandomState(0)
pairs = {tuple(sorted(p)) for p in rng.randint(0, 200, (500, 2)) if p[0] != p[1]}
pairs = np.array(sorted(pairs))
src = np.concatenate([pairs[:, 0], pairs[:, 1]])
dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
%s
full = Graph(src[train], dst[train], 200)
t = Trainer(full, full, Graph(src[test], dst[test], 200), Graph(rng.randint(0, 200, 60), rng.randint(0, 200, 60), 200))
t.fit(40)
print(t.test())
"""


def test_graph_object_split_by_directed_edge_id(tmp_path):
    src = GRAPH_OBJECT % "perm = rng.permutation(len(src)); test, train = perm[:60], perm[60:]"
    [f] = _reverse(_run(tmp_path, src))
    assert (f.severity.value, f.line) == ("warning", _line(src))
    assert f.evidence["evaluated_edges"] == 60 and f.evidence["count"] >= 40


def test_graph_object_split_by_link_is_quiet(tmp_path):
    split = ("m = len(src) // 2; links = rng.permutation(m); "
             "test = np.concatenate([links[:30], links[:30] + m]); "
             "train = np.concatenate([links[30:], links[30:] + m])")
    report = _run(tmp_path, GRAPH_OBJECT % split)
    assert _reverse(report) == [] and _alarms(report) == []


DATA_OBJECT_TRAIN_AUC = """
import torch, torch.nn as nn, torch.nn.functional as F

class Data:
    def __init__(self, x, edge_index):
        self.x, self.edge_index = x, edge_index

def train_and_report(data, model, opt, steps, holdout):
    for _ in range(steps):
        z = model(data)
        src, dst = data.edge_index
        loss = F.softplus(-(z[src] * z[dst]).sum(1)).mean() + F.softplus((z[src] * z[dst.roll(7)]).sum(1)).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        model.eval()
        train_view = Data(data.x, data.edge_index)
        z = model(train_view)           # the training graph measured on purpose
        held = model(holdout)           # a held-out graph of its own nodes
    return z, held

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
    def forward(self, data):
        src, dst = data.edge_index
        return self.lin(data.x + torch.zeros_like(data.x).index_add(0, dst, data.x[src]))

torch.manual_seed(0)
a, b = torch.randint(0, 100, (2, 300))
ei = torch.cat([torch.stack([a, b]), torch.stack([b, a])], 1)
c, d = torch.randint(100, 150, (2, 80))
held = Data(torch.randn(150, 8), torch.cat([torch.stack([c, d]), torch.stack([d, c])], 1))
net = Net()
train_and_report(Data(torch.randn(150, 8), ei), net, torch.optim.SGD(net.parameters(), lr=0.01), 20, held)
"""


def test_training_graph_measured_and_a_held_out_graph_are_quiet(tmp_path):
    report = _run(tmp_path, DATA_OBJECT_TRAIN_AUC)
    assert _reverse(report) == [] and _alarms(report) == []


TWO_SEQUENCES = """
import torch, torch.nn as nn, torch.nn.functional as F

torch.manual_seed(0)
lm = nn.Sequential(nn.Embedding(40, 8), nn.Linear(8, 40))
opt = torch.optim.SGD(lm.parameters(), lr=0.1)
data = torch.randint(1, 40, (64, 24))
data[:, 16:] = 0                      # padded documents
for step in range(30):
    ids = data[torch.randint(0, 48, (2,))]   # a batch of two sequences: shape (2, 24)
    loss = F.cross_entropy(lm(ids).reshape(-1, 40), ids.roll(-1, 1).reshape(-1))
    opt.zero_grad(); loss.backward(); opt.step()
with torch.no_grad():
    for i in range(48, 64, 2):
        lm(data[i:i + 2])
"""


def test_batches_of_two_token_sequences_are_no_edges(tmp_path):
    report = _run(tmp_path, TWO_SEQUENCES)
    assert _reverse(report) == []
