"""A validation Subset of the training dataset, whose transform flips and jitters at random."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, random_split


class Images(Dataset):
    def __init__(self, n=120, augment=None):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 1, 6, 6, generator=g)
        self.y = (self.x.mean((1, 2, 3)) > 0).long()
        self.augment = augment

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        img = self.x[i]
        if self.augment is not None:
            img = self.augment(img)
        return img, self.y[i]


def augment(img):
    if torch.rand(()) < 0.5:
        img = img.flip(-1)
    return img + 0.05 * torch.randn_like(img)


full = Images(augment=augment)
train_part, val_part = random_split(full, [90, 30], generator=torch.Generator().manual_seed(1))
train_loader = DataLoader(train_part, batch_size=16, shuffle=True)
val_loader = DataLoader(val_part, batch_size=16)  # HERE
model = nn.Sequential(nn.Flatten(), nn.Linear(36, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    model.train()
    for x, y in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        err = sum((model(x).argmax(1) != y).sum().item() for x, y in val_loader) / len(val_part)
