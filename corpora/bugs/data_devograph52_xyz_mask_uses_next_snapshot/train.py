# Source: DevoLearn/DevoGraph, NDP-HNN/train.py (train_model), NDP-HNN/model.py (HyperSAGEConv, DynGrowingHNN), NDP-HNN/losses.py (incidence_bce), NDP-HNN/snapshots.py, NDP-HNN/hyperedges.py, commit 8e7fba3b95a233c229c90249533bb5821a09fcbc
# Report: https://github.com/DevoLearn/DevoGraph/pull/52
# NDP-HNN: a dynamic hypergraph network over C. elegans embryo snapshots. At every time step t the
# cells born so far form spatial (kNN) and lineage (sibling) hyperedges; a HyperSAGE conv per
# hyperedge type, a GRU cell over time and a linear readout predict each cell's xyz, trained with
# MSE on the cells of the snapshot plus an incidence-reconstruction BCE. The embryo is a synthetic
# lineage tree (one founder cell dividing every 1-2 steps); torch_geometric's Data, sklearn's
# NearestNeighbors and networkx's lineage graph are replaced by plain tensors and dicts.
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(42)
np.random.seed(42)
torch.set_num_threads(1)


class Data:
    def __init__(self, x, edge_index, edge_attr, t):
        self.x, self.edge_index, self.edge_attr, self.t = x, edge_index, edge_attr, t
        self.num_nodes = x.size(0)

    def to(self, device):
        return self


def make_embryo(T_max=9, max_cells=96):
    rng = np.random.RandomState(0)
    pos = {"P0": np.zeros(3)}
    birth_times = {"P0": 0}
    children = {}
    queue = [("P0", 0)]
    while queue and len(pos) < max_cells:
        name, t0 = queue.pop(0)
        td = t0 + rng.randint(1, 3)
        if td > T_max:
            continue
        kids = [name + "a", name + "p"]
        children[name] = kids
        axis = rng.randn(3)
        axis /= np.linalg.norm(axis)
        for s, k in zip((1.0, -1.0), kids):
            pos[k] = pos[name] + s * 6.0 * axis + rng.randn(3)
            birth_times[k] = td
            queue.append((k, td))
    cells = sorted(pos, key=lambda c: (birth_times[c], c))
    idx = {c: i for i, c in enumerate(cells)}
    xyz = np.stack([pos[c] for c in cells]) / 10.0
    bt = np.array([birth_times[c] for c in cells], dtype=np.float64)[:, None] / T_max
    birth_feat = np.concatenate([xyz, bt], axis=1).astype(np.float32)
    return {"cells": cells, "idx": idx, "T_max": T_max, "birth_feat": birth_feat,
            "birth_times": birth_times, "children": children}


def make_hyperedges_alive(t, cells, idx, children, birth_feat, birth_times, k=5):
    alive = [c for c in cells if c in birth_times and birth_times[c] <= t]
    alive_idx = [idx[c] for c in alive]
    spatial = []
    if len(alive_idx) >= 2:
        X = torch.tensor(birth_feat[alive_idx, :3])
        knn = torch.cdist(X, X).topk(min(k + 1, len(alive_idx)), largest=False).indices
        for row in knn.tolist():
            he = tuple(sorted({alive_idx[i] for i in row}))
            if len(he) > 1:
                spatial.append(he)
    lineage = []
    for p in alive:
        kids = [ch for ch in children.get(p, []) if ch in birth_times and birth_times[ch] <= t]
        if len(kids) > 1:
            lineage.append(tuple(sorted(idx[k] for k in kids)))
    he2type, all_incidence = {}, []
    for he in spatial:
        he2type[he] = 'spatial'; all_incidence.append(he)
    for he in lineage:
        he2type[he] = 'lineage'; all_incidence.append(he)
    seen = set(); unique = []
    for he in all_incidence:
        if he not in seen:
            unique.append(he); seen.add(he)
    return alive_idx, unique, he2type


