# Source: VGraphRNN/VGRNN, VGRNN_prediction.py (GCNConv, graph_gru_gcn, VGRNN, get_roc_scores, training loop), commit 352da1b63fe6ea1db18c7d512793a21e0d9a5bbb
# Report: https://github.com/VGraphRNN/VGRNN/issues/4
# VGRNN link prediction: a variational graph recurrent network (GCN encoder, GRU over GCN gates,
# inner-product decoder, learned prior from the recurrent state) is trained on the first snapshots
# of a dynamic graph with KL + weighted Bernoulli NLL, Adam(lr=1e-2) and clip_grad_norm(clip=10);
# the prior means of the held-out last snapshots score their links (AUC / AP). The DBLP/Enron
# pickles are replaced by a synthetic dynamic graph of 48 nodes in 3 drifting communities; the
# torch_scatter message passing by a dense normalized adjacency with the same "improved" self loops.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Parameter

seed = 123
np.random.seed(seed)
torch.manual_seed(seed)
torch.set_num_threads(1)


def glorot(tensor):
    stdv = np.sqrt(6.0 / (tensor.size(-2) + tensor.size(-1)))
    tensor.data.uniform_(-stdv, stdv)


def norm_adj(edge_index, n):
    a = torch.zeros(n, n)
    a[edge_index[0], edge_index[1]] = 1.0
    a = a + 2.0 * torch.eye(n)
    d = a.sum(1).pow(-0.5)
    return d[:, None] * a * d[None, :]


class GCNConv(nn.Module):
    def __init__(self, in_channels, out_channels, act=F.relu, improved=True, bias=False):
        super(GCNConv, self).__init__()
        self.act = act
        self.weight = Parameter(torch.Tensor(in_channels, out_channels))
        self.bias = Parameter(torch.zeros(out_channels)) if bias else None
        glorot(self.weight)

    def forward(self, x, edge_index):
        out = norm_adj(edge_index, x.size(0)) @ (x @ self.weight)
        if self.bias is not None:
            out = out + self.bias
        return self.act(out)


class graph_gru_gcn(nn.Module):
    def __init__(self, input_size, hidden_size, n_layer, bias=True):
        super(graph_gru_gcn, self).__init__()
        ident = lambda x: x
        self.weight_xz = GCNConv(input_size, hidden_size, act=ident, bias=bias)
        self.weight_hz = GCNConv(hidden_size, hidden_size, act=ident, bias=bias)
        self.weight_xr = GCNConv(input_size, hidden_size, act=ident, bias=bias)
        self.weight_hr = GCNConv(hidden_size, hidden_size, act=ident, bias=bias)
        self.weight_xh = GCNConv(input_size, hidden_size, act=ident, bias=bias)
        self.weight_hh = GCNConv(hidden_size, hidden_size, act=ident, bias=bias)

    def forward(self, inp, edgidx, h):
        z_g = torch.sigmoid(self.weight_xz(inp, edgidx) + self.weight_hz(h[0], edgidx))
        r_g = torch.sigmoid(self.weight_xr(inp, edgidx) + self.weight_hr(h[0], edgidx))
        h_tilde_g = torch.tanh(self.weight_xh(inp, edgidx) + self.weight_hh(r_g * h[0], edgidx))
        h_out = (z_g * h[0] + (1 - z_g) * h_tilde_g).unsqueeze(0)
        return h_out, h_out


