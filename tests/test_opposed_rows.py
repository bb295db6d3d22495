"""Session 14 (leak): the same input trained toward opposite targets in one step
(`_silent/_opposed.py`, `data.opposite_targets`). Each bug is a script written as users write
it, run under a discovering session, with its exact finding (line, counts); each look-alike is
quiet."""

from __future__ import annotations

import textwrap

import torch

from _lines import line_in
from test_ledger import alarms, run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=None, source=textwrap.dedent(source))


def _line(source: str, tag: str = "# HERE") -> int:
    return line_in(source, tag, ending=True)


def _opposed(report):
    return [f for f in report.findings if f.code == "data.opposite_targets"]


def _same_label_rows(n: int, classes: int, d: int) -> int:
    """How many of the programs' negatives keep their own label (their data, drawn the same way)."""
    g = torch.Generator().manual_seed(0)
    torch.randn(n, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    perm = torch.randperm(n, generator=g)
    return int((y[perm] == y).sum())


# ---------------------------------------------------------------- bugs
# (1) a plain loop: sensor windows with the class written as a one-hot prefix, a watched
#     encoder trained Forward-Forward style; negatives take a shuffled label
FF_PLAIN = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 24, generator=g)
    y = torch.randint(0, 6, (300,), generator=g)
    perm = torch.randperm(300, generator=g)

    def with_label(x, y):
        return torch.cat([F.one_hot(y, 6).float() * 3.0, x], 1)

    enc = nn.Sequential(nn.Linear(30, 40), nn.ReLU())
    opt = torch.optim.SGD(enc.parameters(), lr=0.05)
    pos, neg = with_label(x, y), with_label(x, y[perm])
    for step in range(8):
        g_pos = enc(pos).pow(2).mean(1)
        g_neg = enc(neg).pow(2).mean(1)  # HERE
        loss = F.softplus(torch.cat([1.5 - g_pos, g_neg - 1.5])).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""

# (2) a function-based trainer: raw weight tensors applied with F.linear (no module), a label
#     embedding added to the features, a margin between the two goodness values
FF_FUNCTIONAL = """
    import torch
    import torch.nn.functional as F

    def goodness(params, x):
        h = F.relu(F.linear(x, params["w"], params["b"]))  # HERE
        return h.pow(2).sum(1)

    def train(params, pos, neg, steps=6):
        opt = torch.optim.Adam(params.values(), lr=1e-2)
        for _ in range(steps):
            loss = F.relu(1.0 - goodness(params, pos) + goodness(params, neg)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 16, generator=g)
    y = torch.randint(0, 4, (500,), generator=g)
    perm = torch.randperm(500, generator=g)
    table = torch.eye(4).repeat(1, 4) * 2.0
    params = {"w": (torch.randn(32, 16) * 0.3).requires_grad_(), "b": torch.zeros(32, requires_grad=True)}
    train(params, x + table[y], x + table[y[perm]])
"""

# (3) a class trainer over a DataLoader: bag-of-words documents, the topic appended; negatives
#     shuffle the topics inside each batch
FF_CLASS = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    class Scorer(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(28, 64), nn.Tanh(), nn.Linear(64, 16))

        def forward(self, docs, topics):
            return self.net(torch.cat([docs, F.one_hot(topics, 8).float()], 1))

    class Trainer:
        def __init__(self, model):
            self.model = model
            self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            self.kept = []

        def step(self, docs, topics):
            wrong = topics[torch.randperm(len(topics))]
            self.kept.append(int((wrong == topics).sum()))
            e_pos = self.model(docs, topics)
            e_neg = self.model(docs, wrong)  # HERE
            loss = (1 - F.cosine_similarity(e_pos, e_pos.detach().mean(0, keepdim=True))).mean() \\
                + F.relu(F.cosine_similarity(e_neg, e_pos.detach().mean(0, keepdim=True))).mean() \\
                + (e_neg.pow(2).mean() - e_pos.pow(2).mean())
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()

    torch.manual_seed(0)
    docs = torch.poisson(torch.rand(400, 20) * 2)
    topics = torch.randint(0, 8, (400,))
    trainer = Trainer(Scorer())
    for docs_b, topics_b in DataLoader(TensorDataset(docs, topics), batch_size=200, shuffle=True):
        trainer.step(docs_b, topics_b)
