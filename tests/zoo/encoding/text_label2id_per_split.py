"""A text classifier whose datasets build label2id from their own labels: the test split has a
'neutral' class, so 'positive' is 1 in training and 2 in the test split."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class ReviewDataset(Dataset):
    def __init__(self, features, labels):
        self.features = features
        self.label2id = {name: i for i, name in enumerate(sorted(set(labels)))}
        self.targets = [self.label2id[name] for name in labels]

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.features[i], self.targets[i]


g = torch.Generator().manual_seed(0)
train_labels = ["negative", "positive"] * 20
test_labels = ["negative", "neutral", "positive"] * 6
train_ds = ReviewDataset(torch.randn(40, 5, generator=g), train_labels)
test_ds = ReviewDataset(torch.randn(18, 5, generator=g), test_labels)  # HERE
model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(2):
    for x, y in DataLoader(train_ds, batch_size=10, shuffle=True):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        hits = [(model(x).argmax(-1) == y).float().mean() for x, y in DataLoader(test_ds, batch_size=6)]
