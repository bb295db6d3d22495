# Source: PetarV-/DGI, execute.py, models/dgi.py, models/logreg.py, layers/gcn.py, layers/readout.py, layers/discriminator.py, utils/process.py, commit 61baf67d7052905c77bdeb28c22926f04e182362
# https://github.com/PetarV-/DGI
#
# Deep Graph Infomax: one-layer GCN (PReLU) on a sparse normalised adjacency; negatives are the SAME graph
# with node features row-permuted; a bilinear discriminator scores (node, sigmoid(mean readout)) pairs,
# BCE-with-logits against 1s then 0s; early stopping on the training loss with a checkpoint saved BEFORE
# backward; then embeddings are detached and 50 (here 5) logistic-regression probes are trained on them.
# Adaptation: no Cora files: a synthetic 700-node, 7-class stochastic block model with class-dependent
# sparse bag-of-words features replaces process.load_data; CUDA-only lines (.cuda()) run on CPU; the
# checkpoint goes to a temporary directory; hid_units 512 -> 64; nb_epochs 10000 -> 150 (patience 20
# kept); 5 probes instead of 50; a probe on the untrained encoder is added as the "before" figure.
import os
import tempfile

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn


# ---------------------------------------------------------------- layers/gcn.py

class GCN(nn.Module):
    def __init__(self, in_ft, out_ft, act, bias=True):
        super(GCN, self).__init__()
        self.fc = nn.Linear(in_ft, out_ft, bias=False)
        self.act = nn.PReLU() if act == 'prelu' else act
        
        if bias:
            self.bias = nn.Parameter(torch.FloatTensor(out_ft))
            self.bias.data.fill_(0.0)
        else:
            self.register_parameter('bias', None)

        for m in self.modules():
            self.weights_init(m)

    def weights_init(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight.data)
            if m.bias is not None:
                m.bias.data.fill_(0.0)

    # Shape of seq: (batch, nodes, features)
    def forward(self, seq, adj, sparse=False):
        seq_fts = self.fc(seq)
        if sparse:
            out = torch.unsqueeze(torch.spmm(adj, torch.squeeze(seq_fts, 0)), 0)
        else:
            out = torch.bmm(adj, seq_fts)
        if self.bias is not None:
            out += self.bias
        
        return self.act(out)


# ---------------------------------------------------------------- layers/readout.py

# Applies an average on seq, of shape (batch, nodes, features)
# While taking into account the masking of msk
class AvgReadout(nn.Module):
    def __init__(self):
        super(AvgReadout, self).__init__()

    def forward(self, seq, msk):
        if msk is None:
            return torch.mean(seq, 1)
        else:
            msk = torch.unsqueeze(msk, -1)
            return torch.sum(seq * msk, 1) / torch.sum(msk)


# ---------------------------------------------------------------- layers/discriminator.py

class Discriminator(nn.Module):
    def __init__(self, n_h):
        super(Discriminator, self).__init__()
        self.f_k = nn.Bilinear(n_h, n_h, 1)

        for m in self.modules():
            self.weights_init(m)

    def weights_init(self, m):
        if isinstance(m, nn.Bilinear):
            torch.nn.init.xavier_uniform_(m.weight.data)
            if m.bias is not None:
                m.bias.data.fill_(0.0)

    def forward(self, c, h_pl, h_mi, s_bias1=None, s_bias2=None):
        c_x = torch.unsqueeze(c, 1)
        c_x = c_x.expand_as(h_pl)

        sc_1 = torch.squeeze(self.f_k(h_pl, c_x), 2)
        sc_2 = torch.squeeze(self.f_k(h_mi, c_x), 2)

        if s_bias1 is not None:
            sc_1 += s_bias1
        if s_bias2 is not None:
            sc_2 += s_bias2

        logits = torch.cat((sc_1, sc_2), 1)

        return logits


# ---------------------------------------------------------------- models/dgi.py

