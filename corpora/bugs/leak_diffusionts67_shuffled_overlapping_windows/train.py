# Source: Y-debug-sys/Diffusion-TS, Utils/Data_utils/real_datasets.py (CustomDataset), Models/interpretable_diffusion/gaussian_diffusion.py (q_sample, _train_loss, forward), engine/solver.py (Trainer.train), Config/etth.yaml, commit 8972c299eda8911a393023ee8ef14ac0a54a9c82
# Report: https://github.com/Y-debug-sys/Diffusion-TS/issues/67
# Diffusion-TS on an ETTh-style multivariate series for conditional generation (train and test
# datasets both built with proportion 0.9, as the config comment says): the series is
# MinMax-scaled, cut into sliding windows of 24 steps, and CustomDataset.divide splits the
# windows into train / test. The interpretable trend-season transformer is replaced by a small
# MLP denoiser over the flattened window (x0 prediction, l1 loss, cosine betas, 50 steps); the
# ETTh.csv file by a synthetic 7-variable hourly series; ema_pytorch by a small EMA class.
import io
import math
import os
import tempfile

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.preprocessing import MinMaxScaler
from torch.utils.data import DataLoader, Dataset


def normalize_to_neg_one_to_one(x):
    return x * 2 - 1


def unnormalize_to_zero_to_one(x):
    return (x + 1) * 0.5


class CustomDataset(Dataset):
    def __init__(self, name, data_root, window=64, proportion=0.8, neg_one_to_one=True, seed=123,
                 period='train'):
        super(CustomDataset, self).__init__()
        assert period in ['train', 'test'], 'period must be train or test.'
        self.name = name
        self.rawdata, self.scaler = self.read_data(data_root, self.name)
        self.window, self.period = window, period
        self.len, self.var_num = self.rawdata.shape[0], self.rawdata.shape[-1]
        self.sample_num_total = max(self.len - self.window + 1, 0)
        self.auto_norm = neg_one_to_one

        self.data = self.__normalize(self.rawdata)
        train, inference = self.__getsamples(self.data, proportion, seed)

        self.samples = train if period == 'train' else inference
        self.sample_num = self.samples.shape[0]

    def __getsamples(self, data, proportion, seed):
        x = np.zeros((self.sample_num_total, self.window, self.var_num))
        for i in range(self.sample_num_total):
            start = i
            end = i + self.window
            x[i, :, :] = data[start:end, :]

        train_data, test_data = self.divide(x, proportion, seed)
        return train_data, test_data

    def __normalize(self, rawdata):
        data = self.scaler.transform(rawdata)
        if self.auto_norm:
            data = normalize_to_neg_one_to_one(data)
        return data

    @staticmethod
    def divide(data, ratio, seed=2023):
        size = data.shape[0]
        # Store the state of the RNG to restore later.
        st0 = np.random.get_state()
        np.random.seed(seed)

        regular_train_num = int(np.ceil(size * ratio))
        id_rdm = np.random.permutation(size)
        # id_rdm = np.arange(size)
        regular_train_id = id_rdm[:regular_train_num]
        irregular_train_id = id_rdm[regular_train_num:]

        regular_data = data[regular_train_id, :]
        irregular_data = data[irregular_train_id, :]

        # Restore RNG.
        np.random.set_state(st0)
        return regular_data, irregular_data

    @staticmethod
    def read_data(filepath, name=''):
        """Reads a single .csv
        """
        df = pd.read_csv(filepath, header=0)
        if name == 'etth':
            df = df.drop(df.columns[0], axis=1)
        data = df.values
        scaler = MinMaxScaler()
        scaler = scaler.fit(data)
        return data, scaler

    def __getitem__(self, ind):
        x = self.samples[ind, :, :]  # (seq_length, feat_dim) array
        return torch.from_numpy(x).float()

    def __len__(self):
        return self.sample_num


def cosine_beta_schedule(timesteps, s=0.008):
    steps = timesteps + 1
    x = torch.linspace(0, timesteps, steps, dtype=torch.float64)
    alphas_cumprod = torch.cos(((x / timesteps) + s) / (1 + s) * math.pi * 0.5) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - (alphas_cumprod[1:] / alphas_cumprod[:-1])
    return torch.clip(betas, 0, 0.999)


def extract(a, t, x_shape):
    b, *_ = t.shape
    out = a.gather(-1, t)
    return out.reshape(b, *((1,) * (len(x_shape) - 1)))


