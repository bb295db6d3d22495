# Source: dmlc/dgl, tutorials/blitz/4_link_predict.py, commit 3273bb27c120c4bac20ee3f51e74ba0c25c2e9f4
# Report: https://github.com/dmlc/dgl/issues/5536
# DGL's link prediction tutorial: split the (bidirected) edge set 90/10 into training and test
# positives, sample as many non-edges as negatives, remove the test edges from the graph used for
# message passing, train a 2-layer GraphSAGE with a dot-product scorer and report the test AUC.
# Cora is replaced by a synthetic citation-like graph (community structure, bag-of-words-like
# node features) stored with both directions of every link, as CoraGraphDataset is; the few DGL
# calls the tutorial uses (graph, remove_edges, SAGEConv 'mean', u_dot_v) are re-implemented in
# torch below.
import itertools

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score


# ---- minimal stand-ins for the dgl calls used by the tutorial ----
class Graph:
    def __init__(self, u, v, num_nodes):
        self.u = torch.as_tensor(u, dtype=torch.long)
        self.v = torch.as_tensor(v, dtype=torch.long)
        self._num_nodes = num_nodes
        self.ndata = {}

    def edges(self):
        return self.u, self.v

    def num_edges(self):
        return len(self.u)

    def num_nodes(self):
        return self._num_nodes


def graph(uv, num_nodes):
    return Graph(uv[0], uv[1], num_nodes)


def remove_edges(g, eids):
    keep = np.ones(g.num_edges(), dtype=bool)
    keep[eids] = False
    new = Graph(g.u[keep], g.v[keep], g.num_nodes())
    new.ndata = dict(g.ndata)
    return new


class SAGEConv(nn.Module):
    def __init__(self, in_feats, out_feats, aggregator_type="mean"):
        super().__init__()
        self.fc_self = nn.Linear(in_feats, out_feats, bias=False)
        self.fc_neigh = nn.Linear(in_feats, out_feats, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_feats))

    def forward(self, g, feat):
        src, dst = g.edges()
        n = g.num_nodes()
        deg = torch.bincount(dst, minlength=n).clamp(min=1).float().unsqueeze(1)
        h_neigh = torch.zeros(n, feat.shape[1]).index_add(0, dst, feat[src]) / deg
        return self.fc_self(feat) + self.fc_neigh(h_neigh) + self.bias


def make_citation_graph(num_nodes=700, num_classes=7, num_words=400, seed=0):
    rng = np.random.RandomState(seed)
    label = rng.randint(num_classes, size=num_nodes)
    words_of_class = rng.rand(num_classes, num_words) < 0.05
    feat = (rng.rand(num_nodes, num_words) < 0.02) | (words_of_class[label] & (rng.rand(num_nodes, num_words) < 0.6))
    pairs = set()
    while len(pairs) < 1400:
        a, b = rng.randint(num_nodes, size=2)
        same = label[a] == label[b]
        if a != b and (same or rng.rand() < 0.05):
            pairs.add((min(a, b), max(a, b)))
    pairs = np.array(sorted(pairs))
    src = np.concatenate([pairs[:, 0], pairs[:, 1]])
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    g = Graph(src, dst, num_nodes)
    g.ndata["feat"] = torch.tensor(feat, dtype=torch.float32)
    return g


class GraphSAGE(nn.Module):
    def __init__(self, in_feats, h_feats):
        super(GraphSAGE, self).__init__()
        self.conv1 = SAGEConv(in_feats, h_feats, "mean")
        self.conv2 = SAGEConv(h_feats, h_feats, "mean")

    def forward(self, g, in_feat):
        h = self.conv1(g, in_feat)
        h = F.relu(h)
        h = self.conv2(g, h)
        return h


class DotPredictor(nn.Module):
    def forward(self, g, h):
        src, dst = g.edges()
        # u_dot_v: dot product between the source and destination node features
        return (h[src] * h[dst]).sum(dim=1)


def compute_loss(pos_score, neg_score):
    scores = torch.cat([pos_score, neg_score])
    labels = torch.cat(
        [torch.ones(pos_score.shape[0]), torch.zeros(neg_score.shape[0])]
    )
    return F.binary_cross_entropy_with_logits(scores, labels)


def compute_auc(pos_score, neg_score):
    scores = torch.cat([pos_score, neg_score]).numpy()
    labels = torch.cat(
        [torch.ones(pos_score.shape[0]), torch.zeros(neg_score.shape[0])]
    ).numpy()
    return roc_auc_score(labels, scores)


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)

    g = make_citation_graph()

    # Split edge set for training and testing
    u, v = g.edges()

    eids = np.arange(g.num_edges())
    eids = np.random.permutation(eids)
    test_size = int(len(eids) * 0.1)
    train_size = g.num_edges() - test_size
    test_pos_u, test_pos_v = u[eids[:test_size]], v[eids[:test_size]]
    train_pos_u, train_pos_v = u[eids[test_size:]], v[eids[test_size:]]

    # Find all negative edges and split them for training and testing
    adj = sp.coo_matrix((np.ones(len(u)), (u.numpy(), v.numpy())))
    adj_neg = 1 - adj.todense() - np.eye(g.num_nodes())
    neg_u, neg_v = np.where(adj_neg != 0)

    neg_eids = np.random.choice(len(neg_u), g.num_edges())
    test_neg_u, test_neg_v = (
        neg_u[neg_eids[:test_size]],
        neg_v[neg_eids[:test_size]],
    )
    train_neg_u, train_neg_v = (
        neg_u[neg_eids[test_size:]],
        neg_v[neg_eids[test_size:]],
    )

    train_g = remove_edges(g, eids[:test_size])

    train_pairs = set(zip(train_g.u.tolist(), train_g.v.tolist()))
    reversed_in_train = sum((b, a) in train_pairs for a, b in zip(test_pos_u.tolist(), test_pos_v.tolist()))
    print("test positives {} , of which the reverse edge is in the training graph: {}".format(
        test_size, reversed_in_train))

    train_pos_g = graph((train_pos_u, train_pos_v), num_nodes=g.num_nodes())
    train_neg_g = graph((train_neg_u, train_neg_v), num_nodes=g.num_nodes())

    test_pos_g = graph((test_pos_u, test_pos_v), num_nodes=g.num_nodes())
    test_neg_g = graph((test_neg_u, test_neg_v), num_nodes=g.num_nodes())

    model = GraphSAGE(train_g.ndata["feat"].shape[1], 16)
    pred = DotPredictor()

    optimizer = torch.optim.Adam(
        itertools.chain(model.parameters(), pred.parameters()), lr=0.01
    )

    for e in range(100):
        # forward
        h = model(train_g, train_g.ndata["feat"])
        pos_score = pred(train_pos_g, h)
        neg_score = pred(train_neg_g, h)
        loss = compute_loss(pos_score, neg_score)

        # backward
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if e % 20 == 0 or e == 99:
            with torch.no_grad():
                train_auc = compute_auc(pos_score, neg_score)
            print("In epoch {}, loss: {:.4f} train AUC {:.4f}".format(e, loss.item(), train_auc))

    with torch.no_grad():
        pos_score = pred(test_pos_g, h)
        neg_score = pred(test_neg_g, h)
        print("AUC", round(compute_auc(pos_score, neg_score), 4))


if __name__ == "__main__":
    main()
