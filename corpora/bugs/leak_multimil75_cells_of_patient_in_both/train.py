# Source: theislab/multimil, MILClassifier.train (scvi-tools DataSplitter: random train/validation split over cells)
# Report: https://github.com/theislab/multimil/issues/75
import numpy as np
import pandas as pd
import torch
import torch.nn as nn


def make_adata(n_samples=80, cells_per_sample=25, n_genes=30, seed=0):
    rng = np.random.default_rng(seed)
    sample_effect = rng.normal(0, 1.0, (n_samples, n_genes))
    condition = rng.integers(0, 2, n_samples)          # patient-level label, unrelated to expression
    X, obs = [], []
    for s in range(n_samples):
        X.append(sample_effect[s] + rng.normal(0, 1.0, (cells_per_sample, n_genes)))
        obs += [{"sample": f"patient_{s}", "condition": int(condition[s])}] * cells_per_sample
    return np.concatenate(X).astype(np.float32), pd.DataFrame(obs)


class MILClassifier:
    def __init__(self, X, obs, classification=("condition",), sample_key="sample", train_size=0.9, seed=0):
        self.X = torch.from_numpy(X)
        self.obs = obs
        self.y = torch.tensor(obs[classification[0]].values)
        self.sample_key = sample_key
        self.module = nn.Sequential(nn.Linear(X.shape[1], 64), nn.ReLU(), nn.Linear(64, 2))
        n_cells = len(obs)
        rng = np.random.default_rng(seed)
        permutation = rng.permutation(n_cells)
        n_train = int(train_size * n_cells)
        self.train_indices_ = permutation[:n_train]
        self.validation_indices_ = permutation[n_train:]

    def train(self, max_epochs=30, lr=1e-3, batch_size=128):
        opt = torch.optim.Adam(self.module.parameters(), lr=lr)
        tr = torch.from_numpy(self.train_indices_)
        va = torch.from_numpy(self.validation_indices_)
        g = torch.Generator().manual_seed(0)
        for epoch in range(max_epochs):
            perm = tr[torch.randperm(len(tr), generator=g)]
            for i in range(0, len(perm), batch_size):
                b = perm[i:i + batch_size]
                loss = nn.functional.cross_entropy(self.module(self.X[b]), self.y[b])
                opt.zero_grad()
                loss.backward()
                opt.step()
            if epoch % 5 == 4:
                with torch.no_grad():
                    tr_acc = (self.module(self.X[tr]).argmax(1) == self.y[tr]).float().mean().item()
                    val_loss = nn.functional.cross_entropy(self.module(self.X[va]), self.y[va]).item()
                    val_acc = (self.module(self.X[va]).argmax(1) == self.y[va]).float().mean().item()
                print(f"epoch {epoch + 1} train_acc {tr_acc:.3f} val_loss {val_loss:.3f} val_acc {val_acc:.3f}")


def main():
    torch.manual_seed(0)
    X, obs = make_adata()
    mil = MILClassifier(X, obs)
    mil.train(lr=1e-3)
    train_patients = mil.obs.iloc[mil.train_indices_]["sample"].value_counts().index
    val_patients = mil.obs.iloc[mil.validation_indices_]["sample"].value_counts().index
    train_val_overlap = set(train_patients).intersection(val_patients)
    print(len(train_val_overlap), "patients in both train and validation")


if __name__ == "__main__":
    main()
