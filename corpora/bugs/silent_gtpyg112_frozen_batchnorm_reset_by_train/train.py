# Source: pgniewko/gt-pyg, gt_pyg/nn/model.py (GraphTransformerNet: forward, _get_component_modules, _set_requires_grad, freeze, unfreeze, get_frozen_status), commit b316fd0cda223f9bbcc517fb60a53b94489205b4
# Report: https://github.com/pgniewko/gt-pyg/issues/112
# Transfer learning with a graph transformer: the model is pretrained on one property,
# then the embeddings and encoder are frozen with model.freeze(...) and only the heads are
# fine-tuned on a second data set with a standard loop that calls model.train() every epoch.
# torch_geometric's GTConv / MultiAggregation and the molecular graphs are reduced to plain
# torch message passing (index_add over edges) on synthetic random graphs; norm="bn".
from typing import List

import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(1)

NODE_DIM, HIDDEN = 8, 32


def make_graphs(n_graphs, shift, scale, seed):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_graphs // 16):
        xs, eis, bidx, ys, off = [], [], [], [], 0
        for b in range(16):
            n = int(torch.randint(5, 12, (1,), generator=g))
            x = torch.randn(n, NODE_DIM, generator=g) * scale + shift
            src = torch.randint(0, n, (2 * n,), generator=g)
            dst = torch.randint(0, n, (2 * n,), generator=g)
            xs.append(x)
            eis.append(torch.stack([src, dst]) + off)
            bidx.append(torch.full((n,), b))
            ys.append(torch.tanh(x[:, :4].mean()) + 0.1 * x[:, 4:].pow(2).mean())
            off += n
        batches.append((torch.cat(xs), torch.cat(eis, 1), torch.cat(bidx), torch.stack(ys).unsqueeze(1)))
    return batches


class GTConv(nn.Module):
    def __init__(self, hidden_dim):
        super().__init__()
        self.lin_self = nn.Linear(hidden_dim, hidden_dim)
        self.lin_msg = nn.Linear(hidden_dim, hidden_dim)
        self.norm = nn.BatchNorm1d(hidden_dim)

    def forward(self, x, edge_index, edge_attr=None):
        msg = torch.zeros_like(x).index_add_(0, edge_index[1], self.lin_msg(x)[edge_index[0]])
        deg = torch.zeros(x.size(0)).index_add_(0, edge_index[1], torch.ones(edge_index.size(1))).clamp(min=1)
        h = x + F.gelu(self.lin_self(x) + msg / deg.unsqueeze(1))
        return self.norm(h), edge_attr


class MLP(nn.Module):
    def __init__(self, input_dim, output_dim, hidden_dims):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(input_dim, hidden_dims), nn.GELU(), nn.Linear(hidden_dims, output_dim))

    def forward(self, x):
        return self.net(x)


def global_pool(h, batch_index):
    n = int(batch_index.max()) + 1
    s = torch.zeros(n, h.size(1)).index_add_(0, batch_index, h)
    cnt = torch.zeros(n).index_add_(0, batch_index, torch.ones(h.size(0))).unsqueeze(1)
    return torch.cat([s, s / cnt], dim=1)


