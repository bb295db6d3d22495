# Source: Tiiiger/SGC, citation.py, models.py, utils.py, normalization.py, metrics.py, args.py, commit 2c7a2727e82e462d8ef9d6e57f0b08888e16488f
# https://github.com/Tiiiger/SGC/blob/master/citation.py
#
# Simple Graph Convolution: the features are propagated K=2 times with the augmented normalised adjacency
# ONCE, before training and outside autograd (sgc_precompute); the model is a single nn.Linear (logistic
# regression) trained full-batch on 140 labelled nodes with Adam at lr 0.2 for 100 epochs, with no
# validation inside the loop; accuracy from a double-typed comparison.
# Adaptation: no Cora files: a synthetic 1000-node, 7-class stochastic block model with class-dependent
# bag-of-words features (20 labelled nodes per class, 300 validation, 500 test) replaces load_citation;
# argparse/tuned-weight-decay pickles replaced by the repository defaults; CUDA branches dropped;
# torch.sparse.FloatTensor -> torch.sparse_coo_tensor; the training loss is printed every 10 epochs and a
# degree-0 run (the same logistic regression on unpropagated features) is added for comparison.
from time import perf_counter

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


# ---------------------------------------------------------------- normalization.py
def aug_normalized_adjacency(adj):
   adj = adj + sp.eye(adj.shape[0])
   adj = sp.coo_matrix(adj)
   row_sum = np.array(adj.sum(1))
   d_inv_sqrt = np.power(row_sum, -0.5).flatten()
   d_inv_sqrt[np.isinf(d_inv_sqrt)] = 0.
   d_mat_inv_sqrt = sp.diags(d_inv_sqrt)
   return d_mat_inv_sqrt.dot(adj).dot(d_mat_inv_sqrt).tocoo()


def fetch_normalization(type):
   switcher = {
       'AugNormAdj': aug_normalized_adjacency,  # A' = (D + I)^-1/2 * ( A + I ) * (D + I)^-1/2
   }
   func = switcher.get(type, lambda: "Invalid normalization technique.")
   return func


