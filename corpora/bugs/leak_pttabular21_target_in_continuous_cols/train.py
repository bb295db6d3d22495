# Source: pytorch-tabular/pytorch_tabular usage from the report (DataConfig target / continuous_cols / categorical_cols, CategoryEmbeddingModel)
# Report: https://github.com/pytorch-tabular/pytorch_tabular/issues/21
from dataclasses import dataclass, field
from typing import List

import numpy as np
import pandas as pd
import torch
import torch.nn as nn


@dataclass
class DataConfig:
    target: List[str]
    continuous_cols: List[str] = field(default_factory=list)
    categorical_cols: List[str] = field(default_factory=list)


class CategoryEmbeddingModel(nn.Module):
    def __init__(self, n_cont, cat_cardinality, layers=(64, 32), emb_dim=4, output_dim=2):
        super().__init__()
        self.embeddings = nn.ModuleList([nn.Embedding(c, emb_dim) for c in cat_cardinality])
        self.normalizing_batch_norm = nn.BatchNorm1d(n_cont)
        dims = [n_cont + emb_dim * len(cat_cardinality), *layers]
        blocks = []
        for a, b in zip(dims[:-1], dims[1:]):
            blocks += [nn.Linear(a, b), nn.ReLU()]
        self.backbone = nn.Sequential(*blocks)
        self.head = nn.Linear(dims[-1], output_dim)

    def forward(self, x_cont, x_cat):
        emb = [e(x_cat[:, i]) for i, e in enumerate(self.embeddings)]
        x = torch.cat([self.normalizing_batch_norm(x_cont), *emb], 1)
        return self.head(self.backbone(x))


class TabularModel:
    def __init__(self, data_config, max_epochs=10, batch_size=128, lr=1e-3):
        self.config = data_config
        self.max_epochs, self.batch_size, self.lr = max_epochs, batch_size, lr

    def _tensors(self, df):
        x_cont = torch.tensor(df[self.config.continuous_cols].values, dtype=torch.float32)
        x_cat = torch.tensor(np.stack([df[c].cat.codes.values for c in self.config.categorical_cols], 1), dtype=torch.long)
        y = torch.tensor(df[self.config.target[0]].values, dtype=torch.long)
        return x_cont, x_cat, y

    def fit(self, train, validation):
        cards = [len(train[c].cat.categories) for c in self.config.categorical_cols]
        self.model = CategoryEmbeddingModel(len(self.config.continuous_cols), cards)
        opt = torch.optim.Adam(self.model.parameters(), lr=self.lr)
        xc, xk, y = self._tensors(train)
        for epoch in range(self.max_epochs):
            self.model.train()
            perm = torch.randperm(len(y))
            for i in range(0, len(y), self.batch_size):
                b = perm[i:i + self.batch_size]
                loss = nn.functional.cross_entropy(self.model(xc[b], xk[b]), y[b])
                opt.zero_grad()
                loss.backward()
                opt.step()
            print(f"epoch {epoch} train_loss {loss.item():.4f} valid_accuracy {self.evaluate(validation):.4f}")

    def evaluate(self, df):
        self.model.eval()
        xc, xk, y = self._tensors(df)
        with torch.no_grad():
            return (self.model(xc, xk).argmax(1) == y).float().mean().item()


def make_matches(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "home_elo": rng.normal(1500, 100, n), "away_elo": rng.normal(1500, 100, n),
        "home_form": rng.normal(0, 1, n), "away_form": rng.normal(0, 1, n),
        "league": pd.Categorical(rng.choice(["A", "B", "C"], n)),
    })
    logit = 0.004 * (df.home_elo - df.away_elo) + 0.3 * (df.home_form - df.away_form)
    df["result"] = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    return df


def main():
    torch.manual_seed(0)
    df = make_matches()
    train, val = df.iloc[:2400].copy(), df.iloc[2400:].copy()
    num_cols = [c for c in df.columns if df[c].dtype != "category"]
    cat_names = ["league"]
    data_config = DataConfig(
        target=['result'],  # target should always be a list
        continuous_cols=num_cols,
        categorical_cols=cat_names,
    )
    tabular_model = TabularModel(data_config)
    tabular_model.fit(train=train, validation=val)


if __name__ == "__main__":
    main()
