# Source: lucidrains/graph-transformer-pytorch, graph_transformer_pytorch/graph_transformer_pytorch.py (Attention, GraphTransformer, GatedResidual, PreNorm), commit a1f7f238a0fdb23ae7df1d5866023e09a8e6185e
# Report: https://github.com/lucidrains/graph-transformer-pytorch/pull/2
# Graph Transformer (edge-conditioned multi-head attention with gated residuals) trained for
# node classification on batches of padded graphs: node features, dense edge features and a
# node mask for the padding. einops is not installed here, so each rearrange of the original
# is written with the equivalent view / permute / unsqueeze; rotary embeddings are off
# (rel_pos_emb=False, the default). Graphs are synthetic two-community graphs.
import time

import numpy as np
import torch
from torch import nn, einsum

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

# helpers


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


List = nn.ModuleList

# normalizations


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, *args, **kwargs):
        x = self.norm(x)
        return self.fn(x, *args, **kwargs)

# gated residual


class GatedResidual(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Sequential(
            nn.Linear(dim * 3, 1, bias=False),
            nn.Sigmoid()
        )

    def forward(self, x, res):
        gate_input = torch.cat((x, res, x - res), dim=-1)
        gate = self.proj(gate_input)
        return x * gate + res * (1 - gate)

# attention


def split_heads(t, h):
    # rearrange(t, 'b ... (h d) -> (b h) ... d', h = h)
    b, *mid, hd = t.shape
    t = t.reshape(b, *mid, h, hd // h)
    t = t.movedim(-2, 1)
    return t.reshape(b * h, *mid, hd // h)


class Attention(nn.Module):
    def __init__(self, dim, pos_emb=None, dim_head=64, heads=8, edge_dim=None):
        super().__init__()
        edge_dim = default(edge_dim, dim)

        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim_head ** -0.5

        self.pos_emb = pos_emb

        self.to_q = nn.Linear(dim, inner_dim)
        self.to_kv = nn.Linear(dim, inner_dim * 2)
        self.edges_to_kv = nn.Linear(edge_dim, inner_dim)

        self.to_out = nn.Linear(inner_dim, dim)

    def forward(self, nodes, edges, mask=None):
        h = self.heads

        q = self.to_q(nodes)
        k, v = self.to_kv(nodes).chunk(2, dim=-1)

        e_kv = self.edges_to_kv(edges)

        q, k, v, e_kv = map(lambda t: split_heads(t, h), (q, k, v, e_kv))

        ek, ev = e_kv, e_kv

        k, v = map(lambda t: t.unsqueeze(1), (k, v))
        k = k + ek
        v = v + ev

        sim = einsum('b i d, b i j d -> b i j', q, k) * self.scale

        if exists(mask):
            mask = mask.unsqueeze(2) & mask.unsqueeze(1)
            max_neg_value = -torch.finfo(sim.dtype).max
            sim.masked_fill_(~mask, max_neg_value)

        attn = sim.softmax(dim=-1)
        out = einsum('b i j, b i j d -> b i d', attn, v)
        bh, n, d = out.shape
        out = out.reshape(bh // h, h, n, d).permute(0, 2, 1, 3).reshape(bh // h, n, h * d)
        return self.to_out(out)

# optional feedforward


def FeedForward(dim, ff_mult=4):
    return nn.Sequential(
        nn.Linear(dim, dim * ff_mult),
        nn.GELU(),
        nn.Linear(dim * ff_mult, dim)
    )

# classes


class GraphTransformer(nn.Module):
    def __init__(self, dim, depth, dim_head=64, edge_dim=None, heads=8, gated_residual=True,
                 with_feedforwards=False, norm_edges=False, rel_pos_emb=False):
        super().__init__()
        self.layers = List([])
        edge_dim = default(edge_dim, dim)
        self.norm_edges = nn.LayerNorm(edge_dim) if norm_edges else nn.Identity()

        pos_emb = None

        for _ in range(depth):
            self.layers.append(List([
                List([
                    PreNorm(dim, Attention(dim, pos_emb=pos_emb, edge_dim=edge_dim, dim_head=dim_head, heads=heads)),
                    GatedResidual(dim)
                ]),
                List([
                    PreNorm(dim, FeedForward(dim)),
                    GatedResidual(dim)
                ]) if with_feedforwards else None
            ]))

    def forward(self, nodes, edges, mask=None):
        edges = self.norm_edges(edges)

        for attn_block, ff_block in self.layers:
            attn, attn_residual = attn_block
            nodes = attn_residual(attn(nodes, edges, mask=mask), nodes)

            if exists(ff_block):
                ff, ff_residual = ff_block
                nodes = ff_residual(ff(nodes), nodes)

        return nodes, edges


def make_graphs(n_graphs, max_nodes, rng):
    """Two-community graphs; a node's class is its community, seen only through the edges
    (half of the nodes carry a noisy hint of their community in their features)."""
    nodes = np.zeros((n_graphs, max_nodes, 16), np.float32)
    edges = np.zeros((n_graphs, max_nodes, max_nodes, 8), np.float32)
    mask = np.zeros((n_graphs, max_nodes), bool)
    labels = np.zeros((n_graphs, max_nodes), np.int64)
    for g in range(n_graphs):
        n = int(rng.integers(max_nodes // 2, max_nodes + 1))
        comm = rng.integers(0, 2, size=n)
        same = comm[:, None] == comm[None, :]
        adj = rng.random((n, n)) < np.where(same, 0.6, 0.08)
        adj = np.triu(adj, 1)
        adj = adj | adj.T
        nodes[g, :n] = rng.normal(0, 1, size=(n, 16))
        hint = rng.random(n) < 0.5
        nodes[g, :n, 0] += np.where(hint, (2 * comm - 1) * 1.5, 0.0)
        edges[g, :n, :n, 0] = adj
        edges[g, :n, :n, 1] = np.eye(n)
        mask[g, :n] = True
        labels[g, :n] = comm
    return (torch.from_numpy(nodes), torch.from_numpy(edges), torch.from_numpy(mask), torch.from_numpy(labels))


class NodeClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.edge_embed = nn.Linear(8, 16)
        self.model = GraphTransformer(dim=32, depth=2, edge_dim=16, dim_head=8, heads=4, with_feedforwards=True)
        self.head = nn.Linear(32, 2)

    def forward(self, nodes, edges, mask):
        nodes, _ = self.model(self.embed(nodes), self.edge_embed(edges), mask=mask)
        return self.head(nodes)


if __name__ == '__main__':
    rng = np.random.default_rng(0)
    train = make_graphs(384, 12, rng)
    test = make_graphs(128, 12, rng)
    net = NodeClassifier()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    batch_size = 16
    start = time.time()
    for epoch in range(5):
        net.train()
        perm = torch.randperm(384)
        total, count = 0.0, 0
        for i in range(0, 384, batch_size):
            idx = perm[i:i + batch_size]
            nodes, edges, mask, labels = (t[idx] for t in train)
            logits = net(nodes, edges, mask)
            loss = nn.functional.cross_entropy(logits[mask], labels[mask])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
            count += 1
        net.eval()
        with torch.no_grad():
            nodes, edges, mask, labels = test
            pred = net(nodes, edges, mask).argmax(-1)
            acc = (pred[mask] == labels[mask]).float().mean().item()
        print('epoch %d train loss %.4f test node accuracy %.4f (%.1fs)' % (epoch, total / count, acc, time.time() - start))
