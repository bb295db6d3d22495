# Utterances carry their speaker; a random_split by utterance puts every speaker on both sides.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, random_split


class Utterances(Dataset):
    def __init__(self, n_speakers=20, per_speaker=10):
        g = torch.Generator().manual_seed(0)
        self.items = [{"features": torch.randn(16, generator=g), "speaker": f"spk{s}", "label": s % 4}
                      for s in range(n_speakers) for _ in range(per_speaker)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


data = Utterances()
train_set, val_set = random_split(data, [160, 40], generator=torch.Generator().manual_seed(1))
train_loader = DataLoader(train_set, batch_size=16, shuffle=True)
val_loader = DataLoader(val_set, batch_size=40)  # HERE
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for batch in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(batch["features"]), batch["label"]).backward()
        opt.step()
    with torch.no_grad():
        for batch in val_loader:
            model(batch["features"])