def row_normalize(mx):
    """Row-normalize sparse matrix"""
    rowsum = np.array(mx.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = sp.diags(r_inv)
    mx = r_mat_inv.dot(mx)
    return mx


# ---------------------------------------------------------------- metrics.py / models.py
def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


class SGC(nn.Module):
    """
    A Simple PyTorch Implementation of Logistic Regression.
    Assuming the features have been preprocessed with k-step graph propagation.
    """
    def __init__(self, nfeat, nclass):
        super(SGC, self).__init__()

        self.W = nn.Linear(nfeat, nclass)

    def forward(self, x):
        return self.W(x)


def get_model(model_opt, nfeat, nclass, nhid=0, dropout=0, cuda=True):
    if model_opt == "SGC":
        model = SGC(nfeat=nfeat, nclass=nclass)
    else:
        raise NotImplementedError('model:{} is not implemented!'.format(model_opt))
    return model


# ---------------------------------------------------------------- utils.py
def preprocess_citation(adj, features, normalization="FirstOrderGCN"):
    adj_normalizer = fetch_normalization(normalization)
    adj = adj_normalizer(adj)
    features = row_normalize(features)
    return adj, features


def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    """Convert a scipy sparse matrix to a torch sparse tensor."""
    sparse_mx = sparse_mx.tocoo().astype(np.float32)
    indices = torch.from_numpy(
        np.vstack((sparse_mx.row, sparse_mx.col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx.data)
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse_coo_tensor(indices, values, shape)


def load_citation(dataset_str="cora", normalization="AugNormAdj", cuda=True, n_nodes=1000, n_classes=7, feat_dim=400, seed=11):
    """Synthetic citation network (stochastic block model) in the shape load_citation returns."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, n_classes, n_nodes)
    p = np.where(y[:, None] == y[None, :], 0.012, 0.0012)
    upper = np.triu(rng.rand(n_nodes, n_nodes) < p, 1)
    adj = sp.csr_matrix((upper | upper.T).astype(np.float64))
    word_probs = rng.dirichlet(np.ones(feat_dim) * 0.05, n_classes) * 0.3 + 0.7 / feat_dim
    feats = np.zeros((n_nodes, feat_dim))
    for i in range(n_nodes):
        feats[i, rng.choice(feat_dim, 10, p=word_probs[y[i]])] = 1.0
    features = sp.lil_matrix(feats)
    idx_train = np.concatenate([np.where(y == c)[0][:20] for c in range(n_classes)])
    rest = rng.permutation(np.setdiff1d(np.arange(n_nodes), idx_train))
    idx_val, idx_test = rest[:300], rest[300:800]
    adj, features = preprocess_citation(adj, features, normalization)

    # porting to pytorch
    features = torch.FloatTensor(np.array(features.todense())).float()
    labels = torch.LongTensor(y)
    adj = sparse_mx_to_torch_sparse_tensor(adj).float()
    idx_train = torch.LongTensor(idx_train)
    idx_val = torch.LongTensor(idx_val)
    idx_test = torch.LongTensor(idx_test)
    return adj, features, labels, idx_train, idx_val, idx_test


def sgc_precompute(features, adj, degree):
    t = perf_counter()
    for i in range(degree):
        features = torch.spmm(adj, features)
    precompute_time = perf_counter()-t
    return features, precompute_time


def set_seed(seed, cuda):
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------- citation.py
def train_regression(model,
                     train_features, train_labels,
                     val_features, val_labels,
                     epochs=100, weight_decay=5e-6,
                     lr=0.2, dropout=0, verbose=True):

    optimizer = optim.Adam(model.parameters(), lr=lr,
                           weight_decay=weight_decay)
    t = perf_counter()
    for epoch in range(epochs):
        model.train()
        optimizer.zero_grad()
        output = model(train_features)
        loss_train = F.cross_entropy(output, train_labels)
        loss_train.backward()
        optimizer.step()
        if verbose and epoch % 10 == 0:
            print("epoch {:3d} loss_train {:.4f}".format(epoch, loss_train.item()))
    train_time = perf_counter()-t

    with torch.no_grad():
        model.eval()
        output = model(val_features)
        acc_val = accuracy(output, val_labels)

    return model, acc_val, train_time


def test_regression(model, test_features, test_labels):
    model.eval()
    return accuracy(model(test_features), test_labels)


def main():
    torch.set_num_threads(1)
    args = type("Args", (), dict(seed=42, epochs=100, lr=0.2, weight_decay=5e-6, hidden=0, dropout=0,
                                 dataset="cora", model="SGC", normalization="AugNormAdj", degree=2, cuda=False))()

    # setting random seeds
    set_seed(args.seed, args.cuda)

    adj, features, labels, idx_train, idx_val, idx_test = load_citation(args.dataset, args.normalization, args.cuda)

    # degree 0 (no propagation) for comparison
    base = get_model(args.model, features.size(1), labels.max().item()+1, args.hidden, args.dropout, args.cuda)
    base, base_val, _ = train_regression(base, features[idx_train], labels[idx_train], features[idx_val], labels[idx_val],
                                         args.epochs, args.weight_decay, args.lr, args.dropout, verbose=False)
    base_test = test_regression(base, features[idx_test], labels[idx_test])
    print("Degree-0 logistic regression: Validation Accuracy: {:.4f} Test Accuracy: {:.4f}".format(base_val, base_test))

    model = get_model(args.model, features.size(1), labels.max().item()+1, args.hidden, args.dropout, args.cuda)

    if args.model == "SGC": features, precompute_time = sgc_precompute(features, adj, args.degree)
    print("{:.4f}s".format(precompute_time))

    with torch.no_grad():
        acc_init = accuracy(model(features[idx_test]), labels[idx_test])

    if args.model == "SGC":
        model, acc_val, train_time = train_regression(model, features[idx_train], labels[idx_train], features[idx_val], labels[idx_val],
                         args.epochs, args.weight_decay, args.lr, args.dropout)
        acc_test = test_regression(model, features[idx_test], labels[idx_test])

    print("Validation Accuracy: {:.4f} Test Accuracy: {:.4f}".format(acc_val, acc_test))
    print("Pre-compute time: {:.4f}s, train time: {:.4f}s, total: {:.4f}s".format(precompute_time, train_time, precompute_time+train_time))
    print("[summary] test_accuracy untrained={:.4f} trained={:.4f} increased={}; degree-0 baseline={:.4f}".format(
        acc_init, acc_test, bool(acc_test > acc_init), base_test))


if __name__ == "__main__":
    main()
