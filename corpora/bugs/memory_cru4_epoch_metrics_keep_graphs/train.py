# Source: boschresearch/Continuous-Recurrent-Units, lib/CRU.py + lib/losses.py, commit 79723e7772102cae8a78109e18d81beff9c7cac2
# Report: https://github.com/boschresearch/Continuous-Recurrent-Units/pull/4
# Continuous Recurrent Units (ICML 2022) trained on the interpolation task: half of the time steps of
# each sequence are hidden and the model predicts mean and variance at every step. The CRU cell is
# replaced by a GRU encoder with mean/variance heads; the data are synthetic noisy pendulum-like
# 2-D trajectories with irregular observation masks.
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn


def rmse(target, predicted, mask=None):
    """Root Mean Squared Error"""
    if mask is None:
        mask = torch.ones_like(predicted)
    else:
        assert mask.shape == predicted.shape == target.shape
    return torch.sqrt(torch.sum(mask * torch.square(target - predicted))/torch.sum(mask))


def mse(target, predicted, mask=None):
    """Mean Squared Error"""
    if mask is None:
        mask = torch.ones_like(predicted)
    else:
        assert mask.shape == predicted.shape == target.shape
    return torch.sum(mask * torch.square(target - predicted))/torch.sum(mask)


def GaussianNegLogLik(targets, pred_mean, pred_variance, mask=None, normalize_dim=False):
    assert pred_mean.shape == targets.shape == pred_variance.shape, f'pred_mean {pred_mean.shape} targets {targets.shape} pred_variance {pred_variance.shape}'

    epsilon = 1e-6 * torch.ones_like(pred_mean)
    pred_variance = torch.maximum(pred_variance, epsilon)

    if mask == None:
        mask = torch.ones_like(pred_mean)

    # sum over dimensions
    const = np.log(2 * np.pi)
    sample_dim_time_wise = mask * \
        (torch.log(pred_variance) + torch.square(pred_mean - targets) / pred_variance + const)
    sample_time_wise = 0.5 * torch.sum(sample_dim_time_wise, -1)

    # divide by number of observed dimensions if normalize_dim
    if normalize_dim:
        num_dim_observed = torch.sum(mask, -1)
        sample_time_wise = sample_time_wise / num_dim_observed

    # mean over time steps
    sample_wise = torch.mean(sample_time_wise, 1)

    return torch.mean(sample_wise)


class CRU(nn.Module):
    def __init__(self, target_dim, lsd, args):
        super().__init__()
        self.args = args
        self._device = torch.device('cpu')
        self.bernoulli_output = False
        self._enc = nn.Linear(target_dim + 2, lsd)
        self._rnn = nn.GRU(lsd, lsd, batch_first=True, bidirectional=True)
        self._dec_mean = nn.Linear(2 * lsd, target_dim)
        self._dec_var = nn.Sequential(nn.Linear(2 * lsd, target_dim), nn.Softplus())

    def forward(self, obs_batch, time_points=None, obs_valid=None):
        valid = obs_valid[..., None].float()
        x = torch.cat([obs_batch * valid, valid, time_points[..., None]], -1)
        h, _ = self._rnn(torch.tanh(self._enc(x)))
        return self._dec_mean(h), self._dec_var(h) + 1e-4, [h]

    # new code component
    def interpolation(self, data, track_gradient=True):
        obs, truth, obs_valid, obs_times, mask_truth, mask_obs = [
            j.to(self._device) for j in data]

        obs_times = self.args.ts * obs_times

        with torch.set_grad_enabled(track_gradient):
            output_mean, output_var, intermediates = self.forward(
                obs_batch=obs, time_points=obs_times, obs_valid=obs_valid)

            loss = GaussianNegLogLik(
                output_mean, truth, output_var, mask=mask_truth)
            # compute metric on imputed points only
            mask_imput = (~obs_valid[...,None]) * mask_truth
            imput_loss = GaussianNegLogLik(output_mean, truth, output_var, mask=mask_imput)
            imput_mse = mse(truth, output_mean, mask=mask_imput)

        return loss, output_mean, output_var, obs, truth, mask_obs, mask_truth, intermediates, imput_loss, imput_mse

    def train_epoch(self, dl, optimizer):
        epoch_ll = 0
        epoch_rmse = 0
        epoch_mse = 0

        if self.args.task == 'extrapolation' or self.args.task == 'interpolation':
            epoch_imput_ll = 0
            epoch_imput_mse = 0

        for i, data in enumerate(dl):

            if self.args.task == 'interpolation':
                loss, output_mean, output_var, obs, truth, mask_obs, mask_truth, intermediates, imput_loss, imput_mse = self.interpolation(
                    data)
            else:
                raise Exception('Unknown task')

            # check for NaNs
            if torch.any(torch.isnan(loss)):
                print('--NAN in loss')

            # backpropagation
            optimizer.zero_grad()
            loss.backward()
            if self.args.grad_clip:
                nn.utils.clip_grad_norm_(self.parameters(), 1)
            optimizer.step()

            # aggregate metrics and intermediates over entire epoch
            epoch_ll += loss
            epoch_rmse += rmse(truth, output_mean, mask_truth).item()
            epoch_mse += mse(truth, output_mean, mask_truth).item()

            if self.args.task == 'extrapolation' or self.args.task == 'interpolation':
                epoch_imput_ll += imput_loss
                epoch_imput_mse += imput_mse
                imput_metrics = [epoch_imput_ll/(i+1), epoch_imput_mse/(i+1)]
            else:
                imput_metrics = None

        return epoch_ll/(i+1), epoch_rmse/(i+1), epoch_mse/(i+1), [output_mean, output_var], intermediates, [obs, truth, mask_obs], imput_metrics


def make_pendulum(n, t=50, seed=0):
    rng = np.random.RandomState(seed)
    times = np.sort(rng.uniform(0, 1, (n, t)), axis=1)
    freq = rng.uniform(2, 5, (n, 1))
    phase = rng.uniform(0, 2 * np.pi, (n, 1))
    truth = np.stack([np.sin(2 * np.pi * freq * times + phase), np.cos(2 * np.pi * freq * times + phase)], -1)
    obs = truth + 0.05 * rng.randn(*truth.shape)
    obs_valid = rng.rand(n, t) < 0.5
    mask_truth = np.ones_like(truth)
    mask_obs = np.repeat(obs_valid[..., None], 2, -1)
    return [torch.tensor(obs, dtype=torch.float32), torch.tensor(truth, dtype=torch.float32),
            torch.tensor(obs_valid), torch.tensor(times, dtype=torch.float32),
            torch.tensor(mask_truth, dtype=torch.float32), torch.tensor(mask_obs)]


def main():
    torch.manual_seed(0)
    args = SimpleNamespace(task='interpolation', ts=1.0, grad_clip=True, lr=1e-3, epochs=5)
    data = make_pendulum(640)
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*data), batch_size=32, shuffle=True)
    model = CRU(target_dim=2, lsd=32, args=args)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        train_ll, train_rmse, train_mse, _, _, _, imput_metrics = model.train_epoch(dl, optimizer)
        print('Train - epoch: {}, loss: {:.4f}, rmse: {:.4f}, imput_ll: {:.4f}, imput_mse: {:.4f}'.format(
            epoch, train_ll, train_rmse, imput_metrics[0], imput_metrics[1]))


if __name__ == "__main__":
    main()