class DGI(nn.Module):
    def __init__(self, n_in, n_h, activation):
        super(DGI, self).__init__()
        self.gcn = GCN(n_in, n_h, activation)
        self.read = AvgReadout()

        self.sigm = nn.Sigmoid()

        self.disc = Discriminator(n_h)

    def forward(self, seq1, seq2, adj, sparse, msk, samp_bias1, samp_bias2):
        h_1 = self.gcn(seq1, adj, sparse)

        c = self.read(h_1, msk)
        c = self.sigm(c)

        h_2 = self.gcn(seq2, adj, sparse)

        ret = self.disc(c, h_1, h_2, samp_bias1, samp_bias2)

        return ret

    # Detach the return variables
    def embed(self, seq, adj, sparse, msk):
        h_1 = self.gcn(seq, adj, sparse)
        c = self.read(h_1, msk)

        return h_1.detach(), c.detach()


# ---------------------------------------------------------------- models/logreg.py

class LogReg(nn.Module):
    def __init__(self, ft_in, nb_classes):
        super(LogReg, self).__init__()
        self.fc = nn.Linear(ft_in, nb_classes)

        for m in self.modules():
            self.weights_init(m)

    def weights_init(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight.data)
            if m.bias is not None:
                m.bias.data.fill_(0.0)

    def forward(self, seq):
        ret = self.fc(seq)
        return ret


# ---------------------------------------------------------------- utils/process.py (used parts)
def sparse_to_tuple(sparse_mx):
    def to_tuple(mx):
        if not sp.isspmatrix_coo(mx):
            mx = mx.tocoo()
        coords = np.vstack((mx.row, mx.col)).transpose()
        values = mx.data
        shape = mx.shape
        return coords, values, shape
    return to_tuple(sparse_mx)


