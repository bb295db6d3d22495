# Source: tilman151/rul-adapt, rul_adapt/loss/utils.py, rul_adapt/loss/adaption.py (MaximumMeanDiscrepancyLoss), rul_adapt/model/cnn.py, rul_adapt/model/head.py, commit e5e6fb43e8ecf5e8a377ceea5dfe8b7472d2c9f2
# Report: https://github.com/tilman151/rul-adapt/pull/22
# Unsupervised domain adaptation for remaining-useful-life (RUL) regression with the
# multi-kernel MMD loss (DAN): a CNN feature extractor sees labelled source windows and
# unlabelled target windows, a regressor predicts the source RUL, and the MMD between
# source and target features is added to the loss. C-MAPSS is replaced by synthetic
# 14-sensor windows of length 30 whose degradation trend sets the RUL; the target domain
# has other sensor offsets and gains.
from itertools import tee
from typing import Callable, List

import numpy as np
import torch
from torch import nn


def pairwise(iterable):
    a, b = tee(iterable)
    next(b, None)
    return zip(a, b)


# ---- rul_adapt/loss/utils.py ----
def calc_pairwise_euclidean(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _calc_pairwise_distances(x, y, _euclidean)


def _calc_pairwise_distances(
    x: torch.Tensor, y: torch.Tensor, dist_func: Callable
) -> torch.Tensor:
    """Compute pairwise euclidean distances between features."""
    num_elems = x.shape[0]
    x = x.view(num_elems, 1, -1)
    y = y.view(1, num_elems, -1)
    distances = dist_func(x, y)

    return distances


def _euclidean(x, y):
    return torch.sqrt((x - y) ** 2).sum(-1)


# ---- rul_adapt/loss/adaption.py ----
class MaximumMeanDiscrepancyLoss(nn.Module):
    def __init__(self, num_kernels: int) -> None:
        super().__init__()
        self.num_kernels = num_kernels

    def forward(self, source_features: torch.Tensor, target_features: torch.Tensor) -> torch.Tensor:
        feats = torch.cat([source_features, target_features], dim=0)
        distances = calc_pairwise_euclidean(feats, feats)

        gammas = _get_gammas(distances, self.num_kernels)
        distances = _calc_multi_kernel(distances, gammas)

        batch_size = source_features.shape[0]
        disc = _calc_discrepancy(distances, batch_size)

        return disc


def _calc_discrepancy(distances: torch.Tensor, batch_size: int) -> torch.Tensor:
    s2s = distances[:batch_size, :batch_size]
    t2t = distances[batch_size:, batch_size:]
    s2t = distances[:batch_size, batch_size:]
    disc = torch.mean(s2s + t2t - 2 * s2t)

    return disc


def _calc_multi_kernel(distances: torch.Tensor, gammas: List[float]) -> torch.Tensor:
    """Compute linear combination of Gaussian kernels."""
    kernels = [_calc_gaussian_kernel(distances, gamma) for gamma in gammas]
    combined: torch.Tensor = sum(kernels) / len(gammas)  # type: ignore

    return combined


def _calc_gaussian_kernel(distances: torch.Tensor, gamma: float) -> torch.Tensor:
    """Compute a single Gaussian kernel."""
    return torch.exp(-distances * gamma)


def _get_gammas(distances: torch.Tensor, num_kernels: int) -> List[float]:
    """Compute gammas for n Gaussian kernels via median heuristic."""
    n_samples = distances.shape[0]
    bandwidth = (n_samples**2 - n_samples) / torch.sum(distances.detach())
    bandwidth /= 2 ** (num_kernels // 2)
    gammas = [bandwidth * (2**i) for i in range(num_kernels)]

    return gammas


# ---- rul_adapt/model/cnn.py and head.py ----
class CnnExtractor(nn.Module):
    def __init__(self, input_channels, conv_filters, seq_len, kernel_size=3, fc_units=None):
        super().__init__()
        self.input_channels = input_channels
        self.conv_filters = conv_filters
        self.seq_len = seq_len
        self.kernel_size = kernel_size
        self.fc_units = fc_units
        self._kernel_sizes = [self.kernel_size] * len(self.conv_filters)
        self._layers = self._get_layers()

    def _get_layers(self) -> nn.Module:
        layers = nn.Sequential()
        filter_iter = pairwise([self.input_channels] + self.conv_filters)
        layer_iter = zip(filter_iter, self._kernel_sizes)
        for i, ((in_ch, out_ch), ks) in enumerate(layer_iter):
            layers.add_module(f"conv_{i}", nn.Sequential(nn.Conv1d(in_ch, out_ch, ks), nn.ReLU()))
        layers.append(nn.Flatten())
        if self.fc_units is not None:
            flat_dim = (self.seq_len - sum(ks - 1 for ks in self._kernel_sizes)) * self.conv_filters[-1]
            layers.add_module("fc", nn.Sequential(nn.Linear(flat_dim, self.fc_units), nn.ReLU()))
        return layers

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self._layers(inputs)


class FullyConnectedHead(nn.Module):
    def __init__(self, input_channels, units, act_func_on_last_layer=True):
        super().__init__()
        dims = [input_channels] + units
        layers = nn.Sequential()
        for i, (in_units, out_units) in enumerate(pairwise(dims)):
            layer = nn.Sequential(nn.Linear(in_units, out_units))
            if i < len(units) - 1 or act_func_on_last_layer:
                layer.append(nn.ReLU())
            layers.append(layer)
        self._layers = layers

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self._layers(inputs)


# ---- MMD approach (DAN) ----
class MmdApproach(nn.Module):
    def __init__(self, feature_extractor, regressor, mmd_factor, num_mmd_kernels=5):
        super().__init__()
        self.feature_extractor = feature_extractor
        self.regressor = regressor
        self.mmd_factor = mmd_factor
        self.train_source_loss = nn.MSELoss()
        self.mmd_loss = MaximumMeanDiscrepancyLoss(num_mmd_kernels)

    def forward(self, inputs):
        return self.regressor(self.feature_extractor(inputs))

    def training_step(self, batch):
        source, source_labels, target = batch
        source_labels = source_labels[:, None]

        source = self.feature_extractor(source)
        target = self.feature_extractor(target)

        rul_preds = self.regressor(source)
        mse_loss = self.train_source_loss(rul_preds, source_labels)

        mmd_loss = self.mmd_loss(source, target)
        loss = mse_loss + self.mmd_factor * mmd_loss

        return loss, mse_loss, mmd_loss


def make_domain(n, rng, offset, gain):
    rul = rng.uniform(0, 125, size=n).astype(np.float32)
    t = np.linspace(0, 1, 30, dtype=np.float32)
    health = (1 - rul / 125.0)[:, None, None]
    sens = rng.normal(0, 1, size=(1, 14, 1)).astype(np.float32)
    x = gain * sens * health * (0.5 + t)[None, None, :] + offset + 0.2 * rng.normal(size=(n, 14, 30))
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(rul)


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    src_x, src_y = make_domain(512, rng, offset=0.0, gain=1.0)
    tgt_x, tgt_y = make_domain(512, rng, offset=0.3, gain=1.4)
    val_x, val_y = make_domain(256, rng, offset=0.3, gain=1.4)

    feat_ex = CnnExtractor(14, [16, 16, 8], 30, fc_units=16)
    reg = FullyConnectedHead(16, [16, 1], act_func_on_last_layer=False)
    approach = MmdApproach(feat_ex, reg, mmd_factor=1.0, num_mmd_kernels=5)
    optim = torch.optim.Adam(approach.parameters(), lr=1e-3)

    batch_size = 64
    for epoch in range(10):
        perm_s = torch.randperm(512)
        perm_t = torch.randperm(512)
        stats = []
        for i in range(512 // batch_size):
            ids = perm_s[i * batch_size:(i + 1) * batch_size]
            idt = perm_t[i * batch_size:(i + 1) * batch_size]
            batch = [src_x[ids], src_y[ids] / 125.0, tgt_x[idt]]
            loss, mse_loss, mmd_loss = approach.training_step(batch)
            optim.zero_grad()
            loss.backward()
            optim.step()
            stats.append((loss.item(), mse_loss.item(), mmd_loss.item()))
        with torch.no_grad():
            preds = approach(val_x).squeeze(1) * 125.0
            rmse = torch.sqrt(torch.mean((preds - val_y) ** 2)).item()
        n_nan = sum(int(torch.isnan(p).sum()) for p in approach.parameters())
        n_par = sum(p.numel() for p in approach.parameters())
        s = np.mean(stats, axis=0)
        print(f"epoch {epoch}: first batch loss {stats[0][0]:.4f} loss {s[0]:.4f} source mse {s[1]:.4f} mmd {s[2]:.4f} "
              f"target val rmse {rmse:.2f} nan params {n_nan}/{n_par}")


if __name__ == "__main__":
    main()