class VGRNN(nn.Module):
    def __init__(self, x_dim, h_dim, z_dim, n_layers, eps, bias=False):
        super(VGRNN, self).__init__()
        self.eps = eps
        self.h_dim = h_dim
        self.n_layers = n_layers
        self.phi_x = nn.Sequential(nn.Linear(x_dim, h_dim), nn.ReLU())
        self.phi_z = nn.Sequential(nn.Linear(z_dim, h_dim), nn.ReLU())
        self.enc = GCNConv(h_dim + h_dim, h_dim)
        self.enc_mean = GCNConv(h_dim, z_dim, act=lambda x: x)
        self.enc_std = GCNConv(h_dim, z_dim, act=F.softplus)
        self.prior = nn.Sequential(nn.Linear(h_dim, h_dim), nn.ReLU())
        self.prior_mean = nn.Sequential(nn.Linear(h_dim, z_dim))
        self.prior_std = nn.Sequential(nn.Linear(h_dim, z_dim), nn.Softplus())
        self.rnn = graph_gru_gcn(h_dim + h_dim, h_dim, n_layers, bias)

    def forward(self, x, edge_idx_list, adj_orig_dense_list, hidden_in=None):
        kld_loss = 0
        nll_loss = 0
        all_enc_mean, all_prior_mean = [], []
        h = torch.zeros(self.n_layers, x.size(1), self.h_dim) if hidden_in is None else hidden_in
        for t in range(x.size(0)):
            phi_x_t = self.phi_x(x[t])
            enc_t = self.enc(torch.cat([phi_x_t, h[-1]], 1), edge_idx_list[t])
            enc_mean_t = self.enc_mean(enc_t, edge_idx_list[t])
            enc_std_t = self.enc_std(enc_t, edge_idx_list[t])
            prior_t = self.prior(h[-1])
            prior_mean_t = self.prior_mean(prior_t)
            prior_std_t = self.prior_std(prior_t)
            z_t = self._reparameterized_sample(enc_mean_t, enc_std_t)
            phi_z_t = self.phi_z(z_t)
            dec_t = z_t @ z_t.t()
            _, h = self.rnn(torch.cat([phi_x_t, phi_z_t], 1), edge_idx_list[t], h)
            kld_loss += self._kld_gauss(enc_mean_t, enc_std_t, prior_mean_t, prior_std_t)
            nll_loss += self._nll_bernoulli(dec_t, adj_orig_dense_list[t])
            all_enc_mean.append(enc_mean_t)
            all_prior_mean.append(prior_mean_t)
        return kld_loss, nll_loss, all_enc_mean, all_prior_mean, h

    def _reparameterized_sample(self, mean, std):
        eps1 = torch.FloatTensor(std.size()).normal_()
        return eps1.mul(std).add_(mean)

    def _kld_gauss(self, mean_1, std_1, mean_2, std_2):
        num_nodes = mean_1.size()[0]
        kld_element = (2 * torch.log(std_2 + self.eps) - 2 * torch.log(std_1 + self.eps) +
                       (torch.pow(std_1 + self.eps, 2) + torch.pow(mean_1 - mean_2, 2)) /
                       torch.pow(std_2 + self.eps, 2) - 1)
        return (0.5 / num_nodes) * torch.mean(torch.sum(kld_element, dim=1), dim=0)

    def _nll_bernoulli(self, logits, target_adj_dense):
        temp_size = target_adj_dense.size()[0]
        temp_sum = target_adj_dense.sum()
        posw = float(temp_size * temp_size - temp_sum) / temp_sum
        norm = temp_size * temp_size / float((temp_size * temp_size - temp_sum) * 2)
        nll_loss_mat = F.binary_cross_entropy_with_logits(input=logits, target=target_adj_dense,
                                                          pos_weight=posw, reduction='none')
        nll_loss = -1 * norm * torch.mean(nll_loss_mat, dim=[0, 1])
        return - nll_loss


def auc_ap(labels, scores):
    order = np.argsort(-scores)
    labels = labels[order]
    tp = np.cumsum(labels)
    ap = np.sum((tp / np.arange(1, len(labels) + 1)) * labels) / labels.sum()
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores)] = np.arange(1, len(scores) + 1)
    npos = labels.sum()
    auc = (ranks[labels.astype(bool)[np.argsort(order)]].sum() - npos * (npos + 1) / 2) / (npos * (len(scores) - npos))
    return auc, ap


