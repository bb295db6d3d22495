# Pairs of an entity and an item (a cell line and a drug): validation and test hold different
# pairs, but every cell line's profile appears in both. Equal profiles are no shared sample.
import copy

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
profiles = torch.randn(30, 16)  # one expression profile per cell line
drugs = 8


class Pairs(Dataset):
    def __init__(self, pairs):
        self.pairs = pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        cell, drug = self.pairs[i]
        y = torch.tanh(profiles[cell, drug] + 0.1 * drug)
        return profiles[cell], torch.tensor(drug), y.reshape(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(drugs, 4)
        self.head = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, profile, drug):
        return self.head(torch.cat([profile, self.emb(drug)], 1))


all_pairs = [(c, d) for c in range(30) for d in range(drugs)]
order = torch.randperm(len(all_pairs)).tolist()
pairs = [all_pairs[i] for i in order]
test_pairs, val_pairs, train_pairs = pairs[:40], pairs[40:80], pairs[80:]
train_loader = DataLoader(Pairs(train_pairs), batch_size=32, shuffle=True)
val_loader = DataLoader(Pairs(val_pairs), batch_size=32)
test_loader = DataLoader(Pairs(test_pairs), batch_size=32)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
best, best_state = float("inf"), None
for epoch in range(4):
    model.train()
    for profile, drug, y in train_loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(profile, drug), y).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        val = sum(nn.functional.mse_loss(model(p, d), y, reduction="sum").item() for p, d, y in val_loader)
    if val < best:
        best, best_state = val, copy.deepcopy(model.state_dict())
model.load_state_dict(best_state)
with torch.no_grad():
    test = sum(nn.functional.mse_loss(model(p, d), y, reduction="sum").item() for p, d, y in test_loader)
print(f"test mse {test / len(test_pairs):.4f}")
