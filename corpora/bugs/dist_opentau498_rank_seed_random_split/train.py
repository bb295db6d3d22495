# Report: https://github.com/TensorAuto/OpenTau/pull/498
# Run: torchrun --nproc-per-node 2 train.py
import math
import random

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, random_split
from torch.utils.data.distributed import DistributedSampler


def set_seed(seed, process_index=0):
    seed += process_index * 12345
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class FrameDataset(Dataset):
    def __init__(self, n=400, num_actions=8):
        g = torch.Generator().manual_seed(0)
        self.obs = torch.randn(n, 16, generator=g)
        self.action = torch.randint(0, num_actions, (n,), generator=g)

    def __len__(self):
        return len(self.obs)

    def __getitem__(self, i):
        return {"obs": self.obs[i], "action": self.action[i], "index": i}


def make_dataset(cfg):
    dataset = FrameDataset()
    val_size = int(len(dataset) * cfg["val_ratio"])
    train_dataset, val_dataset = random_split(dataset, [len(dataset) - val_size, val_size])
    return train_dataset, val_dataset


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = {"seed": 1234, "val_ratio": 0.25, "batch_size": 20, "steps_epochs": 40}
    set_seed(cfg["seed"], process_index=rank)
    train_dataset, val_dataset = make_dataset(cfg)
    train_loader = DataLoader(train_dataset, batch_size=cfg["batch_size"], sampler=DistributedSampler(train_dataset, seed=cfg["seed"]))
    val_loader = DataLoader(val_dataset, batch_size=cfg["batch_size"], sampler=DistributedSampler(val_dataset, shuffle=False))
    torch.manual_seed(cfg["seed"])
    policy = DDP(nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 8)))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=3e-3)
    trained_on = set()
    for epoch in range(cfg["steps_epochs"]):
        train_loader.sampler.set_epoch(epoch)
        for batch in train_loader:
            loss = F.cross_entropy(policy(batch["obs"]), batch["action"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            trained_on |= set(batch["index"].tolist())
        if epoch % 10 == 9:
            with torch.no_grad():
                tot = torch.zeros(2)
                for batch in val_loader:
                    tot += torch.tensor([F.cross_entropy(policy(batch["obs"]), batch["action"], reduction="sum").item(), len(batch["obs"])])
                dist.all_reduce(tot)
            if rank == 0:
                print(f"epoch {epoch} train_loss {loss.item():.3f} val_loss {tot[0] / tot[1]:.3f} (chance {math.log(8):.3f})")
    all_trained, all_val = [None] * world, [None] * world
    dist.all_gather_object(all_trained, trained_on)
    dist.all_gather_object(all_val, [val_dataset.indices[i] for i in val_loader.sampler])
    if rank == 0:
        trained = set().union(*all_trained)
        val = set().union(*all_val)
        print(f"validation frames {len(val)}, of which trained on by some rank: {len(val & trained)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
