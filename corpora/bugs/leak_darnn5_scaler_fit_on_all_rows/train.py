# Source: Seanny123/da-rnn, main.py (preprocess_data, da_rnn, train, prep_train_data, predict), commit 105e2e11e1027bc67758b92ab67748170a0ab092
# Report: https://github.com/Seanny123/da-rnn/issues/5
import typing
from typing import NamedTuple, Tuple

import numpy as np
import pandas as pd
import torch
from sklearn.preprocessing import StandardScaler
from torch import nn, optim


class TrainData(NamedTuple):
    feats: np.ndarray
    targs: np.ndarray


class TrainConfig(NamedTuple):
    T: int
    train_size: int
    batch_size: int
    loss_func: typing.Callable


class Encoder(nn.Module):
    def __init__(self, input_size, hidden_size, T):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True)

    def forward(self, X):
        out, _ = self.lstm(X)
        return X, out


class Decoder(nn.Module):
    def __init__(self, encoder_hidden_size, decoder_hidden_size, T, out_feats=1):
        super().__init__()
        self.fc = nn.Linear(encoder_hidden_size + out_feats * (T - 1), decoder_hidden_size)
        self.fc_final = nn.Linear(decoder_hidden_size, out_feats)

    def forward(self, input_encoded, y_history):
        h = torch.relu(self.fc(torch.cat([input_encoded[:, -1], y_history.flatten(1)], 1)))
        return self.fc_final(h)


def numpy_to_tvar(x):
    return torch.from_numpy(np.asarray(x)).float()


def preprocess_data(dat, col_names) -> Tuple[TrainData, StandardScaler]:
    scale = StandardScaler().fit(dat)
    proc_dat = scale.transform(dat)

    mask = np.ones(proc_dat.shape[1], dtype=bool)
    dat_cols = list(dat.columns)
    for col_name in col_names:
        mask[dat_cols.index(col_name)] = False

    feats = proc_dat[:, mask]
    targs = proc_dat[:, ~mask]

    return TrainData(feats, targs), scale


def prep_train_data(batch_idx, t_cfg, train_data):
    feats = np.zeros((len(batch_idx), t_cfg.T - 1, train_data.feats.shape[1]))
    y_history = np.zeros((len(batch_idx), t_cfg.T - 1, train_data.targs.shape[1]))
    y_target = train_data.targs[batch_idx + t_cfg.T]
    for b_i, b_idx in enumerate(batch_idx):
        b_slc = slice(b_idx, b_idx + t_cfg.T - 1)
        feats[b_i, :, :] = train_data.feats[b_slc, :]
        y_history[b_i, :] = train_data.targs[b_slc]
    return feats, y_history, y_target


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    n = 800
    ndx = 4000 + np.cumsum(np.random.normal(2.0, 10.0, n))
    raw_data = pd.DataFrame({f"S{i}": ndx * (0.1 + 0.02 * i) + np.random.normal(0, 15, n) for i in range(6)})
    raw_data["NDX"] = ndx
    targ_cols = ("NDX",)
    data, scaler = preprocess_data(raw_data, targ_cols)

    T, batch_size = 10, 64
    t_cfg = TrainConfig(T, int(data.feats.shape[0] * 0.7), batch_size, nn.MSELoss())
    train_rows = raw_data["NDX"].values[:t_cfg.train_size]
    print(f"Training size: {t_cfg.train_size}; scaler fitted on {int(scaler.n_samples_seen_)} rows")
    print(f"NDX mean: scaler {scaler.mean_[-1]:.1f} / training rows {train_rows.mean():.1f}; "
          f"scaled training targets mean {data.targs[:t_cfg.train_size].mean():+.3f} std {data.targs[:t_cfg.train_size].std():.3f}")
    encoder = Encoder(data.feats.shape[1], 32, T)
    decoder = Decoder(32, 32, T, 1)
    enc_opt = optim.Adam(encoder.parameters(), lr=1e-3)
    dec_opt = optim.Adam(decoder.parameters(), lr=1e-3)
    for e_i in range(4):
        perm_idx = np.random.permutation(t_cfg.train_size - t_cfg.T)
        losses = []
        for t_i in range(0, t_cfg.train_size, t_cfg.batch_size):
            batch_idx = perm_idx[t_i:(t_i + t_cfg.batch_size)]
            if len(batch_idx) == 0:
                continue
            feats, y_history, y_target = prep_train_data(batch_idx, t_cfg, data)
            enc_opt.zero_grad()
            dec_opt.zero_grad()
            _, input_encoded = encoder(numpy_to_tvar(feats))
            y_pred = decoder(input_encoded, numpy_to_tvar(y_history))
            loss = t_cfg.loss_func(y_pred, numpy_to_tvar(y_target))
            loss.backward()
            enc_opt.step()
            dec_opt.step()
            losses.append(loss.item())
        print(f"Epoch {e_i}, train loss: {np.mean(losses):.4f}")


if __name__ == "__main__":
    main()
