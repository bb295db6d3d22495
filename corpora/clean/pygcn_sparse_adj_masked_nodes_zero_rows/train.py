# Source: tkipf/pygcn, pygcn/train.py + pygcn/models.py + pygcn/layers.py + pygcn/utils.py,
# commit 1600b5b748b3976413d1e307540ccc62605b4d6d
# https://github.com/tkipf/pygcn
#
# Kipf & Welling GCN in plain torch: torch.spmm with a sparse COO adjacency, row-normalisation that turns
# 1/0 = inf into 0 for empty rows, log_softmax + nll_loss on the first 140 nodes only of a full-graph forward,
# validation computed from a separate eval-mode forward without no_grad, weights initialised via .data.uniform_.
# Adaptation: the Cora files are not available: load_data builds the same arrays in memory from a synthetic
# citation graph (2708 papers with string ids and 7 string classes, 1433 binary word features of which ~2% of
# rows are empty, 5429 directed citations mostly within a class), then runs the repo's code path unchanged
# (encode_onehot, idx_map, symmetrisation, normalize, sparse_mx_to_torch_sparse_tensor, the same index ranges);
# argparse -> constants; epochs 200 -> 60.
from __future__ import division
from __future__ import print_function

import math
import time

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parameter import Parameter


def encode_onehot(labels):
    classes = sorted(set(labels))
    classes_dict = {c: np.identity(len(classes))[i, :] for i, c in
                    enumerate(classes)}
    labels_onehot = np.array(list(map(classes_dict.get, labels)),
                             dtype=np.int32)
    return labels_onehot


