"""A token stream's validation part cut per rank by hand (two gloo ranks), evaluated in windows
whose start shifts from one evaluation to the next (an iterator that keeps its offset): "bug"
logs rank 0's part only; "reduced" all-reduces the loss sums and counts."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

mode = sys.argv[1]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
stream = torch.randint(0, 20, (4000,))
train, valid = stream[:3000], stream[3000:]


class Windows:
    def __init__(self, data, bsz, bptt):
        n = data.size(0) // bsz
        self.data = data[:n * bsz].view(bsz, -1).t().contiguous()  # (time, streams)
        self.bptt, self.offset = bptt, 0

    def __iter__(self):
        self.offset %= self.data.size(0) - 1
        for i in range(self.offset, self.data.size(0) - 1, self.bptt):
            self.offset = i + self.bptt
            n = min(self.bptt, self.data.size(0) - 1 - i)
            yield self.data[i:i + n], self.data[i + 1:i + 1 + n]


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(20, 16), nn.Linear(16, 20)

    def forward(self, x):
        return self.out(torch.tanh(self.emb(x)))


part = len(valid) // world
va = Windows(valid[rank * part:(rank + 1) * part], 8, 10)
tr = Windows(train[rank::world], 8, 10)
model = DistributedDataParallel(LM())
opt = torch.optim.Adam(model.parameters(), lr=0.01)
best = None
for epoch in range(3):
    model.train()
    for x, y in tr:
        opt.zero_grad(); F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward(); opt.step()
    model.eval()
    total = torch.zeros(2)
    with torch.no_grad():
        for x, y in va:
            logits = model(x)  # HERE
            total += torch.tensor([float(F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum")),
                                   float(y.numel())])
    if mode == "reduced":
        dist.all_reduce(total)
    val_loss = float(total[0] / total[1])
    if rank == 0:
        print(f"epoch {epoch} val loss {val_loss:.3f}")
    if best is None or val_loss < best:
        best = val_loss
dist.destroy_process_group()