class Diffusion_TS(nn.Module):
    def __init__(self, seq_length, feature_size, timesteps=50, d_model=256, loss_type='l1'):
        super().__init__()
        self.seq_length, self.feature_size, self.loss_type = seq_length, feature_size, loss_type
        betas = cosine_beta_schedule(timesteps).float()
        self.num_timesteps = timesteps
        alphas_cumprod = torch.cumprod(1. - betas, dim=0)
        self.register_buffer('betas', betas)
        self.register_buffer('sqrt_alphas_cumprod', torch.sqrt(alphas_cumprod))
        self.register_buffer('sqrt_one_minus_alphas_cumprod', torch.sqrt(1. - alphas_cumprod))
        self.register_buffer('loss_weight', torch.sqrt(alphas_cumprod) / torch.sqrt(1. - alphas_cumprod) / 100)
        self.time_emb = nn.Embedding(timesteps, d_model)
        self.inp = nn.Linear(seq_length * feature_size, d_model)
        self.model = nn.Sequential(nn.GELU(), nn.Linear(d_model, d_model), nn.GELU(),
                                   nn.Linear(d_model, seq_length * feature_size))

    def output(self, x, t):
        h = self.inp(x.flatten(1)) + self.time_emb(t)
        return self.model(h).view(x.shape)

    @property
    def loss_fn(self):
        return F.l1_loss if self.loss_type == 'l1' else F.mse_loss

    def q_sample(self, x_start, t, noise=None):
        noise = torch.randn_like(x_start) if noise is None else noise
        return (extract(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start +
                extract(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * noise)

    def _train_loss(self, x_start, t, target=None, noise=None):
        noise = torch.randn_like(x_start) if noise is None else noise
        if target is None:
            target = x_start
        x = self.q_sample(x_start=x_start, t=t, noise=noise)  # noise sample
        model_out = self.output(x, t)
        train_loss = self.loss_fn(model_out, target, reduction='none')
        train_loss = train_loss.flatten(1).mean(dim=1)
        train_loss = train_loss * extract(self.loss_weight, t, train_loss.shape)
        return train_loss.mean()

    def forward(self, x, **kwargs):
        b, c, n, device, feature_size, = *x.shape, x.device, self.feature_size
        assert n == feature_size, f'number of variable must be {feature_size}'
        t = torch.randint(0, self.num_timesteps, (b,), device=device).long()
        return self._train_loss(x_start=x, t=t, **kwargs)


class EMA(nn.Module):
    def __init__(self, model, beta=0.995, update_every=10):
        super().__init__()
        self.online_model, self.beta, self.update_every, self.step = model, beta, update_every, 0
        self.ema_model = Diffusion_TS(model.seq_length, model.feature_size, model.num_timesteps)
        self.ema_model.load_state_dict(model.state_dict())

    @torch.no_grad()
    def update(self):
        self.step += 1
        if self.step % self.update_every != 0:
            return
        for e, p in zip(self.ema_model.parameters(), self.online_model.parameters()):
            e.lerp_(p, 1 - self.beta)


def cycle(dl):
    while True:
        for data in dl:
            yield data


def write_etth_csv(path, n=1200, seed=0):
    rng = np.random.RandomState(seed)
    t = np.arange(n)
    cols = {'date': pd.date_range('2016-07-01', periods=n, freq='h').astype(str)}
    for k, name in enumerate(['HUFL', 'HULL', 'MUFL', 'MULL', 'LUFL', 'LULL', 'OT']):
        walk = np.cumsum(rng.normal(0, 0.3, n))
        cols[name] = 5 * np.sin(2 * np.pi * t / 24 + k) + 2 * np.sin(2 * np.pi * t / 168) + walk
    pd.DataFrame(cols).to_csv(path, index=False)


@torch.no_grad()
def denoising_error(model, samples, t_val=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    x0 = torch.from_numpy(samples).float()
    noise = torch.randn(x0.shape, generator=g)
    t = torch.full((x0.shape[0],), t_val, dtype=torch.long)
    return F.l1_loss(model.output(model.q_sample(x0, t, noise), t), x0).item()


def main():
    torch.manual_seed(123)
    data_root = os.path.join(tempfile.mkdtemp(), 'ETTh.csv')
    write_etth_csv(data_root)
    train_dataset = CustomDataset(name='etth', data_root=data_root, window=24, proportion=0.9, seed=123,
                                  period='train')
    test_dataset = CustomDataset(name='etth', data_root=data_root, window=24, proportion=0.9, seed=123,
                                 period='test')
    dataloader = DataLoader(train_dataset, batch_size=64, shuffle=True, drop_last=True)
    seen = {row.tobytes() for row in train_dataset.samples.reshape(-1, 7)}
    test_rows = test_dataset.samples.reshape(-1, 7)
    print(f"{len(train_dataset)} training windows, {len(test_dataset)} test windows; "
          f"{sum(row.tobytes() in seen for row in test_rows)} of {len(test_rows)} test-window time steps "
          f"are inside training windows")

    model = Diffusion_TS(seq_length=24, feature_size=7)
    opt = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=1e-3, betas=[0.9, 0.96])
    ema = EMA(model, beta=0.995, update_every=10)
    dl = cycle(dataloader)
    train_num_steps, gradient_accumulate_every = 1500, 2
    step = 0
    while step < train_num_steps:
        total_loss = 0.
        for _ in range(gradient_accumulate_every):
            data = next(dl)
            loss = model(data, target=data)
            loss = loss / gradient_accumulate_every
            loss.backward()
            total_loss += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        step += 1
        ema.update()
        if step % 300 == 0:
            print(f"step {step} loss {total_loss:.5f} | denoising l1 at t=20: "
                  f"train windows {denoising_error(model, train_dataset.samples):.4f} "
                  f"test windows {denoising_error(model, test_dataset.samples):.4f}")
    print('training complete')


if __name__ == '__main__':
    main()
