# Source: jrzaurin/pytorch-widedeep, pytorch_widedeep/models/tabular/embeddings_layers.py (FullEmbeddingDropout, CategoricalEmbeddings), late 2021
# Report: https://github.com/jrzaurin/pytorch-widedeep/issues/61
# A tabular model on widedeep's CategoricalEmbeddings (one embedding table for all categorical
# columns, full_embed_dropout=True so whole column embeddings are dropped) followed by an MLP
# head, trained and evaluated the way widedeep's Trainer does (model.train() / model.eval()).
# The adult-like table is synthetic: the label depends on a few categorical columns.
from typing import Dict, List, Tuple, Union

import torch
from torch import Tensor, nn


class FullEmbeddingDropout(nn.Module):
    def __init__(self, dropout: float):
        super(FullEmbeddingDropout, self).__init__()
        self.dropout = dropout

    def forward(self, X: Tensor) -> Tensor:
        mask = X.new().resize_((X.size(1), 1)).bernoulli_(1 - self.dropout).expand_as(
            X
        ) / (1 - self.dropout)
        return mask * X


DropoutLayers = Union[nn.Dropout, FullEmbeddingDropout]


class CategoricalEmbeddings(nn.Module):
    def __init__(self, embed_dim: int, column_idx: Dict[str, int], embed_input: List[Tuple[str, int]],
                 embed_dropout: float, full_embed_dropout: bool):
        super(CategoricalEmbeddings, self).__init__()
        self.column_idx = column_idx
        self.embed_input = embed_input
        self.n_tokens = sum([ei[1] for ei in embed_input])
        self.categorical_cols = [ei[0] for ei in embed_input]
        self.cat_idx = [self.column_idx[col] for col in self.categorical_cols]
        self.embed = nn.Embedding(self.n_tokens + 1, embed_dim, padding_idx=0)
        if full_embed_dropout:
            self.dropout: DropoutLayers = FullEmbeddingDropout(embed_dropout)
        else:
            self.dropout = nn.Dropout(embed_dropout)

    def forward(self, X: Tensor) -> Tensor:
        x = self.embed(X[:, self.cat_idx].long())
        x = self.dropout(x)
        return x


class TabEmbedMLP(nn.Module):
    def __init__(self, column_idx, embed_input, embed_dim=16):
        super().__init__()
        self.cat_embed = CategoricalEmbeddings(embed_dim, column_idx, embed_input, embed_dropout=0.2,
                                               full_embed_dropout=True)
        self.mlp = nn.Sequential(nn.Linear(embed_dim * len(embed_input), 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, X):
        return self.mlp(self.cat_embed(X).flatten(1))


def make_table(n, cards, offsets, g):
    cols = [torch.randint(0, c, (n,), generator=g) for c in cards]
    logit = 1.5 * (cols[0] % 3 == 0).float() - 1.2 * (cols[1] < 3).float() + 1.0 * (cols[2] % 2).float() - 0.6
    y = (torch.rand(n, generator=g) < torch.sigmoid(3 * logit)).float()
    X = torch.stack([c + 1 + o for c, o in zip(cols, offsets)], 1)
    return X, y


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cards = [9, 8, 6, 5, 12]
    offsets = [sum(cards[:i]) for i in range(len(cards))]
    embed_input = [(f"col{i}", c) for i, c in enumerate(cards)]
    column_idx = {f"col{i}": i for i in range(len(cards))}
    X_train, y_train = make_table(4000, cards, offsets, g)
    X_val, y_val = make_table(2000, cards, offsets, g)
    model = TabEmbedMLP(column_idx, embed_input)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.BCEWithLogitsLoss()
    for epoch in range(5):
        model.train()
        for i in range(0, 4000, 128):
            loss = loss_fn(model(X_train[i:i + 128]).squeeze(1), y_train[i:i + 128])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        accs = []
        with torch.no_grad():
            for _ in range(2):
                preds = []
                for i in range(0, 2000, 256):
                    preds.append((model(X_val[i:i + 256]).squeeze(1) > 0).float())
                accs.append((torch.cat(preds) == y_val).float().mean().item())
        print(f"epoch {epoch} train loss {loss.item():.4f} val acc {accs[0]:.4f} "
              f"(second identical evaluation pass: {accs[1]:.4f})")


if __name__ == "__main__":
    main()
