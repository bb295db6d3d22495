# Source: leffff/graphormer-pyg, graphormer/layers.py (CentralityEncoding, SpatialEncoding, EdgeEncoding, GraphormerAttentionHead, GraphormerMultiHeadAttention, GraphormerEncoderLayer), graphormer/model.py (Graphormer), graphormer/functional.py, commit b79304271330b3750490a8ba8380a839398f18be
# Report: https://github.com/leffff/graphormer-pyg/issues/14
# Graphormer on PyG mini-batches: the graphs of a batch are concatenated into one node set
# (ptr marks where each graph starts) and every attention head builds a mask of the per-graph
# blocks before the softmax. torch_geometric (Data / Batch, degree, to_networkx) is replaced
# by a small batch class, torch.bincount and a BFS written like floyd_warshall_source_to_all;
# the molecules by random graphs whose node target is the mean node feature of their graph.
import random

import torch
from torch import nn


class Batch:
    """The part of torch_geometric.data.Batch the model uses: x, edge_index, edge_attr, ptr."""
    def __init__(self, graphs):
        xs, eis, eas, ys, ptr, shift = [], [], [], [], [0], 0
        for g in graphs:
            xs.append(g["x"]); eas.append(g["edge_attr"]); ys.append(g["y"])
            eis.append(g["edge_index"] + shift)
            shift += g["x"].shape[0]
            ptr.append(shift)
        self.x, self.edge_attr, self.y = torch.cat(xs), torch.cat(eas), torch.cat(ys)
        self.edge_index = torch.cat(eis, dim=1)
        self.ptr = torch.tensor(ptr)
        self.graphs = graphs


def floyd_warshall_source_to_all(adj, edges, source):
    nextlevel = {source: 1}  # list of nodes to check at next level
    node_paths = {source: [source]}  # paths dictionary  (paths to key from source)
    edge_paths = {source: []}
    while nextlevel:
        thislevel = nextlevel
        nextlevel = {}
        for v in thislevel:
            for w in adj[v]:
                if w not in node_paths:
                    node_paths[w] = node_paths[v] + [w]
                    edge_paths[w] = edge_paths[v] + [edges[tuple(node_paths[w][-2:])]]
                    nextlevel[w] = 1
    return node_paths, edge_paths


def batched_shortest_path_distance(data):
    node_paths, edge_paths = {}, {}
    src, dst = data.edge_index.tolist()
    edges = {}
    adj = {n: [] for n in range(data.x.shape[0])}
    for i, (s, d) in enumerate(zip(src, dst)):
        edges[(s, d)] = i
        adj[s].append(d)
    for n in adj:
        node_paths[n], edge_paths[n] = floyd_warshall_source_to_all(adj, edges, n)
    return node_paths, edge_paths


class CentralityEncoding(nn.Module):
    def __init__(self, max_in_degree: int, max_out_degree: int, node_dim: int):
        super().__init__()
        self.max_in_degree = max_in_degree
        self.max_out_degree = max_out_degree
        self.node_dim = node_dim
        self.z_in = nn.Parameter(torch.randn((max_in_degree, node_dim)))
        self.z_out = nn.Parameter(torch.randn((max_out_degree, node_dim)))

    def forward(self, x: torch.Tensor, edge_index: torch.LongTensor) -> torch.Tensor:
        num_nodes = x.shape[0]
        x = x + self.z_in[torch.bincount(edge_index[1], minlength=num_nodes)] + \
            self.z_out[torch.bincount(edge_index[0], minlength=num_nodes)]
        return x


class SpatialEncoding(nn.Module):
    def __init__(self, max_path_distance: int):
        super().__init__()
        self.max_path_distance = max_path_distance
        self.b = nn.Parameter(torch.randn(self.max_path_distance))

    def forward(self, x: torch.Tensor, paths) -> torch.Tensor:
        spatial_matrix = torch.zeros((x.shape[0], x.shape[0])).to(next(self.parameters()).device)
        for src in paths:
            for dst in paths[src]:
                spatial_matrix[src][dst] = self.b[min(len(paths[src][dst]), self.max_path_distance) - 1]
        return spatial_matrix


