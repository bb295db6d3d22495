# Report: https://github.com/growingnet/gromo/pull/58
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, random_split


class RandomJitter:
    def __init__(self, brightness=0.2, noise=0.5):
        self.brightness, self.noise, self.calls = brightness, noise, 0

    def __call__(self, img):
        self.calls += 1
        scale = 1 + self.brightness * (2 * torch.rand(()) - 1)
        return scale * img + self.noise * torch.randn_like(img)


class ToyImageDataset(Dataset):
    def __init__(self, n=600, transform=None, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 4, (n,), generator=g)
        protos = torch.randn(4, 1, 12, 12, generator=torch.Generator().manual_seed(3))
        self.images = protos[self.labels] + 3.0 * torch.randn(n, 1, 12, 12, generator=g)
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        if self.transform is not None:
            img = self.transform(img)
        return img, self.labels[i]


def get_dataloaders(batch_size=32, val_split=0.2):
    train_augment = RandomJitter()
    dataset = ToyImageDataset()
    n_val = int(len(dataset) * val_split)
    train_dataset, val_dataset = random_split(dataset, [len(dataset) - n_val, n_val], generator=torch.Generator().manual_seed(0))
    train_dataset.dataset.transform = train_augment
    val_dataset.dataset.transform = None
    return (DataLoader(train_dataset, batch_size=batch_size, shuffle=True),
            DataLoader(val_dataset, batch_size=256), train_augment)


def main():
    torch.manual_seed(0)
    train_loader, val_loader, train_augment = get_dataloaders()
    model = nn.Sequential(nn.Flatten(), nn.Linear(144, 256), nn.ReLU(), nn.Linear(256, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(8):
        correct = total = 0
        for x, y in train_loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            correct += (logits.argmax(1) == y).sum().item()
            total += len(y)
        with torch.no_grad():
            vx, vy = next(iter(val_loader))
            val_acc = (model(vx).argmax(1) == vy).float().mean().item()
        if epoch % 2 == 1:
            print(f"epoch {epoch} train_acc {correct / total:.3f} val_acc {val_acc:.3f} augmentation calls so far {train_augment.calls}")


if __name__ == "__main__":
    main()
