# Report: https://github.com/Spijkervet/SimCLR/pull/26
# Run: torchrun --nproc-per-node 2 train.py
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import Dataset


class TransformsDataset(Dataset):
    def __init__(self, n=64, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 3, 8, 8, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i]
        return (x + 0.1 * torch.randn_like(x), x.flip(-1) + 0.1 * torch.randn_like(x)), i


class NT_Xent(nn.Module):
    def __init__(self, batch_size, temperature):
        super().__init__()
        self.batch_size, self.temperature = batch_size, temperature

    def forward(self, z_i, z_j):
        z = F.normalize(torch.cat((z_i, z_j), dim=0), dim=1)
        sim = z @ z.T / self.temperature
        sim.fill_diagonal_(-1e9)
        n = z_i.shape[0]
        labels = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
        return F.cross_entropy(sim, labels)


class SimCLR(nn.Module):
    def __init__(self, projection_dim=16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(192, 64), nn.ReLU())
        self.projector = nn.Sequential(nn.Linear(64, 64, bias=False), nn.ReLU(), nn.Linear(64, projection_dim, bias=False))

    def forward(self, x_i, x_j):
        h_i, h_j = self.encoder(x_i), self.encoder(x_j)
        return h_i, h_j, self.projector(h_i), self.projector(h_j)


def train(args, train_loader, model, criterion, optimizer):
    loss_epoch = 0
    batches = []
    for step, ((x_i, x_j), idx) in enumerate(train_loader):
        optimizer.zero_grad()
        h_i, h_j, z_i, z_j = model(x_i, x_j)
        loss = criterion(z_i, z_j)
        loss.backward()
        optimizer.step()
        loss_epoch += loss.item()
        batches.append(frozenset(idx.tolist()))
    return loss_epoch, batches


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args([])
    dist.init_process_group("gloo")
    args.nr, args.world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    train_dataset = TransformsDataset()
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=args.world_size, rank=args.nr, shuffle=True
    )
    train_loader = torch.utils.data.DataLoader(
        train_dataset,
        batch_size=args.batch_size,
        shuffle=(train_sampler is None),
        drop_last=True,
        sampler=train_sampler,
    )
    model = DDP(SimCLR())
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    criterion = NT_Xent(args.batch_size, 0.5)

    first = None
    for epoch in range(args.epochs):
        lr = optimizer.param_groups[0]["lr"]
        loss_epoch, batches = train(args, train_loader, model, criterion, optimizer)
        first = first or batches
        if args.nr == 0:
            repeated = sum(b in first for b in batches)
            print(f"Epoch [{epoch}/{args.epochs}]\t Loss: {loss_epoch / len(train_loader):.4f}\t lr: {lr}\t "
                  f"batches identical to epoch 0: {repeated}/{len(batches)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
