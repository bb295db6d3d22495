"""Clean: the validation split reads the same rows through a dataset without augmentation, and a
masked-token evaluation masks its token ids at random on purpose (integer inputs)."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, Subset


class Images(Dataset):
    def __init__(self, augment=None, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(120, 1, 6, 6, generator=g)
        self.y = (self.x.mean((1, 2, 3)) > 0).long()
        self.augment = augment

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        img = self.x[i]
        return (self.augment(img) if self.augment else img), self.y[i]


class MaskedTokens(Dataset):
    def __init__(self):
        self.ids = torch.randint(2, 20, (40, 8), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        ids = self.ids[i].clone()
        ids[torch.rand(8) < 0.15] = 1
        return ids, self.ids[i]


perm = torch.randperm(120, generator=torch.Generator().manual_seed(1)).tolist()
train_set = Subset(Images(augment=lambda im: im + 0.05 * torch.randn_like(im)), perm[:90])
val_set = Subset(Images(), perm[90:])
model = nn.Sequential(nn.Flatten(), nn.Linear(36, 2))
lm = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 20)).requires_grad_(False)  # a pretrained scorer
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in DataLoader(train_set, batch_size=16, shuffle=True):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        for x, y in DataLoader(val_set, batch_size=16):
            (model(x).argmax(1) == y).float().mean()
        for ids, labels in DataLoader(MaskedTokens(), batch_size=8):
            nn.functional.cross_entropy(lm(ids).flatten(0, 1), labels.flatten())
# a train-accuracy pass over the augmented training loader measures the training set on purpose
aug = Images(augment=lambda im: im + 0.05 * torch.randn_like(im), seed=7)
aug_loader = DataLoader(aug, batch_size=30, shuffle=True)
for epoch in range(2):
    for x, y in aug_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        train_acc = sum((model(x).argmax(1) == y).sum().item() for x, y in aug_loader) / len(aug)


# few-shot evaluation: a batch sampler of the user's draws classes; each index names a class
# whose support images are drawn at random on purpose
class Episodes:
    def __init__(self, n_classes, way, episodes):
        self.n_classes, self.way, self.episodes = n_classes, way, episodes

    def __len__(self):
        return self.episodes

    def __iter__(self):
        for _ in range(self.episodes):
            yield torch.randperm(self.n_classes)[:self.way].tolist()


class ClassImages(Dataset):
    def __init__(self):
        self.protos = torch.randn(10, 1, 6, 6, generator=torch.Generator().manual_seed(3))

    def __len__(self):
        return 10

    def __getitem__(self, c):
        return self.protos[c] + 0.1 * torch.randn(1, 6, 6), c


episode_loader = DataLoader(ClassImages(), batch_sampler=Episodes(10, 5, 4))
for _ in range(2):
    with torch.no_grad():
        for x, y in episode_loader:
            model(x).argmax(1)