def get_roc_scores(edges_pos, edges_neg, embs):
    auc_scores, ap_scores = [], []
    for i in range(len(edges_pos)):
        emb = embs[i].detach().numpy()
        adj_rec = 1 / (1 + np.exp(-emb @ emb.T))
        preds = np.array([adj_rec[e[0], e[1]] for e in edges_pos[i]] + [adj_rec[e[0], e[1]] for e in edges_neg[i]])
        labels = np.hstack([np.ones(len(edges_pos[i])), np.zeros(len(edges_neg[i]))])
        auc, ap = auc_ap(labels, preds)
        auc_scores.append(auc)
        ap_scores.append(ap)
    return auc_scores, ap_scores


def make_dynamic_graph(num_nodes=48, seq_len=8, rng=np.random.RandomState(0)):
    comm = rng.randint(0, 3, size=num_nodes)
    adjs = []
    for t in range(seq_len):
        move = rng.rand(num_nodes) < 0.05
        comm[move] = rng.randint(0, 3, size=move.sum())
        same = comm[:, None] == comm[None, :]
        p = np.where(same, 0.35, 0.02)
        a = np.triu(rng.rand(num_nodes, num_nodes) < p, 1)
        a = (a | a.T).astype(np.float32)
        adjs.append(a)
    return adjs


def main():
    adjs = make_dynamic_graph()
    seq_len = len(adjs)
    num_nodes = adjs[0].shape[0]
    adj_orig_dense_list = [torch.tensor(a) for a in adjs]
    edge_idx_list = [torch.tensor(np.array(np.nonzero(a)), dtype=torch.long) for a in adjs]
    pos_edges_l, false_edges_l = [], []
    rng_e = np.random.RandomState(1)
    for a in adjs:
        pos = np.array(np.nonzero(np.triu(a, 1))).T
        neg = []
        while len(neg) < len(pos):
            i, j = rng_e.randint(0, num_nodes, 2)
            if i < j and a[i, j] == 0:
                neg.append((i, j))
        pos_edges_l.append(pos)
        false_edges_l.append(np.array(neg))

    # hyperparameters
    h_dim = 32
    z_dim = 16
    n_layers = 1
    clip = 0.5
    learning_rate = 1e-2
    x_dim = num_nodes
    eps = 1e-10

    x_in = torch.stack([torch.eye(num_nodes) for _ in range(seq_len)])

    model = VGRNN(x_dim, h_dim, z_dim, n_layers, eps, bias=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)

    seq_start = 0
    seq_end = seq_len - 2
    grad_norms = []
    for k in range(120):
        optimizer.zero_grad()
        kld_loss, nll_loss, _, _, hidden_st = model(x_in[seq_start:seq_end],
                                                    edge_idx_list[seq_start:seq_end],
                                                    adj_orig_dense_list[seq_start:seq_end])
        loss = kld_loss + nll_loss
        loss.backward()
        optimizer.step()

        grad_norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), clip)))

        if k % 20 == 19:
            with torch.no_grad():
                _, _, enc_means, pri_means, _ = model(x_in[seq_end:seq_len], edge_idx_list[seq_end:seq_len],
                                                      adj_orig_dense_list[seq_end:seq_len], hidden_st)
            auc_scores_prd, ap_scores_prd = get_roc_scores(pos_edges_l[seq_end:seq_len],
                                                           false_edges_l[seq_end:seq_len], pri_means)
            print(f"epoch {k}: kld_loss {kld_loss.item():.4f} nll_loss {nll_loss.item():.4f} loss {loss.item():.4f} "
                  f"grad norm max {max(grad_norms[-20:]):.1f} (>{clip} in {sum(g > clip for g in grad_norms[-20:])}/20)  "
                  f"link_prd_auc_mean {np.mean(auc_scores_prd):.4f} link_prd_ap_mean {np.mean(ap_scores_prd):.4f}")


if __name__ == "__main__":
    main()
