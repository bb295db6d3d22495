# Report: https://github.com/PatrickHua/SimSiam/issues/16
# Run: torchrun --nproc-per-node 2 train.py
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class RandomDataset(Dataset):
    def __init__(self, n=96, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randn(n, 3, 8, 8, generator=g)

    def __getitem__(self, idx):
        x = self.images[idx]
        x1 = x + 0.1 * torch.randn_like(x)
        x2 = x.flip(-1) + 0.1 * torch.randn_like(x)
        return (x1, x2), idx

    def __len__(self):
        return len(self.images)


def D(p, z):
    return -F.cosine_similarity(p, z.detach(), dim=-1).mean()


class SimSiam(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.backbone = nn.Sequential(nn.Flatten(), nn.Linear(192, 64), nn.ReLU())
        self.projector = nn.Sequential(nn.Linear(64, dim), nn.BatchNorm1d(dim))
        self.predictor = nn.Sequential(nn.Linear(dim, 16), nn.ReLU(), nn.Linear(16, dim))

    def forward(self, x1, x2):
        f, h = nn.Sequential(self.backbone, self.projector), self.predictor
        z1, z2 = f(x1), f(x2)
        p1, p2 = h(z1), h(z2)
        return {'loss': D(p1, z2) / 2 + D(p2, z1) / 2}


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    dataset = RandomDataset()
    train_loader = DataLoader(
        dataset=dataset,
        batch_size=16,
        shuffle=True,
        drop_last=True,
    )
    model = DDP(SimSiam())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(3):
        seen = []
        for idx, ((images1, images2), labels) in enumerate(train_loader):
            model.zero_grad()
            data_dict = model.forward(images1, images2)
            loss = data_dict['loss'].mean()
            loss.backward()
            optimizer.step()
            seen += labels.tolist()
        gathered = [None] * world
        dist.all_gather_object(gathered, seen)
        if rank == 0:
            both = len(set(gathered[0]) & set(gathered[1]))
            same_order = gathered[0] == gathered[1]
            print(f"epoch {epoch} loss {loss.item():.4f} steps/rank {idx + 1} "
                  f"samples on both ranks {both}/{len(dataset)} identical order {same_order}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
