# Source: Nixtla/neuralforecast, neuralforecast/common/_base_windows.py (BaseWindows: _create_windows, _normalization, _inv_normalization, _parse_windows, training_step, _compute_valid_loss, validation_step), neuralforecast/common/_scalers.py (TemporalNorm), neuralforecast/losses/pytorch.py (MAE), commit 48bd3469679e9f1f8be013f5f8a75667f72e63db
# Report: https://github.com/Nixtla/neuralforecast/pull/720
# Windows-based forecaster (an MLP on the last input_size values predicting h steps): every
# window is normalised with a per-window standard scaler fitted on its input lags
# (scaler_type='standard'); the model is trained on the scaled target; the validation loss is
# used for early stopping and for keeping the best weights. The PyTorch Lightning trainer is
# written out as a loop with val_check_steps / early_stop_patience_steps; the series are
# synthetic daily series with different levels (a weekly pattern plus noise).
import numpy as np
import torch
import torch.nn as nn


class MAE(nn.Module):
    is_distribution_output = False

    def forward(self, y, y_hat, mask=None):
        if mask is None:
            mask = torch.ones_like(y)
        return torch.sum(torch.abs(y - y_hat) * mask) / torch.sum(mask)


class TemporalNorm(nn.Module):
    """scaler_type='standard' over the unmasked (input) part of each window."""

    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def transform(self, x, mask):
        n = mask.sum(dim=1, keepdim=True).clamp(min=1.0)
        self.x_shift = (x * mask).sum(dim=1, keepdim=True) / n
        var = (((x - self.x_shift) * mask) ** 2).sum(dim=1, keepdim=True) / n
        self.x_scale = torch.sqrt(var) + self.eps
        return (x - self.x_shift) / self.x_scale

    def inverse_transform(self, z, x_shift, x_scale):
        return z * x_scale + x_shift


class MLPForecaster(nn.Module):
    def __init__(self, h, input_size, hidden_size=64, loss=None, valid_loss=None):
        super().__init__()
        self.h = h
        self.input_size = input_size
        self.loss = loss or MAE()
        self.valid_loss = valid_loss or self.loss
        self.scaler = TemporalNorm()
        self.mlp = nn.Sequential(nn.Linear(input_size, hidden_size), nn.ReLU(),
                                 nn.Linear(hidden_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, h))

    def forward(self, windows_batch):
        return self.mlp(windows_batch["insample_y"])

    def _create_windows(self, series, starts):
        L = self.input_size + self.h
        temporal = torch.stack([series[s:s + L] for s in starts])  # [Ws, L+H]
        mask = torch.ones_like(temporal)
        return {"temporal": torch.stack([temporal, mask], dim=-1)}  # [Ws, L+H, 2]: y, available_mask

    def _normalization(self, windows):
        temporal = windows["temporal"]
        temporal_data = temporal[:, :, :1]
        temporal_mask = temporal[:, :, 1].clone()
        if self.h > 0:
            temporal_mask[:, -self.h:] = 0.0
        temporal_mask = temporal_mask.unsqueeze(-1)
        temporal_data = self.scaler.transform(x=temporal_data, mask=temporal_mask)
        temporal = temporal.clone()
        temporal[:, :, :1] = temporal_data
        windows["temporal"] = temporal
        return windows

    def _inv_normalization(self, y_hat):
        y_scale = self.scaler.x_scale[:, :, 0]
        y_loc = self.scaler.x_shift[:, :, 0]
        return y_hat * y_scale + y_loc, y_loc, y_scale

    def _parse_windows(self, windows):
        insample_y = windows["temporal"][:, :self.input_size, 0]
        insample_mask = windows["temporal"][:, :self.input_size, 1]
        outsample_y = windows["temporal"][:, self.input_size:, 0]
        outsample_mask = windows["temporal"][:, self.input_size:, 1]
        return insample_y, insample_mask, outsample_y, outsample_mask

    def training_step(self, series, starts):
        windows = self._create_windows(series, starts)
        original_outsample_y = torch.clone(windows["temporal"][:, -self.h:, 0])
        windows = self._normalization(windows=windows)
        insample_y, insample_mask, outsample_y, outsample_mask = self._parse_windows(windows)
        windows_batch = dict(insample_y=insample_y, insample_mask=insample_mask)
        output = self(windows_batch)
        loss = self.loss(y=outsample_y, y_hat=output, mask=outsample_mask)
        return loss

    def _compute_valid_loss(self, outsample_y, output, outsample_mask):
        valid_loss = self.valid_loss(y=outsample_y, y_hat=output, mask=outsample_mask)
        return valid_loss

    def validation_step(self, series, starts):
        windows = self._create_windows(series, starts)
        original_outsample_y = torch.clone(windows["temporal"][:, -self.h:, 0])
        windows = self._normalization(windows=windows)
        insample_y, insample_mask, _, outsample_mask = self._parse_windows(windows)
        windows_batch = dict(insample_y=insample_y, insample_mask=insample_mask)
        output_batch = self(windows_batch)
        valid_loss = self._compute_valid_loss(outsample_y=original_outsample_y, output=output_batch,
                                              outsample_mask=outsample_mask)
        # the user's own check of the forecasts on the original scale
        y_hat_original, _, _ = self._inv_normalization(output_batch)
        mae_original = torch.mean(torch.abs(y_hat_original - original_outsample_y))
        return valid_loss, mae_original


def make_series(n_series, length, rng):
    t = np.arange(length)
    series = []
    for k in range(n_series):
        level = rng.uniform(20, 200)
        weekly = rng.uniform(0.1, 0.3) * level * np.sin(2 * np.pi * t / 7 + rng.uniform(0, 6.28))
        series.append(level + weekly + rng.normal(0, 0.04 * level, size=length))
    return torch.tensor(np.array(series), dtype=torch.float32)


def main():
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    h, input_size, val_size = 7, 28, 28
    Y = make_series(8, 300, rng)
    model = MLPForecaster(h=h, input_size=input_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    max_steps, val_check_steps, early_stop_patience_steps = 600, 50, 3
    train_end = Y.shape[1] - val_size
    best, best_step, bad_checks = float("inf"), -1, 0
    best_state = None
    for step in range(1, max_steps + 1):
        model.train()
        k = int(rng.integers(0, Y.shape[0]))
        starts = rng.integers(0, train_end - input_size - h, size=32)
        loss = model.training_step(Y[k], starts)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % val_check_steps == 0:
            model.eval()
            with torch.no_grad():
                vals = [model.validation_step(Y[j], np.arange(train_end - input_size, Y.shape[1] - input_size - h + 1))
                        for j in range(Y.shape[0])]
            valid_loss = float(torch.stack([v[0] for v in vals]).mean())
            mae_orig = float(torch.stack([v[1] for v in vals]).mean())
            print(f"step {step}: train_loss {loss.item():.4f} valid_loss {valid_loss:.3f} | forecast MAE on original scale {mae_orig:.3f}")
            if valid_loss < best:
                best, best_step, bad_checks = valid_loss, step, 0
                best_state = {n: p.detach().clone() for n, p in model.state_dict().items()}
            else:
                bad_checks += 1
                if bad_checks >= early_stop_patience_steps:
                    print(f"early stopping at step {step}")
                    break
    model.load_state_dict(best_state)
    print(f"best valid_loss {best:.3f} at step {best_step}")


if __name__ == "__main__":
    main()
