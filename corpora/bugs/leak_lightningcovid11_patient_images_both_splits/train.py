# Report: https://github.com/Lightning-Universe/lightning-Covid19/issues/11
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, Dataset


def make_metadata(n_patients=80, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for pid in range(n_patients):
        finding = "COVID-19" if rng.random() < 0.5 else "Pneumonia"
        for offset in range(rng.integers(3, 7)):
            rows.append({"patientid": pid, "offset": int(offset), "finding": finding, "filename": f"p{pid}_{offset}.jpg"})
    return pd.DataFrame(rows)


class CovidChestXrayDataset(Dataset):
    def __init__(self, df, seed=0):
        rng = np.random.default_rng(seed + 1)
        n_patients = df.patientid.max() + 1
        anatomy = rng.normal(0, 1.0, (n_patients, 1, 32, 32)).astype(np.float32)
        self.df = df.reset_index(drop=True)
        self.images = {}
        for r in self.df.itertuples():
            img = anatomy[r.patientid] + 0.3 * rng.normal(0, 1, (1, 32, 32)).astype(np.float32)
            self.images[r.filename] = img
        self.labels = (self.df.finding == "COVID-19").astype(int).values

    def __len__(self):
        return len(self.df)

    def __getitem__(self, idx):
        return torch.from_numpy(self.images[self.df.filename[idx]]), self.labels[idx]


class CovidNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(32 * 32, 128), nn.ReLU())
        self.classifier = nn.Linear(128, 2)

    def forward(self, x):
        return self.classifier(self.features(x))


def accuracy(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / total


def main():
    torch.manual_seed(0)
    df = make_metadata()
    dataset = CovidChestXrayDataset(df)
    train_idx, val_idx = train_test_split(np.arange(len(df)), test_size=0.2, random_state=42)
    shared = set(df.patientid[train_idx]) & set(df.patientid[val_idx])
    print(f"{len(train_idx)} train images, {len(val_idx)} val images, patients in both splits: {len(shared)}")
    train_loader = DataLoader(torch.utils.data.Subset(dataset, train_idx), batch_size=16, shuffle=True)
    val_loader = DataLoader(torch.utils.data.Subset(dataset, val_idx), batch_size=64)
    model = CovidNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(8):
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch % 2 == 1:
            print(f"epoch {epoch} loss {loss.item():.4f} train_acc {accuracy(model, train_loader):.3f} val_acc {accuracy(model, val_loader):.3f}")


if __name__ == "__main__":
    main()
