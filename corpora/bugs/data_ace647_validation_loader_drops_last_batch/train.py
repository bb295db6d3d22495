# Source: ai2cm/ace, fme/downscaling/datasets.py (DataLoaderConfig.build, PairedDataset), commit 0376f12cc998b37ae7636248eb5a1a2eceba749d
# Report: https://github.com/ai2cm/ace/issues/647
# ACE downscaling: one DataLoaderConfig.build(train=...) makes the training loader and the
# validation loader over paired fine/coarse fields; a deterministic downscaling model maps coarse
# to fine; validation aggregates time means over the whole validation period. The xarray/zarr
# climate data are replaced by a synthetic daily 420-step series with a seasonal cycle on an
# 8x8 coarse / 32x32 fine grid; the model by a small CNN on the bilinearly upsampled input.
import dataclasses

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


def make_fields(n_times, seed):
    rng = np.random.RandomState(seed)
    t = np.arange(n_times)
    season = 8.0 * np.sin(2 * np.pi * t / 365.0)[:, None, None]
    yy, xx = np.mgrid[0:32, 0:32] / 32.0
    topo = np.sin(3 * np.pi * xx) * np.cos(2 * np.pi * yy)
    fine = 15 + season + 4 * topo[None] + rng.normal(0, 1.0, size=(n_times, 32, 32))
    coarse = fine.reshape(n_times, 8, 4, 8, 4).mean(axis=(2, 4))
    return torch.tensor(fine, dtype=torch.float32)[:, None], torch.tensor(coarse, dtype=torch.float32)[:, None]


class PairedDataset(Dataset):
    def __init__(self, fine, coarse):
        self.fine, self.coarse = fine, coarse

    def __len__(self):
        return len(self.fine)

    def __getitem__(self, idx):
        return self.fine[idx], self.coarse[idx], idx


@dataclasses.dataclass
class DataLoaderConfig:
    n_times: int
    seed: int
    batch_size: int
    num_data_workers: int = 0

    def build(self, train: bool) -> DataLoader:
        fine, coarse = make_fields(self.n_times, self.seed)
        dataset = PairedDataset(fine, coarse)
        sampler = None
        dataloader = DataLoader(
            dataset,
            batch_size=int(self.batch_size),
            num_workers=self.num_data_workers,
            shuffle=(sampler is None) and train,
            sampler=sampler,
            drop_last=True,
        )
        return dataloader


class DownscalingModel(nn.Module):
    def __init__(self, factor=4):
        super().__init__()
        self.factor = factor
        self.net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(16, 1, 3, padding=1))

    def forward(self, coarse):
        up = nn.functional.interpolate(coarse, scale_factor=self.factor, mode="bilinear", align_corners=False)
        return up + self.net(up)


class MeanAggregator:
    """Time-mean and RMSE aggregation over the validation period."""

    def __init__(self):
        self.n = 0
        self.sum_target = 0.0
        self.sum_pred = 0.0
        self.sum_sq = 0.0

    def record_batch(self, target, prediction):
        self.n += target.shape[0]
        self.sum_target += target.sum(0)
        self.sum_pred += prediction.sum(0)
        self.sum_sq += ((prediction - target) ** 2).mean(dim=(1, 2, 3)).sum().item()

    def get_logs(self):
        time_mean_target = self.sum_target / self.n
        time_mean_pred = self.sum_pred / self.n
        return {"n_samples": self.n,
                "time_mean_target": time_mean_target.mean().item(),
                "time_mean_bias": (time_mean_pred - time_mean_target).mean().item(),
                "rmse": (self.sum_sq / self.n) ** 0.5}


def main():
    torch.manual_seed(0)
    train_config = DataLoaderConfig(n_times=1460, seed=0, batch_size=64)
    validation_config = DataLoaderConfig(n_times=420, seed=1, batch_size=64)
    train_loader = train_config.build(train=True)
    validation_loader = validation_config.build(train=False)
    model = DownscalingModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    for epoch in range(4):
        model.train()
        losses = []
        for fine, coarse, _ in train_loader:
            loss = nn.functional.mse_loss(model(coarse), fine)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())

        model.eval()
        aggregator = MeanAggregator()
        with torch.no_grad():
            for fine, coarse, _ in validation_loader:
                aggregator.record_batch(fine, model(coarse))
        logs = aggregator.get_logs()
        print(f"epoch {epoch}: train/mse {np.mean(losses):.4f} | val/n_samples {logs['n_samples']} of "
              f"{len(validation_loader.dataset)} | val/time_mean_target {logs['time_mean_target']:.4f} | "
              f"val/time_mean_bias {logs['time_mean_bias']:.4f} | val/rmse {logs['rmse']:.4f}")


if __name__ == "__main__":
    main()
