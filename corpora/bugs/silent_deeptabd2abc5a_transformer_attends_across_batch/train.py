# Source: OpenTabular/DeepTab, deeptab/nn/blocks/transformer.py (CustomTransformerEncoderLayer), deeptab/architectures/ft_transformer.py (FTTransformer), deeptab/core/base_model.py (pool_sequence), deeptab/nn/blocks/common.py (EmbeddingLayer), commit e25c15043e288dac75e31816ce1657be2724b94b
# Report: https://github.com/OpenTabular/DeepTab/commit/d2abc5afe56ac35b3686e2818c97183243e729b0
# FT-Transformer regression on tabular data: every feature is embedded to a d_model token
# (batch, n_features, d_model), a TransformerEncoder of CustomTransformerEncoderLayer blocks
# mixes the feature tokens, the tokens are average-pooled and an MLP head predicts the target.
# The Lightning trainer is written out as a loop; the model is reduced (d_model 32, 2 layers,
# 4 heads); the data are a synthetic regression table (8 numerical features with interactions).
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class FTTransformerConfig:
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    attn_dropout: float = 0.0
    ff_dropout: float = 0.0
    transformer_dim_feedforward: int = 64
    norm_first: bool = False
    transformer_activation: object = F.relu
    layer_norm_eps: float = 1e-5
    pooling_method: str = "avg"
    lr: float = 1e-3


class CustomTransformerEncoderLayer(nn.TransformerEncoderLayer):
    def __init__(self, config):
        super().__init__(
            d_model=getattr(config, "d_model", 128),
            nhead=getattr(config, "n_heads", 8),
            dim_feedforward=getattr(config, "transformer_dim_feedforward", 2048),
            dropout=getattr(config, "attn_dropout", 0.1),
            activation=getattr(config, "transformer_activation", F.relu),
            layer_norm_eps=getattr(config, "layer_norm_eps", 1e-5),
            norm_first=getattr(config, "norm_first", False),
        )
        self.bias = getattr(config, "bias", True)
        self.custom_activation = getattr(config, "transformer_activation", F.relu)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        src2 = self.self_attn(src, src, src, attn_mask=src_mask, key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)
        src = self.norm1(src)
        src2 = self.linear2(self.custom_activation(self.linear1(src)))
        src = src + self.dropout2(src2)
        src = self.norm2(src)
        return src


class EmbeddingLayer(nn.Module):
    def __init__(self, n_num, d_model):
        super().__init__()
        self.num_embeddings = nn.ModuleList([nn.Sequential(nn.Linear(1, d_model), nn.ReLU()) for _ in range(n_num)])

    def forward(self, num_features):
        # (batch, n_features, d_model)
        return torch.stack([emb(num_features[:, i:i + 1]) for i, emb in enumerate(self.num_embeddings)], dim=1)


class FTTransformer(nn.Module):
    def __init__(self, n_num, num_classes=1, config=FTTransformerConfig()):
        super().__init__()
        self.hparams = config
        self.embedding_layer = EmbeddingLayer(n_num, config.d_model)
        self.norm_f = nn.LayerNorm(config.d_model)
        encoder_layer = CustomTransformerEncoderLayer(config=config)
        self.encoder = nn.TransformerEncoder(
            encoder_layer,
            num_layers=self.hparams.n_layers,
            norm=self.norm_f,
        )
        self.tabular_head = nn.Sequential(nn.Linear(config.d_model, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def pool_sequence(self, out):
        if self.hparams.pooling_method == "avg":
            return out.mean(dim=1)
        return out[:, 0, :]

    def forward(self, num_features):
        x = self.embedding_layer(num_features)
        x = self.encoder(x)
        x = self.pool_sequence(x)
        if self.norm_f is not None:
            x = self.norm_f(x)
        preds = self.tabular_head(x)
        return preds


def make_table(n, rng):
    X = rng.normal(size=(n, 8)).astype(np.float32)
    y = (X[:, 0] * X[:, 1] + np.sin(2 * X[:, 2]) + 0.5 * X[:, 3] ** 2 - X[:, 4] + 0.1 * rng.normal(size=n)).astype(np.float32)
    return torch.from_numpy(X), torch.from_numpy(y).unsqueeze(1)


@torch.no_grad()
def predict(model, X, batch_size):
    model.eval()
    return torch.cat([model(X[i:i + batch_size]) for i in range(0, len(X), batch_size)])


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    X_train, y_train = make_table(1536, rng)
    X_val, y_val = make_table(512, rng)
    config = FTTransformerConfig()
    model = FTTransformer(n_num=8, config=config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    g = torch.Generator().manual_seed(0)
    for epoch in range(8):
        model.train()
        perm = torch.randperm(len(X_train), generator=g)
        total = 0.0
        for i in range(0, len(X_train), 64):
            idx = perm[i:i + 64]
            loss = F.mse_loss(model(X_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        preds = predict(model, X_val, 128)
        val_rmse = torch.sqrt(F.mse_loss(preds, y_val)).item()
        # the same validation rows scored in another order / batch size
        order = torch.randperm(len(X_val), generator=g)
        preds_shuffled = torch.empty_like(preds)
        preds_shuffled[order] = predict(model, X_val[order], 128)
        preds_single = predict(model, X_val[:16], 1)
        print(f"epoch {epoch}: train mse {total / len(X_train):.4f} val rmse {val_rmse:.4f} | "
              f"max |pred change| same rows shuffled {(preds_shuffled - preds).abs().max():.4f}, "
              f"one row per batch {(preds_single - preds[:16]).abs().max():.4f}")


if __name__ == "__main__":
    main()