class GraphTransformerNet(nn.Module):
    def __init__(self, node_dim_in=NODE_DIM, hidden_dim=HIDDEN, num_gt_layers=2, num_tasks=1, dropout=0.1):
        super().__init__()
        self.node_emb = nn.Linear(node_dim_in, hidden_dim, bias=False)
        self.edge_emb = None
        self.input_norm = nn.BatchNorm1d(hidden_dim)
        self.input_dropout = nn.Dropout(p=dropout)
        self.gt_layers = nn.ModuleList([GTConv(hidden_dim) for _ in range(num_gt_layers)])
        self.global_pool = nn.Identity()
        head_in_dim = 2 * hidden_dim
        self.readout_norm = nn.BatchNorm1d(head_in_dim)
        self.readout_dropout = nn.Dropout(p=dropout)
        self.mu_mlp = MLP(head_in_dim, num_tasks, hidden_dim)
        self.log_var_mlp = MLP(head_in_dim, num_tasks, hidden_dim)

    def forward(self, x, edge_index, edge_attr, batch, zero_var=False, return_latent=False):
        h = self.node_emb(x)
        h = self.input_norm(h)
        h = self.input_dropout(h)
        e = None
        for gt_layer in self.gt_layers:
            h, e = gt_layer(x=h, edge_index=edge_index, edge_attr=e)
        g = global_pool(h, batch)
        latent = self.readout_norm(g)
        g = self.readout_dropout(latent)
        mu = self.mu_mlp(g)
        log_var = torch.clamp(self.log_var_mlp(g), min=-10.0, max=10.0)
        std = torch.exp(0.5 * log_var)
        if self.training and not zero_var:
            pred = mu + std * torch.randn_like(std)
        else:
            pred = mu
        if return_latent:
            return pred, log_var, h
        return pred, log_var

    def _get_component_modules(self, name: str) -> List[nn.Module]:
        embeddings = [self.node_emb] + ([self.edge_emb] if self.edge_emb else [])
        encoder = [self.input_norm, self.input_dropout] + list(self.gt_layers)
        heads = [self.readout_norm, self.readout_dropout, self.mu_mlp, self.log_var_mlp]
        pooling = [self.global_pool]
        components = {"embeddings": embeddings, "encoder": encoder, "gt_layers": list(self.gt_layers),
                      "heads": heads, "pooling": pooling, "all": embeddings + encoder + heads + pooling}
        return components[name]

    def _set_requires_grad(self, modules: List[nn.Module], requires_grad: bool) -> None:
        """Set requires_grad for all params in modules. Handles BatchNorm eval mode."""
        for module in modules:
            for param in module.parameters():
                param.requires_grad = requires_grad
            # Set BatchNorm to eval mode when freezing
            for m in module.modules():
                if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                    if requires_grad:
                        m.train()
                    else:
                        m.eval()

    def freeze(self, components=None, exclude=None):
        if components is None:
            components = ["all"]
        elif isinstance(components, str):
            components = [components]
        exclude = [] if exclude is None else ([exclude] if isinstance(exclude, str) else exclude)
        to_freeze = set()
        for comp in components:
            for m in self._get_component_modules(comp):
                to_freeze.add(m)
        for comp in exclude:
            for m in self._get_component_modules(comp):
                to_freeze.discard(m)
        self._set_requires_grad(list(to_freeze), requires_grad=False)
        return self

    def get_frozen_status(self):
        status = {}
        for name in ["embeddings", "encoder", "gt_layers", "heads"]:
            params = [p for m in self._get_component_modules(name) for p in m.parameters()]
            status[name] = all(not p.requires_grad for p in params) if params else None
        return status


def gaussian_nll(pred, log_var, y):
    return 0.5 * (log_var + (y - pred) ** 2 / log_var.exp()).mean()


def run_epochs(model, optimizer, batches, val_batches, epochs, tag):
    for epoch in range(epochs):
        model.train()
        for x, ei, b, y in batches:
            pred, log_var = model(x, ei, None, b, zero_var=True)
            loss = gaussian_nll(pred, log_var, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            mae = sum(float((model(x, ei, None, b)[0] - y).abs().mean()) for x, ei, b, y in val_batches) / len(val_batches)
        print(f"{tag} epoch {epoch}: val MAE {mae:.4f}")


def main():
    model = GraphTransformerNet()
    pretrain, pretrain_val = make_graphs(320, 0.0, 1.0, 0), make_graphs(64, 0.0, 1.0, 1)
    run_epochs(model, torch.optim.Adam(model.parameters(), lr=1e-3), pretrain, pretrain_val, 4, "pretrain")

    model.eval()
    probe = pretrain_val[0]
    with torch.no_grad():
        enc_ref = model(*probe[:2], None, probe[2], return_latent=True)[2].clone()
    stats_ref = {n: buf.clone() for n, buf in model.named_buffers() if "running_mean" in n}

    model.freeze(["embeddings", "encoder"])
    print("frozen status:", model.get_frozen_status())
    finetune, finetune_val = make_graphs(320, 1.5, 2.0, 2), make_graphs(64, 1.5, 2.0, 3)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    run_epochs(model, optimizer, finetune, finetune_val, 4, "finetune")

    model.eval()
    with torch.no_grad():
        enc_after = model(*probe[:2], None, probe[2], return_latent=True)[2]
    for n, buf in model.named_buffers():
        if n in stats_ref and not n.startswith("readout"):
            print(f"{n}: max |change| since freeze {float((buf - stats_ref[n]).abs().max()):.4f}")
    print(f"frozen encoder output on the pretraining probe: max |change| {float((enc_after - enc_ref).abs().max()):.4f}")
    print("frozen status:", model.get_frozen_status())


if __name__ == "__main__":
    main()
