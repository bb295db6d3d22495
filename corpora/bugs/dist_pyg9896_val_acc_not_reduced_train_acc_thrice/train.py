# Source: pyg-team/pytorch_geometric, examples/multi_gpu/distributed_sampling.py, commit 5ea6aec8827eabf2a7569d32780ebf3510ba0f6e
# Report: https://github.com/pyg-team/pytorch_geometric/pull/9896
# Run: torchrun --nproc-per-node 2 train.py
# PyG's DistributedDataParallel GraphSAGE example: each rank trains on its chunk of the training
# nodes and evaluates on its chunk of the train/val/test nodes, and the accuracies are reduced
# across ranks. Reddit is replaced by a synthetic homophilous graph of 1,200 nodes and 4 classes,
# NeighborLoader by a loader that puts each batch's seed nodes first in the full graph (no
# sampling), SAGEConv by a plain-torch mean-aggregation SAGEConv; nccl/cuda by gloo/cpu.
import os
from math import ceil

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel


class SAGEConv(torch.nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.lin_l = torch.nn.Linear(in_channels, out_channels)
        self.lin_r = torch.nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        src, dst = edge_index
        agg = torch.zeros_like(x).index_add_(0, dst, x[src])
        deg = torch.zeros(x.size(0)).index_add_(0, dst, torch.ones(dst.numel())).clamp(min=1)
        return self.lin_l(agg / deg.unsqueeze(-1)) + self.lin_r(x)


class SAGE(torch.nn.Module):
    def __init__(self, in_channels: int, hidden_channels: int,
                 out_channels: int, num_layers: int = 2):
        super().__init__()

        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        for _ in range(num_layers - 2):
            self.convs.append(SAGEConv(hidden_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=0.5, training=self.training)
        return x


class Data:
    def __init__(self, num_nodes=1200, num_features=16, num_classes=4, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, num_classes, (num_nodes,), generator=g)
        centers = torch.randn(num_classes, num_features, generator=g)
        self.x = 0.3 * centers[self.y] + torch.randn(num_nodes, num_features, generator=g)
        src = torch.randint(0, num_nodes, (8 * num_nodes,), generator=g)
        same = self.y.unsqueeze(0) == self.y.unsqueeze(1)
        dst = torch.stack([torch.multinomial(same[s].float() * 0.5 + 0.5 / num_nodes * (~same[s]).float().sum(), 1, generator=g)[0]
                           for s in src.tolist()])
        self.edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)
        perm = torch.randperm(num_nodes, generator=g)
        self.train_mask = torch.zeros(num_nodes, dtype=torch.bool)
        self.val_mask = torch.zeros(num_nodes, dtype=torch.bool)
        self.test_mask = torch.zeros(num_nodes, dtype=torch.bool)
        self.train_mask[perm[:600]] = True
        self.val_mask[perm[600:900]] = True
        self.test_mask[perm[900:]] = True
        self.num_features, self.num_classes = num_features, num_classes


class Batch:
    def __init__(self, data, seeds):
        rest = torch.ones(data.y.numel(), dtype=torch.bool)
        rest[seeds] = False
        n_id = torch.cat([seeds, rest.nonzero().view(-1)])
        inv = torch.empty_like(n_id)
        inv[n_id] = torch.arange(n_id.numel())
        self.x, self.y, self.edge_index = data.x[n_id], data.y[n_id], inv[data.edge_index]
        self.batch_size = seeds.numel()


class NeighborLoader:
    def __init__(self, data, input_nodes, batch_size, shuffle=False, drop_last=True):
        self.data, self.input_nodes, self.batch_size = data, input_nodes, batch_size
        self.shuffle, self.drop_last = shuffle, drop_last

    def __iter__(self):
        idx = self.input_nodes[torch.randperm(self.input_nodes.numel())] if self.shuffle else self.input_nodes
        n = idx.numel() // self.batch_size * self.batch_size if self.drop_last else idx.numel()
        for i in range(0, n, self.batch_size):
            yield Batch(self.data, idx[i:i + self.batch_size])


@torch.no_grad()
def test(loader, model, rank):
    model.eval()

    total_correct = total_examples = 0
    for i, batch in enumerate(loader):
        out = model(batch.x, batch.edge_index)
        pred = out[:batch.batch_size].argmax(dim=-1)
        y = batch.y[:batch.batch_size]
        total_correct += int((pred == y).sum())
        total_examples += batch.batch_size
    return torch.tensor(total_correct / total_examples)


def run(rank, world_size, data):
    # Split indices into `world_size` many chunks:
    train_idx = data.train_mask.nonzero(as_tuple=False).view(-1)
    train_idx = train_idx.split(ceil(train_idx.size(0) / world_size))[rank]
    val_idx = data.val_mask.nonzero(as_tuple=False).view(-1)
    val_idx = val_idx.split(ceil(val_idx.size(0) / world_size))[rank]
    test_idx = data.test_mask.nonzero(as_tuple=False).view(-1)
    test_idx = test_idx.split(ceil(test_idx.size(0) / world_size))[rank]

    kwargs = dict(
        data=data,
        batch_size=50,
        drop_last=True,
    )
    train_loader = NeighborLoader(
        input_nodes=train_idx,
        shuffle=True,
        **kwargs,
    )
    val_loader = NeighborLoader(
        input_nodes=val_idx,
        shuffle=False,
        **kwargs,
    )
    test_loader = NeighborLoader(
        input_nodes=test_idx,
        shuffle=False,
        **kwargs,
    )

    torch.manual_seed(12345)
    model = SAGE(data.num_features, 64, data.num_classes)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    for epoch in range(1, 11):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()

        dist.barrier()

        if rank == 0:
            print(f'Epoch: {epoch:02d}, Loss: {loss:.4f}')

        if epoch % 5 == 0:
            train_acc = test(train_loader, model, rank)
            val_acc = test(val_loader, model, rank)
            test_acc = test(test_loader, model, rank)
            print(f'  rank {rank} local accuracies: train {train_acc:.4f} val {val_acc:.4f} test {test_acc:.4f}')

            if world_size > 1:
                dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
                dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
                dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
                train_acc /= world_size
                val_acc /= world_size
                test_acc /= world_size

            dist.barrier()
            if rank == 0:
                print(f'Train: {train_acc:.4f}, Val: {val_acc:.4f}, '
                      f'Test: {test_acc:.4f}')

        dist.barrier()


def main():
    dist.init_process_group('gloo')
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data = Data()
    run(rank, world_size, data)
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
