"""The data ledger's severities judged by harm (session 8): evaluation passes that drop a
remainder, hand-fed evaluation rows equal by content to training rows, and loaders fetched
together for one backward. Each program is written the way users write it; the bugs assert the
exact finding, the look-alike correct programs assert silence."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script

PASS_CODES = {"data.eval_duplicates", "data.eval_lost"}


def _run(tmp_path, source, name="prog.py", checks=("data_ledger",)):
    return run_script(name, tmp_path, checks=checks, source=textwrap.dedent(source))


_line = line_in


# ---------------------------------------------------------------- evaluation passes (eval_lost)
TINY_VAL = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X, y = torch.randn(220, 6), torch.randint(0, 3, (220,))
train_ds, holdout = TensorDataset(X[:200], y[:200]), TensorDataset(X[200:], y[200:])
train_loader = DataLoader(train_ds, batch_size=32, shuffle=True, drop_last=True)
val_loader = DataLoader(holdout, batch_size=32, drop_last=True)  # HERE
model = nn.Linear(6, 3)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(2):
    for xb, yb in train_loader:
        opt.zero_grad(); F.cross_entropy(model(xb), yb).backward(); opt.step()
    with torch.no_grad():
        accs = [(model(xb).argmax(1) == yb).float().mean() for xb, yb in val_loader]
    print(epoch, sum(accs) / max(len(accs), 1))
"""


def test_a_validation_split_smaller_than_one_batch_is_never_evaluated(tmp_path):
    report, _ = _run(tmp_path, TINY_VAL)
    [f] = [f for f in report.findings if f.code in PASS_CODES]
    assert (f.code, f.severity.value, f.line) == ("data.eval_lost", "warning", _line(TINY_VAL))
    ev = f.evidence
    assert (ev["loader"], ev["samples"], ev["delivered"], ev["lost"], ev["never_evaluated"], ev["passes"]) == \
        ("val_loader", 20, 0, 20, 20, 2)


RANDOM_SPLIT_REMAINDER = """
import torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset, random_split

class Images(Dataset):
    def __init__(self, n=72):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 8, 8, generator=g)
        self.m = (self.x[:, 0] > 0).long()
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return {"image": self.x[i], "mask": self.m[i]}

ds = Images()
train_set, val_set = random_split(ds, [65, 7], generator=torch.Generator().manual_seed(0))
train_loader = DataLoader(train_set, batch_size=4, shuffle=True)
val_loader = DataLoader(val_set, batch_size=4, shuffle=False, drop_last=True)  # HERE
net = nn.Conv2d(3, 2, 3, padding=1)
opt = torch.optim.RMSprop(net.parameters(), lr=1e-3)
for epoch in range(2):
    net.train()
    for b in train_loader:
        opt.zero_grad(); nn.functional.cross_entropy(net(b["image"]), b["mask"]).backward(); opt.step()
    net.eval()
    with torch.inference_mode():
        dice = sum(float((net(b["image"]).argmax(1) == b["mask"]).float().mean()) for b in val_loader)
"""

SHUFFLED_VAL_EACH_EPOCH = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
t = torch.linspace(0, 60, 1400)
series = torch.stack([torch.sin(t + k) for k in range(4)], 1)

class Windows(torch.utils.data.Dataset):
    def __init__(self, lo, hi):
        self.s = series[lo:hi]
    def __len__(self):
        return len(self.s) - 24 - 6 + 1
    def __getitem__(self, i):
        return self.s[i:i + 24], self.s[i + 24:i + 30]

def get_data(flag):
    ds = Windows(*{"train": (0, 900), "val": (876, 1150), "test": (1126, 1400)}[flag])
    return DataLoader(ds, batch_size=32, shuffle=flag != "test", drop_last=flag != "test")  # HERE

train_loader, vali_loader, test_loader = get_data("train"), get_data("val"), get_data("test")
model = nn.Sequential(nn.Flatten(), nn.Linear(96, 24))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    model.train()
    for x, y in train_loader:
        opt.zero_grad(); F.mse_loss(model(x), y.flatten(1)).backward(); opt.step()
    model.eval()
    with torch.no_grad():
        for loader in (vali_loader, test_loader):
            loss = sum(F.mse_loss(model(x), y.flatten(1)).item() for x, y in loader)
"""


def test_a_remainder_smaller_than_the_evaluated_part_is_info(tmp_path):
    for source in (RANDOM_SPLIT_REMAINDER, SHUFFLED_VAL_EACH_EPOCH):
        report, _ = _run(tmp_path, source)
        found = [f for f in report.findings if f.code in PASS_CODES]
        assert found and all(f.severity.value == "info" for f in found), [f.message for f in found]
        assert all(f.evidence["lost"] < f.evidence["delivered"] for f in found)


# ---------------------------------------------------------------- hand-fed rows equal by content
ID_QUERIES = """
import torch, torch.nn as nn

