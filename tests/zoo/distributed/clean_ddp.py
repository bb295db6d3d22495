# A correct DDP loop: DistributedSampler, gradient accumulation with no_sync(), a metric
# all-reduced each epoch, rank-0 checkpointing between barriers. Nothing to report.
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(out_dir):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 6), torch.randint(0, 3, (64,)))
    sampler = DistributedSampler(data, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    accum = 2
    for epoch in range(2):
        sampler.set_epoch(epoch)
        model.train()
        total = torch.zeros(())
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % accum == 0
            if last:
                loss = F.cross_entropy(model(x), y) / accum
                loss.backward()
                opt.step()
                opt.zero_grad()
            else:
                with model.no_sync():
                    loss = F.cross_entropy(model(x), y) / accum
                    loss.backward()
            total += loss.detach()
        dist.all_reduce(total)
        if rank == 0:
            torch.save(model.module.state_dict(), os.path.join(out_dir, f"ckpt-{epoch}.pt"))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
