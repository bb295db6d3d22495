# Report: https://github.com/Wang-Tianwei/Decoupled-attention-network/issues/4
import collections

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
MAX_T = 32


class lmdbDataset(Dataset):
    def __init__(self, n=1200, global_state='Train', seed=0):
        g = torch.Generator().manual_seed(seed)
        self.global_state = global_state
        self.labels, self.images = [], []
        glyphs = torch.randn(len(ALPHABET) + 1, 8, generator=torch.Generator().manual_seed(5))
        for _ in range(n):
            length = int(torch.randint(4, MAX_T, (1,), generator=g))
            label = "".join(ALPHABET[int(i)] for i in torch.randint(0, len(ALPHABET), (length,), generator=g))
            idx = [ALPHABET.index(c) for c in label] + [len(ALPHABET)] * (MAX_T - length)
            self.images.append(glyphs[idx] + 0.3 * torch.randn(MAX_T, 8, generator=g))
            self.labels.append(label)
        self.seen = collections.Counter()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        index = index % len(self)
        label = self.labels[index]
        if len(label) > 24 and self.global_state == 'Train':
            return self[index + 1]
        self.seen[index] += 1
        target = torch.tensor([ALPHABET.index(c) for c in label] + [len(ALPHABET)] * (MAX_T - len(label)))
        return self.images[index], target


class DAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.fe = nn.Sequential(nn.Flatten(), nn.Linear(MAX_T * 8, 256), nn.ReLU())
        self.decoder = nn.Linear(256, MAX_T * (len(ALPHABET) + 1))

    def forward(self, x):
        return self.decoder(self.fe(x)).view(-1, MAX_T, len(ALPHABET) + 1)


def main():
    torch.manual_seed(0)
    train_set = lmdbDataset(global_state='Train', seed=0)
    test_set = lmdbDataset(n=300, global_state='Test', seed=1)
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    model = DAN()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(6):
        for image, target in train_loader:
            loss = F.cross_entropy(model(image).reshape(-1, len(ALPHABET) + 1), target.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f} distinct training words used {len(train_set.seen)}/{len(train_set)}")
    with torch.no_grad():
        images, targets = zip(*[test_set[i] for i in range(len(test_set))])
        pred = model(torch.stack(images)).argmax(-1)
        targets = torch.stack(targets)
        real = targets != len(ALPHABET)
        head, tail = real[:, :24], real[:, 24:]
        print(f"test char accuracy: positions 1-24 {(pred[:, :24] == targets[:, :24])[head].float().mean().item():.3f}, "
              f"positions 25-32 {(pred[:, 24:] == targets[:, 24:])[tail].float().mean().item():.3f}")
    dup = sum(c > epoch + 1 for c in train_set.seen.values())
    print(f"training words drawn more than once per epoch: {dup}")


if __name__ == "__main__":
    main()