torch.manual_seed(0)
n_ent = 200
triples = torch.stack([torch.randint(1, n_ent, (1400,)), torch.randint(0, 6, (1400,)),
                       torch.randint(1, n_ent, (1400,))], 1)
test, train = triples[:256], triples[256:]

class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(n_ent, 16)
    def forward(self, heads):
        return self.e(heads[:, 0]) @ self.e.weight.t()

model = Scorer()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)

def ranks(model, rows):
    model.eval()
    with torch.no_grad():
        out = []
        for i in range(0, len(rows) - 127, 128):
            chunk = rows[i:i + 128]
            scores = model(chunk[:, :1])
            out.append((scores > scores.gather(1, chunk[:, 2:])).sum(1) + 1)
    return torch.cat(out).float()

for epoch in range(4):
    model.train()
    perm = torch.randperm(len(train))
    for i in range(0, len(perm) - 127, 128):
        b = train[perm[i:i + 128]]
        opt.zero_grad()
        nn.functional.cross_entropy(model(b[:, :1]), b[:, 2]).backward()
        opt.step()
    mrr = (1 / ranks(model, test)).mean()
"""

SOURCE_MEASURED = """
import math, torch, torch.nn as nn

def spirals(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    r = torch.rand(n, generator=g)
    t = r * 4 + y * (2 * math.pi / 3) + 0.2 * torch.randn(n, generator=g)
    return torch.stack([r * torch.cos(t), r * torch.sin(t)], 1), y

def acc(model, x, y):
    model.eval()
    with torch.no_grad():
        out = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return out

xs, ys = spirals(1500, 1)
xq, yq = spirals(600, 3)
model = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
for rnd in range(3):
    for step in range(60):
        idx = torch.randint(0, len(xs), (128,))
        opt.zero_grad(); nn.functional.cross_entropy(model(xs[idx]), ys[idx]).backward(); opt.step()
    print(rnd, acc(model, xs, ys), acc(model, xq, yq))
"""

HELDOUT_TRAINED = """
import torch, torch.nn as nn

torch.manual_seed(0)
X, y = torch.randn(1000, 5), torch.randint(0, 2, (1000,))
X_val, y_val = X[800:], y[800:]
model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    model.train()
    for step in range(20):
        idx = torch.randint(0, len(X), (64,))  # draws from all rows, the held-out ones too
        opt.zero_grad(); nn.functional.cross_entropy(model(X[idx]), y[idx]).backward(); opt.step()
    model.eval()
    with torch.no_grad():
        val_acc = (model(X_val).argmax(1) == y_val).float().mean()  # HERE
"""


def test_id_rows_that_repeat_inside_the_evaluation_set_are_not_identity(tmp_path):
    report, _ = _run(tmp_path, ID_QUERIES)
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


def test_the_tensor_training_batches_were_drawn_from_measured_is_quiet(tmp_path):
    report, _ = _run(tmp_path, SOURCE_MEASURED)
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


def test_a_held_out_part_of_the_tensor_training_draws_from_is_an_error(tmp_path):
    report, _ = _run(tmp_path, HELDOUT_TRAINED)
    [f] = [f for f in report.findings if f.code == "data.split_overlap"]
    assert (f.severity.value, f.line) == ("error", _line(HELDOUT_TRAINED))
    assert (f.evidence["evaluation_samples"], f.evidence["matched"]) == (200, "content")
    assert f.evidence["count"] >= 190


# ---------------------------------------------------------------- loaders fetched together for one step
EPISODES = """
import random, torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset, Sampler

random.seed(0); torch.manual_seed(0)
POOL = {c: torch.randn(12, 1, 6, 6) + c for c in range(40)}
train_classes, test_classes = list(range(30)), list(range(30, 40))

class Episode(Dataset):
    def __init__(self, items):
        self.items = items
    def __len__(self):
        return len(self.items)
    def __getitem__(self, i):
        c, k, label = self.items[i]
        return POOL[c][k], label

class Once(Sampler):
    def __init__(self, n):
        self.n = n
    def __iter__(self):
        return iter(torch.randperm(self.n).tolist())
    def __len__(self):
        return 1

def loaders(classes, shots=2, queries=4):
    chosen = random.sample(classes, 5)
    support, query = [], []
    for label, c in enumerate(chosen):
        ks = random.sample(range(12), shots + queries)
        support += [(c, k, label) for k in ks[:shots]]
        query += [(c, k, label) for k in ks[shots:]]
    return (DataLoader(Episode(support), batch_size=len(support), sampler=Once(len(support))),
            DataLoader(Episode(query), batch_size=len(query), sampler=Once(len(query))))

encoder = nn.Sequential(nn.Flatten(), nn.Linear(36, 16))
opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
for episode in range(30):
    support_loader, query_loader = loaders(train_classes)
    xs, ys = next(iter(support_loader))
    xq, yq = next(iter(query_loader))
    protos = torch.stack([encoder(xs)[ys == c].mean(0) for c in range(5)])
    loss = nn.functional.cross_entropy(-torch.cdist(encoder(xq), protos), yq)
    opt.zero_grad(); loss.backward(); opt.step()
    if (episode + 1) % 10 == 0:
        with torch.no_grad():
            for _ in range(3):
                s_loader, t_loader = loaders(test_classes)
                xs, ys = next(iter(s_loader))
                xq, yq = next(iter(t_loader))
                protos = torch.stack([encoder(xs)[ys == c].mean(0) for c in range(5)])
                acc = (torch.cdist(encoder(xq), protos).argmin(1) == yq).float().mean()
"""


def test_support_and_query_sets_fetched_for_one_step_are_both_trained_on(tmp_path):
    report, _ = _run(tmp_path, EPISODES)
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


PADDED_STREAM = """
import torch, torch.nn as nn

def batch(g, n, length=12):
    ids = torch.randint(20, 52, (n, length), generator=g)
    where = torch.randint(1, length, (n,), generator=g)
    ids[:, 0] = where  # the first token says which position holds the answer
    answer = ids[torch.arange(n), where] - 20
    keep = torch.maximum(where + 1, torch.randint(2, length + 1, (n,), generator=g))
    ids[torch.arange(length)[None] >= keep[:, None]] = 0  # padding after each sequence
    return ids, answer

g = torch.Generator().manual_seed(1)
model = nn.Sequential(nn.Embedding(52, 8), nn.Flatten(), nn.Linear(96, 32))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
val_ids, val_y = batch(g, 1000)
for step in range(601):
    ids, y = batch(g, 64)  # fresh rows every step: a stream, never an epoch
    opt.zero_grad(); nn.functional.cross_entropy(model(ids), y).backward(); opt.step()
    if step % 100 == 0:
        model.eval()
        with torch.no_grad():
            acc = (model(val_ids).argmax(1) == val_y).float().mean()
        model.train()
"""


def test_short_padded_rows_equal_by_chance_are_not_trained_samples(tmp_path):
    report, _ = _run(tmp_path, PADDED_STREAM)
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


AGENT = """
import torch, torch.nn as nn

class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.pi, self.v = nn.Linear(6, 32), nn.Linear(32, 3), nn.Linear(32, 1)
    def forward(self, obs):
        h = torch.tanh(self.body(obs))
        return self.v(h), self.pi(h)

torch.manual_seed(0)
policy = Policy()
opt = torch.optim.RMSprop(policy.parameters(), lr=7e-4)
obs = torch.randn(16, 6)
for update in range(40):
    states, actions = [], []
    for step in range(5):
        with torch.no_grad():
            value, logits = policy(obs)  # acting: the value estimate and the action of each env
        action = torch.distributions.Categorical(logits=logits).sample()
        states.append(obs); actions.append(action)
        obs = obs + 0.1 * torch.randn(16, 6)
    with torch.no_grad():
        next_value, _ = policy(obs)  # bootstrap value of the state the next rollout starts from
    values, logits = policy(torch.cat(states))
    logp = torch.distributions.Categorical(logits=logits).log_prob(torch.cat(actions))
    loss = -(logp * (next_value.mean() - values.squeeze(1)).detach()).mean() + values.pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_an_agent_acting_on_the_states_it_trains_on_is_no_evaluation(tmp_path):
    report, _ = _run(tmp_path, AGENT)
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []


EPISODES_BY_RANDPERM = """
import torch, torch.nn as nn

torch.manual_seed(0)
pool = torch.randn(5, 20, 8) + torch.arange(5)[:, None, None]   # 5 classes, 20 examples each
enc = nn.Linear(8, 4)
opt = torch.optim.Adam(enc.parameters(), lr=1e-2)
for episode in range(30):
    inds = torch.randperm(20)[:15]
    support, query = pool[:, inds[:5]], pool[:, inds[5:]]
    protos = enc(support.reshape(-1, 8)).reshape(5, 5, 4).mean(1)
    logits = -torch.cdist(enc(query.reshape(-1, 8)), protos)
    loss = nn.functional.cross_entropy(logits, torch.arange(5).repeat_interleave(10))
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_episodes_drawn_afresh_from_one_pool_are_no_harmful_redraw(tmp_path):
    report, _ = _run(tmp_path, EPISODES_BY_RANDPERM, checks=("leakage", "data_ledger"))
    assert [f for f in report.findings if f.code.startswith("data.") and f.severity.value in ("warning", "error")] == []
