# Source: lucidrains/DALLE-pytorch, train_dalle.py (distributed data sampler and epoch loop), before PR #230
# Report: https://github.com/lucidrains/DALLE-pytorch/pull/230
# Run: torchrun --nproc-per-node 2 train.py
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

EPOCHS = 4
BATCH_SIZE = 8
LEARNING_RATE = 3e-4


class TextImageDataset(Dataset):
    def __init__(self, n=64, text_len=8, image_len=4, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.text = torch.randint(1, 64, (n, text_len), generator=g)
        self.image = (self.text[:, :image_len] * 7) % 32

    def __len__(self):
        return len(self.text)

    def __getitem__(self, ind):
        return self.text[ind], self.image[ind], ind


class TinyDALLE(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.text_emb = nn.Embedding(64, dim)
        self.net = nn.Sequential(nn.Linear(8 * dim, 128), nn.ReLU(), nn.Linear(128, 4 * 32))

    def forward(self, text, image, return_loss=True):
        logits = self.net(self.text_emb(text).flatten(1)).view(-1, 4, 32)
        return F.cross_entropy(logits.permute(0, 2, 1), image)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    ds = TextImageDataset()
    data_sampler = torch.utils.data.distributed.DistributedSampler(ds, num_replicas=dist.get_world_size(), rank=rank)
    dl = DataLoader(ds, BATCH_SIZE, shuffle=not data_sampler, drop_last=True, sampler=data_sampler)
    dalle = DDP(TinyDALLE())
    opt = torch.optim.Adam(dalle.parameters(), lr=LEARNING_RATE)
    orders = []
    for epoch in range(EPOCHS):
        seen = []
        for i, (text, images, ind) in enumerate(dl):
            loss = dalle(text, images, return_loss=True)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += ind.tolist()
        orders.append(seen)
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f} rank0 sample order {seen[:8]}")
    if rank == 0:
        same = sum(orders[e] == orders[0] for e in range(1, EPOCHS))
        print(f"{same} of {EPOCHS - 1} later epochs visited the samples in exactly the order of epoch 0")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