def build_snapshots(dataset, k):
    cells = dataset['cells']; birth_feat = dataset['birth_feat']
    snapshots = []
    for t in range(int(dataset['T_max']) + 1):
        alive_idx, H, he2type = make_hyperedges_alive(
            t, cells, dataset['idx'], dataset['children'], birth_feat, dataset['birth_times'], k=k)
        rows, cols = [], []
        for e_id, nodes in enumerate(H):
            rows.extend(nodes)
            cols.extend([e_id] * len(nodes))
        if len(rows) == 0:
            edge_index = torch.empty((2, 0), dtype=torch.long)
            e_types = torch.empty((0,), dtype=torch.long)
        else:
            edge_index = torch.tensor([rows, cols], dtype=torch.long)
            he_type_list = [0 if he2type[tuple(sorted(H[e]))] == 'spatial' else 1 for e in range(len(H))]
            e_types = torch.tensor([he_type_list[c] for c in cols], dtype=torch.long)
        snapshots.append(Data(x=torch.tensor(birth_feat, dtype=torch.float32), edge_index=edge_index,
                              edge_attr=e_types, t=torch.tensor([t] * len(cells), dtype=torch.long)))
    return snapshots


class HyperSAGEConv(nn.Module):
    def __init__(self, in_dim, out_dim, aggr_node='mean', aggr_edge='mean', dropout=0.0, bias=True):
        super().__init__()
        self.aggr_node, self.aggr_edge = aggr_node, aggr_edge
        self.lin_v = nn.Linear(in_dim, out_dim, bias=False)
        self.lin_e = nn.Linear(out_dim, out_dim, bias=False)
        self.lin_update = nn.Linear(2 * out_dim, out_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _reduce(self, x, index, K, how):
        if K == 0 or x.numel() == 0:
            return x.new_zeros((K, x.size(-1)))
        out = x.new_zeros((K, x.size(-1)))
        out.scatter_reduce_(0, index.view(-1, 1).expand_as(x), x, reduce='sum', include_self=True)
        cnt = x.new_zeros((K, 1))
        ones = torch.ones((x.size(0), 1), device=x.device, dtype=x.dtype)
        cnt.scatter_reduce_(0, index.view(-1, 1), ones, reduce='sum', include_self=True)
        cnt = cnt.clamp_min(1.0)
        return out / cnt

    def forward(self, x, edge_index):
        row, col = edge_index
        row = row.to(torch.long).contiguous()
        col = col.to(torch.long).contiguous()
        x_proj = self.lin_v(x)
        N = x_proj.size(0)
        if edge_index.numel() == 0:
            n_agg = x_proj.new_zeros((N, x_proj.size(-1)))
            out = torch.cat([x_proj, n_agg], dim=-1)
            out = torch.relu(self.lin_update(out))
            return self.dropout(out)
        col_min = int(col.min().item())
        col = col - col_min
        M = int(col.max().item()) + 1
        e_feat = self._reduce(x_proj[row], col, M, self.aggr_node)
        e_proj = self.lin_e(e_feat)
        n_agg = self._reduce(e_proj[col], row, N, self.aggr_edge)
        out = torch.cat([x_proj, n_agg], dim=-1)
        out = torch.relu(self.lin_update(out))
        return self.dropout(out)


class DynGrowingHNN(nn.Module):
    def __init__(self, in_dim=4, hid_dim=64, out_dim=64, num_edge_types=2):
        super().__init__()
        self.hconvs = nn.ModuleList([HyperSAGEConv(in_dim, hid_dim) for _ in range(num_edge_types)])
        self.lin_mix = nn.Linear(num_edge_types * hid_dim, hid_dim)
        self.rnn = nn.GRUCell(hid_dim, hid_dim)
        self.readout = nn.Linear(hid_dim, out_dim)

    def forward(self, data, state_prev=None):
        outs = []
        for etype, conv in enumerate(self.hconvs):
            mask = (data.edge_attr == etype).nonzero(as_tuple=True)[0]
            ei = data.edge_index[:, mask] if mask.numel() > 0 else data.edge_index[:, :0]
            outs.append(conv(data.x, ei))
        h = torch.relu(self.lin_mix(torch.cat(outs, dim=1)))
        h_next = self.rnn(h, state_prev) if state_prev is not None else self.rnn(h)
        out = self.readout(h_next)[:, :3]
        return h_next, out, None


def incidence_bce(node_emb, data, device=None):
    dev = device or node_emb.device
    if data.edge_index.numel() == 0:
        return torch.tensor(0.0, device=dev)
    row = data.edge_index[0].to(torch.long)
    col = data.edge_index[1].to(torch.long)
    N = data.num_nodes
    E = int(col.max().item()) + 1
    targets = torch.zeros(N, E, device=dev)
    targets[row, col] = 1.0
    D = node_emb.size(1)
    he_emb = torch.zeros(E, D, device=dev)
    he_emb.index_add_(0, col, node_emb[row])
    cnt = torch.bincount(col, minlength=E).float().clamp_min(1.0).unsqueeze(1)
    he_emb = he_emb / cnt
    logits = node_emb @ he_emb.T
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)


