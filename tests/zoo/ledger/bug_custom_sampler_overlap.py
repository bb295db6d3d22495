# One dataset, two samplers: a custom sampler walks the validation indices, which were drawn
# with replacement from all rows and so include training rows.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Sampler, SubsetRandomSampler, TensorDataset


class IndexSampler(Sampler):
    def __init__(self, indices):
        self.indices = list(indices)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


g = torch.Generator().manual_seed(3)
X = torch.randn(500, 12, generator=g)
y = torch.randint(0, 3, (500,), generator=g)
data = TensorDataset(X, y)
train_ids = list(range(400))
val_ids = torch.randint(0, 500, (100,), generator=g).unique().tolist()
train_loader = DataLoader(data, batch_size=50, sampler=SubsetRandomSampler(train_ids))
eval_loader = DataLoader(data, batch_size=50, sampler=IndexSampler(val_ids))  # HERE
model = nn.Linear(12, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for xb, yb in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        for xb, yb in eval_loader:
            model(xb)
    model.train()
