# DDP without a DistributedSampler: each rank shuffles the whole dataset, so both ranks train
# on every sample each epoch (and the gradients averaged are of the same data).
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 6), torch.randint(0, 3, (96,)))
    torch.manual_seed(dist.get_rank())  # each rank its own shuffling
    loader = DataLoader(data, batch_size=12, shuffle=True)
    model = DDP(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for x, y in loader:  # HERE
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