class EdgeEncoding(nn.Module):
    def __init__(self, edge_dim: int, max_path_distance: int):
        super().__init__()
        self.edge_dim = edge_dim
        self.max_path_distance = max_path_distance
        self.edge_vector = nn.Parameter(torch.randn(self.max_path_distance, self.edge_dim))

    def dot_product(self, x1, x2) -> torch.Tensor:
        return (x1 * x2).sum(dim=1)

    def forward(self, x: torch.Tensor, edge_attr: torch.Tensor, edge_paths) -> torch.Tensor:
        cij = torch.zeros((x.shape[0], x.shape[0])).to(next(self.parameters()).device)
        for src in edge_paths:
            for dst in edge_paths[src]:
                path_ij = edge_paths[src][dst][:self.max_path_distance]
                weight_inds = [i for i in range(len(path_ij))]
                cij[src][dst] = self.dot_product(self.edge_vector[weight_inds], edge_attr[path_ij]).mean()
        cij = torch.nan_to_num(cij)
        return cij


class GraphormerAttentionHead(nn.Module):
    def __init__(self, dim_in: int, dim_q: int, dim_k: int, edge_dim: int, max_path_distance: int):
        super().__init__()
        self.edge_encoding = EdgeEncoding(edge_dim, max_path_distance)

        self.q = nn.Linear(dim_in, dim_q)
        self.k = nn.Linear(dim_in, dim_k)
        self.v = nn.Linear(dim_in, dim_k)

    def forward(self,
                query: torch.Tensor,
                key: torch.Tensor,
                value: torch.Tensor,
                edge_attr: torch.Tensor,
                b: torch.Tensor,
                edge_paths,
                ptr) -> torch.Tensor:
        batch_mask = torch.zeros((query.shape[0], query.shape[0])).to(next(self.parameters()).device)
        # OPTIMIZE: get rid of slices: rewrite to torch
        if type(ptr) == type(None):
            batch_mask += 1
        else:
            for i in range(len(ptr) - 1):
                batch_mask[ptr[i]:ptr[i + 1], ptr[i]:ptr[i + 1]] = 1

        query = self.q(query)
        key = self.k(key)
        value = self.v(value)

        c = self.edge_encoding(query, edge_attr, edge_paths)
        a = query.mm(key.transpose(0, 1)) / query.size(-1) ** 0.5
        a = (a + b + c) * batch_mask
        softmax = torch.softmax(a, dim=-1)
        x = softmax.mm(value)
        return x


class GraphormerMultiHeadAttention(nn.Module):
    def __init__(self, num_heads: int, dim_in: int, dim_q: int, dim_k: int, edge_dim: int, max_path_distance: int):
        super().__init__()
        self.heads = nn.ModuleList(
            [GraphormerAttentionHead(dim_in, dim_q, dim_k, edge_dim, max_path_distance) for _ in range(num_heads)]
        )
        self.linear = nn.Linear(num_heads * dim_k, dim_in)

    def forward(self, x, edge_attr, b, edge_paths, ptr) -> torch.Tensor:
        return self.linear(
            torch.cat([
                attention_head(x, x, x, edge_attr, b, edge_paths, ptr) for attention_head in self.heads
            ], dim=-1)
        )


class GraphormerEncoderLayer(nn.Module):
    def __init__(self, node_dim, edge_dim, n_heads, max_path_distance):
        super().__init__()
        self.node_dim = node_dim
        self.edge_dim = edge_dim
        self.n_heads = n_heads
        self.attention = GraphormerMultiHeadAttention(
            dim_in=node_dim,
            dim_k=node_dim,
            dim_q=node_dim,
            num_heads=n_heads,
            edge_dim=edge_dim,
            max_path_distance=max_path_distance,
        )
        self.ln_1 = nn.LayerNorm(node_dim)
        self.ln_2 = nn.LayerNorm(node_dim)
        self.ff = nn.Linear(node_dim, node_dim)

    def forward(self, x, edge_attr, b, edge_paths, ptr):
        x_prime = self.attention(self.ln_1(x), edge_attr, b, edge_paths, ptr) + x
        x_new = self.ff(self.ln_2(x_prime)) + x_prime
        return x_new