def train_model(model, snapshots, dataset, epochs=30, lr=1e-3, device="cpu"):
    birth_feat = dataset['birth_feat']
    birth_times = dataset['birth_times']
    cells = dataset['cells']
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for epoch in range(1, epochs + 1):
        state = None
        total_loss = 0.0
        n_sup = 0
        for data in snapshots:
            data = data.to(device)
            state, pred_xyz, inc_logits = model(data, state)
            t = int(data.t[0].item())
            mask_next = torch.tensor(
                [birth_times[c] <= (t + 1) for c in cells],
                dtype=torch.bool, device=device
            )
            target_xyz = torch.tensor(birth_feat[:, :3], device=device)[mask_next]
            loss_xyz = torch.nn.functional.mse_loss(pred_xyz[mask_next], target_xyz)
            h = state[0] if isinstance(state, tuple) else state
            loss_rec = incidence_bce(h, data, device=device)
            loss = loss_xyz + loss_rec
            opt.zero_grad()
            loss.backward()
            opt.step()
            if isinstance(state, tuple):
                state = (state[0].detach(), state[1].detach())
            else:
                state = state.detach()
            total_loss += float(loss.item())
            n_sup += int(mask_next.sum())
        if epoch % 10 == 0 or epoch == 1:
            print(f"Epoch {epoch:03d} - avg loss: {total_loss/len(snapshots):.4f}  supervised rows {n_sup}")
    return model


@torch.no_grad()
def evaluate(model, snapshots, dataset):
    model.eval()
    bt = np.array([dataset['birth_times'][c] for c in dataset['cells']])
    target = torch.tensor(dataset['birth_feat'][:, :3])
    state, errs, n_alive = None, [], 0
    for data in snapshots:
        state, pred_xyz, _ = model(data, state)
        t = int(data.t[0].item())
        alive = torch.tensor(bt <= t)
        errs.append(((pred_xyz[alive] - target[alive]) ** 2).sum().item())
        n_alive += int(alive.sum())
    return sum(errs) / (3 * n_alive)


def main():
    dataset = make_embryo()
    snaps = build_snapshots(dataset, k=5)
    print(f"Built {len(snaps)} snapshots (time 0..{dataset['T_max']}), {len(dataset['cells'])} cells")
    model = DynGrowingHNN(in_dim=4, hid_dim=32, out_dim=32, num_edge_types=2)
    model = train_model(model, snaps, dataset, epochs=60, lr=1e-3)
    print(f"xyz MSE over the cells alive in each snapshot: {evaluate(model, snaps, dataset):.5f}")


if __name__ == "__main__":
    main()