"""


def test_ff_negatives_with_shuffled_labels_in_a_plain_loop(tmp_path):
    report, _ = _run(tmp_path, FF_PLAIN)
    [f] = _opposed(report)
    same = _same_label_rows(300, 6, 24)
    assert (f.code, f.severity.value, f.line) == ("data.opposite_targets", "warning", _line(FF_PLAIN))
    assert (f.evidence["rows_sampled"], f.evidence["rows_equal"], f.evidence["rows_opposed"]) == (300, same, same)
    assert same >= 30 and f.evidence["mean_gradient_cosine"] == -1.0
    assert f.message.startswith(f"{same} of 300 sampled rows ({100 * same / 300:.1f}%) of this input are identical")


def test_ff_negatives_through_raw_weights_in_a_function_trainer(tmp_path):
    report, _ = _run(tmp_path, FF_FUNCTIONAL)
    [f] = _opposed(report)
    same = _same_label_rows(500, 4, 16)
    assert (f.code, f.severity.value, f.line, f.op) == ("data.opposite_targets", "warning", _line(FF_FUNCTIONAL),
                                                        "linear")
    assert (f.evidence["rows_sampled"], f.evidence["rows_equal"], f.evidence["rows_opposed"]) == (500, same, same)
    assert f.evidence["weights"] == "params['w']" and f.evidence["mean_gradient_cosine"] == -1.0
    assert f.message.startswith(f"{same} of 500 sampled rows ({100 * same / 500:.1f}%) of this input are identical "
                                "to rows of another input that the same weights (params['w']) saw in this step")


def test_topics_shuffled_inside_each_batch_in_a_class_trainer(tmp_path):
    report, ns = _run(tmp_path, FF_CLASS)
    [f] = _opposed(report)
    kept = ns["trainer"].kept[f.step]  # the rows whose topic the shuffle left in place, that step
    assert (f.code, f.severity.value, f.line) == ("data.opposite_targets", "warning", _line(FF_CLASS))
    assert f.evidence["rows_sampled"] == 200 and f.evidence["first_input_rows"] == 200
    assert (f.evidence["rows_equal"], f.evidence["rows_opposed"]) == (kept, kept) and kept >= 8


# ---------------------------------------------------------------- look-alikes: quiet
def test_negative_labels_drawn_to_differ_are_quiet(tmp_path):
    fixed = FF_PLAIN.replace("pos, neg = with_label(x, y), with_label(x, y[perm])",
                             "pos, neg = with_label(x, y), with_label(x, (y + torch.randint(1, 6, y.shape)) % 6)")
    report, _ = _run(tmp_path, fixed)
    assert not _opposed(report) and not alarms(report)


def test_colliding_negatives_redrawn_are_quiet(tmp_path):
    fixed = FF_FUNCTIONAL.replace("train(params, x + table[y], x + table[y[perm]])",
                                  "y_neg = y[perm]\n"
                                  "    y_neg = torch.where(y_neg == y, (y + 1) % 4, y_neg)\n"
                                  "    train(params, x + table[y], x + table[y_neg])")
    report, _ = _run(tmp_path, fixed)
    assert not _opposed(report) and not alarms(report)


# Two views of the same rows pulled together (no augmentation): equal rows, gradients alike
SAME_VIEWS = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    enc = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 8))
    opt = torch.optim.SGD(enc.parameters(), lr=0.1)
    x = torch.randn(128, 12)
    for step in range(5):
        a = enc(x.clone())
        b = enc(x.clone() * 1.0)
        z = F.normalize(torch.cat([a, b]), dim=1)
        sim = z @ z.t() / 0.5
        sim.fill_diagonal_(-1e9)
        target = torch.cat([torch.arange(128, 256), torch.arange(0, 128)])
        loss = F.cross_entropy(sim, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_identical_views_pulled_together_are_quiet(tmp_path):
    report, _ = _run(tmp_path, SAME_VIEWS)
    assert not _opposed(report)


# A value network on states and next states, both with gradients (residual-gradient TD): the
# same states recur shifted by one, pushed up as states and down as next states when the TD
# errors share a sign; a scalar per row is no pattern of the data
RESIDUAL_TD = """
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    v = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.Adam(v.parameters(), lr=1e-3)
    traj = torch.randn(257, 6)
    r = torch.rand(256, 1) + 1.0
    for step in range(5):
        s, s2 = traj[:-1].clone(), traj[1:].clone()
        loss = (r + 0.99 * v(s2) - v(s)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_residual_gradient_td_on_scalar_values_is_quiet(tmp_path):
    report, _ = _run(tmp_path, RESIDUAL_TD)
    assert not _opposed(report)


# The same batch run twice (R-Drop): one input, two dropout masks
R_DROP = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 5))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        x, y = torch.randn(64, 10), torch.randint(0, 5, (64,))
        a, b = model(x), model(x)
        kl = F.kl_div(F.log_softmax(a, 1), F.softmax(b, 1), reduction="batchmean")
        loss = F.cross_entropy(a, y) + F.cross_entropy(b, y) + kl
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_the_same_batch_run_twice_is_quiet(tmp_path):
    report, _ = _run(tmp_path, R_DROP)
    assert not _opposed(report)


# Wide rows (digested on a sample of their cells) that differ only in the label cells: the
# fixed Forward-Forward of pytorch/examples; equal digests are confirmed cell by cell
WIDE_FIXED = """
    import torch
    import torch.nn as nn

    g = torch.Generator().manual_seed(0)
    x = torch.rand(400, 784, generator=g)
    y = torch.randint(0, 10, (400,), generator=g)
    y_neg = (y + torch.randint(1, 10, (400,), generator=g)) % 10

    def overlay(x, y):
        x_ = x.clone()
        x_[:, :10] *= 0.0
        x_[range(x.shape[0]), y] = x.max()
        return x_

    layer = nn.Linear(784, 50)
    opt = torch.optim.Adam(layer.parameters(), lr=0.03)
    pos, neg = overlay(x, y), overlay(x, y_neg)
    for step in range(5):
        g_pos = torch.relu(layer(pos / pos.norm(dim=1, keepdim=True))).pow(2).mean(1)
        g_neg = torch.relu(layer(neg / neg.norm(dim=1, keepdim=True))).pow(2).mean(1)
        loss = torch.log1p(torch.exp(torch.cat([2.0 - g_pos, g_neg - 2.0]))).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_wide_rows_that_differ_in_the_label_cells_only_are_quiet(tmp_path):
    report, _ = _run(tmp_path, WIDE_FIXED)
    assert not _opposed(report) and not alarms(report)
    bug = WIDE_FIXED.replace("pos, neg = overlay(x, y), overlay(x, y_neg)",
                             "pos, neg = overlay(x, y), overlay(x, y[torch.randperm(400, generator=g)])")
    report, _ = _run(tmp_path, bug)
    [f] = _opposed(report)
    assert f.evidence["rows_sampled"] == 400 and f.evidence["rows_opposed"] == f.evidence["rows_equal"] >= 20
