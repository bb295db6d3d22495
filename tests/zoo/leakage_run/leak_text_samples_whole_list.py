"""(label, token ids) samples in a plain list, packed by a collate_fn into EmbeddingBag ids +
offsets (the text-classification tutorial's loop): the split is drawn, but the training loader
wraps the whole list. No batch equals a stored row: the rows are known by the loader's indices.
Two worker processes: the sampler's indices run ahead of the batches."""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, random_split


def collate(batch):
    labels = torch.tensor([label for label, _ in batch])
    tokens = [torch.tensor(t, dtype=torch.int64) for _, t in batch]
    offsets = torch.tensor([0] + [t.numel() for t in tokens[:-1]]).cumsum(0)
    return labels, torch.cat(tokens), offsets


class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(40, 8)
        self.fc = nn.Linear(8, 3)

    def forward(self, text, offsets):
        return self.fc(self.embedding(text, offsets))


if __name__ == "__main__":
    random.seed(0)
    torch.manual_seed(0)
    data = [(random.randrange(3), [random.randrange(40) for _ in range(random.randint(2, 7))]) for _ in range(60)]
    train_ds, val_ds = random_split(data, [45, 15])  # SPLIT
    model = Bag()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(2):
        model.train()
        for labels, text, offsets in DataLoader(data, batch_size=10, shuffle=True, collate_fn=collate,
                                                num_workers=2):  # the bug: `data`, not `train_ds`
            loss = F.cross_entropy(model(text, offsets), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            hits = sum((model(text, offsets).argmax(1) == labels).sum().item()
                       for labels, text, offsets in DataLoader(val_ds, batch_size=5, collate_fn=collate))
