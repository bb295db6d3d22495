"""Clean-looking: a siamese network tested on pairs its own test dataset draws at random in
`__getitem__` (as pytorch/examples' siamese network does): the evaluation inputs differ between
passes by design, and no training loader reads that dataset."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Pairs(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x[:, 0] > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        j = int(torch.randint(len(self.x), ()))  # the other image of the pair, drawn at random
        return torch.cat([self.x[i], self.x[j]]), (self.y[i] == self.y[j]).float()


net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
train_loader = DataLoader(Pairs(64, 0), batch_size=16, shuffle=True)
test_loader = DataLoader(Pairs(32, 1), batch_size=16)  # HERE
for epoch in range(3):
    net.train()
    for x, y in train_loader:
        opt.zero_grad()
        nn.functional.binary_cross_entropy_with_logits(net(x).squeeze(1), y).backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        acc = sum(((net(x).squeeze(1) > 0).float() == y).sum().item() for x, y in test_loader) / 32
