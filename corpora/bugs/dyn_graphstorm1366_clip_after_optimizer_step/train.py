# Source: awslabs/graphstorm, python/graphstorm/trainer/np_trainer.py (GSgnnNodePredictionTrainer.fit, eval), commit 01e6c578f2e5046b2cbbfd4692e9f985229a8ea5
# Report: https://github.com/awslabs/graphstorm/issues/1366 (fix proposed in https://github.com/awslabs/graphstorm/pull/1382)
# GraphStorm node-classification trainer: mini-batches of seed nodes, a GNN encoder and a
# decoder, optimizer.zero_grad / backward / step, and --max-grad-norm gradient clipping;
# validation every epoch. DistDGL, the block sampler and the rt_profiler are reduced to a
# 2-layer mean-aggregation GNN on a synthetic graph in plain torch (full neighbourhoods);
# the features have a few large-magnitude columns, so gradients are large early on.
import time

import torch as th
from torch import nn
import torch.nn.functional as F

th.manual_seed(0)
th.set_num_threads(1)

N_NODES, FEAT, N_CLASS = 600, 16, 4


def make_graph():
    g = th.Generator().manual_seed(0)
    labels = th.randint(0, N_CLASS, (N_NODES,), generator=g)
    centers = th.randn(N_CLASS, FEAT, generator=g)
    feats = centers[labels] + 1.5 * th.randn(N_NODES, FEAT, generator=g)
    feats[:, :3] *= 40.0
    src, dst = [], []
    for v in range(N_NODES):
        same = (labels == labels[v]).nonzero().flatten()
        nbrs = same[th.randint(0, len(same), (4,), generator=g)].tolist() + th.randint(0, N_NODES, (2,), generator=g).tolist()
        src += nbrs
        dst += [v] * len(nbrs)
    perm = th.randperm(N_NODES, generator=g)
    return feats, th.tensor([src, dst]), labels, perm[:400], perm[400:500], perm[500:]


class SAGELayer(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin_self = nn.Linear(in_dim, out_dim)
        self.lin_neigh = nn.Linear(in_dim, out_dim)

    def forward(self, h, edge_index):
        agg = th.zeros_like(h).index_add_(0, edge_index[1], h[edge_index[0]])
        deg = th.zeros(h.size(0)).index_add_(0, edge_index[1], th.ones(edge_index.size(1))).clamp(min=1)
        return self.lin_self(h) + self.lin_neigh(agg / deg.unsqueeze(1))


class GSgnnNodeModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.gnn = nn.ModuleList([SAGELayer(FEAT, 64), SAGELayer(64, 64)])
        self.decoder = nn.Linear(64, N_CLASS)

    def predict(self, feats, edge_index):
        h = feats
        for i, layer in enumerate(self.gnn):
            h = layer(h, edge_index)
            if i < len(self.gnn) - 1:
                h = F.relu(h)
        return self.decoder(h)

    def forward(self, blocks, input_feats, edge_feats, lbl, seeds):
        logits = self.predict(input_feats, blocks)[seeds]
        return F.cross_entropy(logits, lbl)


class GSgnnNodePredictionTrainer:
    def __init__(self, model, lr):
        self._model = model
        self.optimizer = th.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    def fit(self, data, num_epochs, max_grad_norm=None):
        feats, edge_index, labels, train_idx, val_idx, test_idx = data
        model = self._model
        total_steps = 0
        for epoch in range(num_epochs):
            model.train()
            epoch_start = time.time()
            step_norms, losses = [], []
            perm = train_idx[th.randperm(len(train_idx))]
            for i in range(0, len(perm), 32):
                seeds = perm[i:i + 32]
                total_steps += 1
                input_feats = feats
                lbl = labels[seeds]
                blocks = edge_index

                loss = model(blocks, input_feats, None, lbl, seeds)

                self.optimizer.zero_grad()
                loss.backward()
                step_norms.append(float(th.norm(th.stack([p.grad.norm() for p in model.parameters()]))))
                self.optimizer.step()

                if max_grad_norm is not None:
                    th.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
                losses.append(loss.item())

            val_acc, test_acc = self.eval(model, data)
            print("Epoch {} | loss {:.4f} | grad norm at optimizer.step: max {:.2f} mean {:.2f} (max_grad_norm {}) | val acc {:.4f} test acc {:.4f}".format(
                epoch, sum(losses) / len(losses), max(step_norms), sum(step_norms) / len(step_norms), max_grad_norm, val_acc, test_acc))

    def eval(self, model, data):
        feats, edge_index, labels, train_idx, val_idx, test_idx = data
        model.eval()
        with th.no_grad():
            pred = model.predict(feats, edge_index).argmax(1)
        model.train()
        return (pred[val_idx] == labels[val_idx]).float().mean().item(), (pred[test_idx] == labels[test_idx]).float().mean().item()


def main():
    data = make_graph()
    trainer = GSgnnNodePredictionTrainer(GSgnnNodeModel(), lr=0.01)
    trainer.fit(data, num_epochs=8, max_grad_norm=1.0)


if __name__ == "__main__":
    main()
