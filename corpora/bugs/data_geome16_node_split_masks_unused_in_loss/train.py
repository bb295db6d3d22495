# Source: theislab/geome, models/linear_ncem.py (LinearNCEM), models/modules/linear_model.py (LinearSpatial), data/node_datamodule.py (NodeDataModule), commit 54e46e0ec89512eb0ff084fe5f3f81e22c0ec621
# Report: https://github.com/theislab/geome/issues/16
# Linear node-centric expression model (NCEM) on a spatial cell graph: the expression of each
# cell (y, 10 genes) is modelled from its own features and its neighbours' features, with a
# Gaussian NLL on (mu, sigma) and Adam with weight decay. The anndata -> torch_geometric
# conversion and RandomNodeSplit are written out with torch (dense adjacency of the k nearest
# cells, random 60/20/20 node masks); the Lightning loop is written out as a plain loop
# (training_step / validation_step / test_step kept). A second tissue section, never seen in
# training, is scored at the end. 300 cells, 100 features per cell; 300 epochs.
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from sklearn.metrics import r2_score


class Data:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class LinearSpatial(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin_self = nn.Linear(in_channels, out_channels)
        self.lin_neigh = nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x, adj):
        deg = adj.sum(1, keepdim=True).clamp(min=1)
        return self.lin_self(x) + self.lin_neigh(adj @ x / deg)


class LinearNCEM(nn.Module):
    def __init__(self, use_node_scale=False, **model_kwargs):
        super().__init__()
        self.hparams = model_kwargs
        self.use_node_scale = use_node_scale
        self.model_sigma = LinearSpatial(self.hparams["in_channels"], self.hparams["out_channels"])
        self.model_mu = LinearSpatial(self.hparams["in_channels"], self.hparams["out_channels"])
        self.loss_module = nn.GaussianNLLLoss(eps=1e-5)
        self.logged = {}

    def log(self, name, value):
        self.logged[name] = float(value.detach()) if torch.is_tensor(value) else float(value)

    def forward(self, data):
        x, adj = data.x.float(), data.adj
        mu = self.model_mu(x, adj)
        sigma = torch.exp(self.model_sigma(x, adj))
        if self.use_node_scale:
            sf = torch.unsqueeze(data.sf, 1)
            mu = sf * mu
            sigma = sf * sigma
        return mu, sigma

    def configure_optimizers(self):
        return optim.Adam(self.parameters(), lr=self.hparams["lr"], weight_decay=self.hparams["weight_decay"])

    def training_step(self, batch, _):
        mu, sigma = self.forward(batch)
        loss = self.loss_module(mu, batch.y, sigma)
        self.log('train_loss', loss)
        return loss

    def validation_step(self, batch, _):
        mu, sigma = self.forward(batch)
        val_loss = self.loss_module(mu, batch.y, sigma)
        val_r2_score = r2_score(batch.y.detach(), mu.detach())
        self.log('val_r2_score', val_r2_score)
        self.log('val_loss', val_loss)

    def test_step(self, batch, _):
        mu, sigma = self.forward(batch)
        test_loss = self.loss_module(mu, batch.y, sigma)
        test_r2_score = r2_score(batch.y.detach(), mu.detach())
        self.log('test_r2_score', test_r2_score)
        self.log('test_loss', test_loss)


def make_section(rng, n_cells, n_types, n_feat, w_self, w_neigh, k=6):
    pos = rng.uniform(0, 1, size=(n_cells, 2))
    types = rng.randint(n_types, size=n_cells)
    d = ((pos[:, None] - pos[None]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    nn_idx = np.argsort(d, axis=1)[:, :k]
    adj = np.zeros((n_cells, n_cells), np.float32)
    adj[np.repeat(np.arange(n_cells), k), nn_idx.ravel()] = 1.0
    adj = np.maximum(adj, adj.T)
    onehot = np.eye(n_types, dtype=np.float32)[types]
    morph = rng.normal(size=(n_cells, n_feat - n_types)).astype(np.float32)
    x = np.concatenate([onehot, morph], 1)
    neigh = adj @ onehot / adj.sum(1, keepdims=True)
    y = onehot @ w_self + neigh @ w_neigh + rng.normal(0, 0.6, size=(n_cells, w_self.shape[1]))
    return Data(x=torch.from_numpy(x), adj=torch.from_numpy(adj), y=torch.from_numpy(y.astype(np.float32)),
                sf=torch.ones(n_cells))


def random_node_split(data, rng, num_val=0.2, num_test=0.2):
    n = data.x.shape[0]
    perm = rng.permutation(n)
    n_val, n_test = int(num_val * n), int(num_test * n)
    masks = {k: torch.zeros(n, dtype=torch.bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["val_mask"][perm[:n_val]] = True
    masks["test_mask"][perm[n_val:n_val + n_test]] = True
    masks["train_mask"][perm[n_val + n_test:]] = True
    data.__dict__.update(masks)
    return data


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    n_types, n_feat, n_genes = 8, 100, 10
    w_self = rng.normal(0, 1.5, size=(n_types, n_genes))
    w_neigh = rng.normal(0, 1.5, size=(n_types, n_genes))
    data = random_node_split(make_section(rng, 300, n_types, n_feat, w_self, w_neigh), rng)
    new_section = make_section(rng, 300, n_types, n_feat, w_self, w_neigh)
    print("nodes: train {} val {} test {}".format(int(data.train_mask.sum()), int(data.val_mask.sum()),
                                                  int(data.test_mask.sum())))

    model = LinearNCEM(use_node_scale=True, in_channels=n_feat, out_channels=n_genes, lr=0.01, weight_decay=2e-3)
    optimizer = model.configure_optimizers()
    for epoch in range(300):
        model.train()
        loss = model.training_step(data, 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if epoch % 50 == 49:
            model.eval()
            with torch.no_grad():
                model.validation_step(data, 0)
            print("epoch {:3d} train_loss {:.4f} val_loss {:.4f} val_r2_score {:.4f}".format(
                epoch + 1, model.logged['train_loss'], model.logged['val_loss'], model.logged['val_r2_score']))
    model.eval()
    with torch.no_grad():
        model.test_step(data, 0)
        mu, _ = model(new_section)
    print("test_r2_score {:.4f} | r2 on an unseen tissue section {:.4f}".format(
        model.logged['test_r2_score'], r2_score(new_section.y, mu)))


if __name__ == "__main__":
    main()
