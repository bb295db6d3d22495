# Validation sharded by DistributedSampler over 2 ranks: 21 samples are padded to 22 (sample 0
# twice), and the per-sample hits of both ranks are gathered and averaged together.
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    train = TensorDataset(torch.randn(96, 6), torch.randint(0, 3, (96,)))
    val = TensorDataset(torch.randn(21, 6), torch.randint(0, 3, (21,)))
    train_sampler = DistributedSampler(train, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=12, sampler=train_sampler)
    val_loader = DataLoader(val, batch_size=4, sampler=DistributedSampler(val, shuffle=False))  # HERE
    model = DDP(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        train_sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    hits = []
    with torch.no_grad():
        for x, y in val_loader:
            hits += (model(x).argmax(1) == y).tolist()
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, hits)
    merged = [h for part in gathered for h in part]
    print(f"accuracy {sum(merged) / len(merged):.3f} over {len(merged)} samples")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