def synthetic_cora(seed=42, n=2708, n_feat=1433, n_cls=7, n_edges=5429):
    """In-memory stand-in for cora.content / cora.cites with Cora's sizes."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, n_cls, n)
    word_p = np.full((n_cls, n_feat), 0.005)
    for c in range(n_cls):
        word_p[c, rng.choice(n_feat, 60, replace=False)] = 0.12
    feats = (rng.rand(n, n_feat) < word_p[y]).astype(np.int32)
    feats[rng.rand(n) < 0.02] = 0
    paper_ids = rng.choice(10 ** 6, n, replace=False)
    names = np.array(["Case_Based", "Genetic_Algorithms", "Neural_Networks", "Probabilistic_Methods",
                      "Reinforcement_Learning", "Rule_Learning", "Theory"])
    content = np.column_stack([paper_ids.astype(str), feats.astype(str), names[y]])
    src = rng.randint(0, n, n_edges)
    same = rng.rand(n_edges) < 0.8
    dst = np.where(same, [rng.choice(np.flatnonzero(y == y[s])) for s in src], rng.randint(0, n, n_edges))
    cites = np.column_stack([paper_ids[dst], paper_ids[src]]).astype(np.int32)
    return content, cites


def load_data(dataset="cora"):
    """Load citation network dataset (cora only for now)"""
    print('Loading {} dataset...'.format(dataset))

    idx_features_labels, edges_unordered = synthetic_cora()
    features = sp.csr_matrix(idx_features_labels[:, 1:-1].astype(np.float32), dtype=np.float32)
    labels = encode_onehot(idx_features_labels[:, -1])

    # build graph
    idx = np.array(idx_features_labels[:, 0], dtype=np.int32)
    idx_map = {j: i for i, j in enumerate(idx)}
    edges = np.array(list(map(idx_map.get, edges_unordered.flatten())),
                     dtype=np.int32).reshape(edges_unordered.shape)
    adj = sp.coo_matrix((np.ones(edges.shape[0]), (edges[:, 0], edges[:, 1])),
                        shape=(labels.shape[0], labels.shape[0]),
                        dtype=np.float32)

    # build symmetric adjacency matrix
    adj = adj + adj.T.multiply(adj.T > adj) - adj.multiply(adj.T > adj)

    features = normalize(features)
    adj = normalize(adj + sp.eye(adj.shape[0]))

    idx_train = range(140)
    idx_val = range(200, 500)
    idx_test = range(500, 1500)

    features = torch.FloatTensor(np.array(features.todense()))
    labels = torch.LongTensor(np.where(labels)[1])
    adj = sparse_mx_to_torch_sparse_tensor(adj)

    idx_train = torch.LongTensor(idx_train)
    idx_val = torch.LongTensor(idx_val)
    idx_test = torch.LongTensor(idx_test)

    return adj, features, labels, idx_train, idx_val, idx_test


def normalize(mx):
    """Row-normalize sparse matrix"""
    rowsum = np.array(mx.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = sp.diags(r_inv)
    mx = r_mat_inv.dot(mx)
    return mx


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    """Convert a scipy sparse matrix to a torch sparse tensor."""
    sparse_mx = sparse_mx.tocoo().astype(np.float32)
    indices = torch.from_numpy(
        np.vstack((sparse_mx.row, sparse_mx.col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx.data)
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse_coo_tensor(indices, values, shape)


class GraphConvolution(nn.Module):
    """
    Simple GCN layer, similar to https://arxiv.org/abs/1609.02907
    """

    def __init__(self, in_features, out_features, bias=True):
        super(GraphConvolution, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(torch.FloatTensor(in_features, out_features))
        if bias:
            self.bias = Parameter(torch.FloatTensor(out_features))
        else:
            self.register_parameter('bias', None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1. / math.sqrt(self.weight.size(1))
        self.weight.data.uniform_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.uniform_(-stdv, stdv)

    def forward(self, input, adj):
        support = torch.mm(input, self.weight)
        output = torch.spmm(adj, support)
        if self.bias is not None:
            return output + self.bias
        else:
            return output


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout):
        super(GCN, self).__init__()

        self.gc1 = GraphConvolution(nfeat, nhid)
        self.gc2 = GraphConvolution(nhid, nclass)
        self.dropout = dropout

    def forward(self, x, adj):
        x = F.relu(self.gc1(x, adj))
        x = F.dropout(x, self.dropout, training=self.training)
        x = self.gc2(x, adj)
        return F.log_softmax(x, dim=1)


class args:
    fastmode, seed, epochs, lr, weight_decay, hidden, dropout = False, 42, 60, 0.01, 5e-4, 16, 0.5


def main():
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    # Load data
    adj, features, labels, idx_train, idx_val, idx_test = load_data()

    # Model and optimizer
    model = GCN(nfeat=features.shape[1],
                nhid=args.hidden,
                nclass=labels.max().item() + 1,
                dropout=args.dropout)
    optimizer = optim.Adam(model.parameters(),
                           lr=args.lr, weight_decay=args.weight_decay)
    history = []

    def train(epoch):
        t = time.time()
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        acc_train = accuracy(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()

        if not args.fastmode:
            # Evaluate validation set performance separately,
            # deactivates dropout during validation run.
            model.eval()
            output = model(features, adj)

        loss_val = F.nll_loss(output[idx_val], labels[idx_val])
        acc_val = accuracy(output[idx_val], labels[idx_val])
        history.append((loss_val.item(), acc_val.item()))
        if epoch % 10 == 0 or epoch == args.epochs - 1:
            print('Epoch: {:04d}'.format(epoch+1),
                  'loss_train: {:.4f}'.format(loss_train.item()),
                  'acc_train: {:.4f}'.format(acc_train.item()),
                  'loss_val: {:.4f}'.format(loss_val.item()),
                  'acc_val: {:.4f}'.format(acc_val.item()),
                  'time: {:.4f}s'.format(time.time() - t))

    def test():
        model.eval()
        output = model(features, adj)
        loss_test = F.nll_loss(output[idx_test], labels[idx_test])
        acc_test = accuracy(output[idx_test], labels[idx_test])
        print("Test set results:",
              "loss= {:.4f}".format(loss_test.item()),
              "accuracy= {:.4f}".format(acc_test.item()))

    # Train model
    for epoch in range(args.epochs):
        train(epoch)
    print("Optimization Finished!")

    # Testing
    test()
    print(f"[summary] loss_val first={history[0][0]:.4f} last={history[-1][0]:.4f} decreased={history[-1][0] < history[0][0]}")
    print(f"[summary] acc_val first={history[0][1]:.4f} last={history[-1][1]:.4f} increased={history[-1][1] > history[0][1]}")


if __name__ == '__main__':
    main()