class Graphormer(nn.Module):
    def __init__(self, num_layers, input_node_dim, node_dim, input_edge_dim, edge_dim, output_dim, n_heads,
                 max_in_degree, max_out_degree, max_path_distance):
        super().__init__()
        self.node_in_lin = nn.Linear(input_node_dim, node_dim)
        self.edge_in_lin = nn.Linear(input_edge_dim, edge_dim)
        self.centrality_encoding = CentralityEncoding(max_in_degree=max_in_degree, max_out_degree=max_out_degree,
                                                      node_dim=node_dim)
        self.spatial_encoding = SpatialEncoding(max_path_distance=max_path_distance)
        self.layers = nn.ModuleList([
            GraphormerEncoderLayer(node_dim=node_dim, edge_dim=edge_dim, n_heads=n_heads,
                                   max_path_distance=max_path_distance) for _ in range(num_layers)
        ])
        self.node_out_lin = nn.Linear(node_dim, output_dim)

    def forward(self, data) -> torch.Tensor:
        x = data.x.float()
        edge_index = data.edge_index.long()
        edge_attr = data.edge_attr.float()
        ptr = data.ptr
        node_paths, edge_paths = batched_shortest_path_distance(data)

        x = self.node_in_lin(x)
        edge_attr = self.edge_in_lin(edge_attr)

        x = self.centrality_encoding(x, edge_index)
        b = self.spatial_encoding(x, node_paths)

        for layer in self.layers:
            x = layer(x, edge_attr, b, edge_paths, ptr)

        x = self.node_out_lin(x)
        return x


def random_graph(rng):
    n = rng.randint(4, 7)
    edges = set()
    for i in range(1, n):
        j = rng.randrange(i)
        edges |= {(i, j), (j, i)}
    feat = torch.tensor([[rng.random() * 4 - 2] for _ in range(n)])
    edge_index = torch.tensor(sorted(edges)).t()
    edge_attr = torch.ones(edge_index.shape[1], 1)
    y = feat.mean().repeat(n, 1)
    return {"x": feat, "edge_index": edge_index, "edge_attr": edge_attr, "y": y}


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = random.Random(0)
    train_graphs = [random_graph(rng) for _ in range(160)]
    test_graphs = [random_graph(rng) for _ in range(40)]
    model = Graphormer(num_layers=2, input_node_dim=1, node_dim=16, input_edge_dim=1, edge_dim=8, output_dim=1,
                       n_heads=1, max_in_degree=8, max_out_degree=8, max_path_distance=5)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_function = nn.L1Loss(reduction="sum")
    for epoch in range(4):
        model.train()
        batch_loss = 0.0
        rng.shuffle(train_graphs)
        for i in range(0, len(train_graphs), 8):
            batch = Batch(train_graphs[i:i + 8])
            y = batch.y
            optimizer.zero_grad()
            output = model(batch)
            loss = loss_function(output, y)
            batch_loss += loss.item()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        model.eval()
        with torch.no_grad():
            eval_loss = sum(loss_function(model(Batch(test_graphs[i:i + 8])), Batch(test_graphs[i:i + 8]).y).item()
                            for i in range(0, len(test_graphs), 8))
            alone = model(Batch(test_graphs[:1]))
            batched = model(Batch(test_graphs[:8]))[:alone.shape[0]]
        n_train = sum(g["x"].shape[0] for g in train_graphs)
        n_test = sum(g["x"].shape[0] for g in test_graphs)
        print(f"epoch {epoch}: TRAIN_LOSS {batch_loss / n_train:.4f} EVAL LOSS {eval_loss / n_test:.4f}  "
              f"graph 0 alone vs in a batch of 8: max |diff| {(alone - batched).abs().max().item():.4f}")


if __name__ == "__main__":
    main()