def preprocess_features(features):
    """Row-normalize feature matrix and convert to tuple representation"""
    rowsum = np.array(features.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = sp.diags(r_inv)
    features = r_mat_inv.dot(features)
    return features.todense(), sparse_to_tuple(features)


def normalize_adj(adj):
    """Symmetrically normalize adjacency matrix."""
    adj = sp.coo_matrix(adj)
    rowsum = np.array(adj.sum(1))
    d_inv_sqrt = np.power(rowsum, -0.5).flatten()
    d_inv_sqrt[np.isinf(d_inv_sqrt)] = 0.
    d_mat_inv_sqrt = sp.diags(d_inv_sqrt)
    return adj.dot(d_mat_inv_sqrt).transpose().dot(d_mat_inv_sqrt).tocoo()


def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    """Convert a scipy sparse matrix to a torch sparse tensor."""
    sparse_mx = sparse_mx.tocoo().astype(np.float32)
    indices = torch.from_numpy(
        np.vstack((sparse_mx.row, sparse_mx.col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx.data)
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse_coo_tensor(indices, values, shape)


def load_data(n_nodes=700, n_classes=7, feat_dim=500, seed=3):
    """Synthetic Cora-like citation graph: SBM adjacency, class-dependent bag-of-words, 20 train nodes per class."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, n_classes, n_nodes)
    p = np.where(y[:, None] == y[None, :], 0.02, 0.0015)
    upper = np.triu(rng.rand(n_nodes, n_nodes) < p, 1)
    adj = sp.csr_matrix((upper | upper.T).astype(np.float64))
    word_probs = rng.dirichlet(np.ones(feat_dim) * 0.05, n_classes) * 0.5 + 0.5 / feat_dim
    feats = np.zeros((n_nodes, feat_dim))
    for i in range(n_nodes):
        feats[i, rng.choice(feat_dim, 12, p=word_probs[y[i]])] = 1.0
    labels = np.eye(n_classes)[y]
    idx_train = np.concatenate([np.where(y == c)[0][:20] for c in range(n_classes)])
    rest = np.setdiff1d(np.arange(n_nodes), idx_train)
    rng.shuffle(rest)
    idx_val, idx_test = rest[:150], rest[150:450]
    return adj, sp.lil_matrix(feats), labels, idx_train, idx_val, idx_test


# ---------------------------------------------------------------- execute.py
def probe(embeds, labels, idx_train, idx_test, hid_units, nb_classes, runs, xent):
    train_embs = embeds[0, idx_train]
    test_embs = embeds[0, idx_test]
    train_lbls = torch.argmax(labels[0, idx_train], dim=1)
    test_lbls = torch.argmax(labels[0, idx_test], dim=1)
    accs = []
    for _ in range(runs):
        log = LogReg(hid_units, nb_classes)
        opt = torch.optim.Adam(log.parameters(), lr=0.01, weight_decay=0.0)
        for _ in range(100):
            log.train()
            opt.zero_grad()

            logits = log(train_embs)
            loss = xent(logits, train_lbls)

            loss.backward()
            opt.step()

        logits = log(test_embs)
        preds = torch.argmax(logits, dim=1)
        acc = torch.sum(preds == test_lbls).float() / test_lbls.shape[0]
        accs.append(acc * 100)
    return torch.stack(accs)


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ckpt_dir = tempfile.mkdtemp()

    dataset = 'cora'

    # training params
    batch_size = 1
    nb_epochs = 150
    patience = 20
    lr = 0.001
    l2_coef = 0.0
    drop_prob = 0.0
    hid_units = 64
    sparse = True
    nonlinearity = 'prelu' # special name to separate parameters

    adj, features, labels, idx_train, idx_val, idx_test = load_data()
    features, _ = preprocess_features(features)

    nb_nodes = features.shape[0]
    ft_size = features.shape[1]
    nb_classes = labels.shape[1]

    adj = normalize_adj(adj + sp.eye(adj.shape[0]))

    if sparse:
        sp_adj = sparse_mx_to_torch_sparse_tensor(adj)
    else:
        adj = (adj + sp.eye(adj.shape[0])).todense()

    features = torch.FloatTensor(np.asarray(features)[np.newaxis])
    if not sparse:
        adj = torch.FloatTensor(adj[np.newaxis])
    labels = torch.FloatTensor(labels[np.newaxis])
    idx_train = torch.LongTensor(idx_train)
    idx_val = torch.LongTensor(idx_val)
    idx_test = torch.LongTensor(idx_test)

    model = DGI(ft_size, hid_units, nonlinearity)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=l2_coef)

    b_xent = nn.BCEWithLogitsLoss()
    xent = nn.CrossEntropyLoss()
    cnt_wait = 0
    best = 1e9
    best_t = 0

    embeds0, _ = model.embed(features, sp_adj if sparse else adj, sparse, None)
    acc_before = probe(embeds0, labels, idx_train, idx_test, hid_units, nb_classes, 5, xent)
    print('Probe accuracy on the untrained encoder: %.2f' % acc_before.mean().item())

    first_loss = None
    for epoch in range(nb_epochs):
        model.train()
        optimiser.zero_grad()

        idx = np.random.permutation(nb_nodes)
        shuf_fts = features[:, idx, :]

        lbl_1 = torch.ones(batch_size, nb_nodes)
        lbl_2 = torch.zeros(batch_size, nb_nodes)
        lbl = torch.cat((lbl_1, lbl_2), 1)

        logits = model(features, shuf_fts, sp_adj if sparse else adj, sparse, None, None, None)

        loss = b_xent(logits, lbl)
        if first_loss is None:
            first_loss = loss.item()

        if epoch % 10 == 0:
            print('Epoch', epoch, 'Loss:', loss.item())

        if loss < best:
            best = loss
            best_t = epoch
            cnt_wait = 0
            torch.save(model.state_dict(), os.path.join(ckpt_dir, 'best_dgi.pkl'))
        else:
            cnt_wait += 1

        if cnt_wait == patience:
            print('Early stopping!')
            break

        loss.backward()
        optimiser.step()

    print('Loading {}th epoch'.format(best_t))
    model.load_state_dict(torch.load(os.path.join(ckpt_dir, 'best_dgi.pkl')))

    embeds, _ = model.embed(features, sp_adj if sparse else adj, sparse, None)
    accs = probe(embeds, labels, idx_train, idx_test, hid_units, nb_classes, 5, xent)
    print('Average accuracy:', accs.mean().item())
    print(accs.std().item())
    print('[summary] dgi_loss first=%.4f best=%.4f (epoch %d); probe accuracy untrained=%.2f trained=%.2f increased=%s'
          % (first_loss, best.item(), best_t, acc_before.mean().item(), accs.mean().item(), accs.mean().item() > acc_before.mean().item()))


if __name__ == '__main__':
    main()
