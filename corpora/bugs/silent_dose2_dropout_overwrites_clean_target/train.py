# Source: ICDM-UESTC/DOSE, src/DOSE/learner.py, src/DOSE/model.py, src/DOSE/params.py, src/DOSE/inference.py, commit a892ede0001f468624bcaae299dbd4f00e93f947
# Report: https://github.com/ICDM-UESTC/DOSE/pull/2
from math import sqrt

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class AttrDict(dict):
  def __init__(self, *args, **kwargs):
      super(AttrDict, self).__init__(*args, **kwargs)
      self.__dict__ = self


params = AttrDict(
    batch_size=16,
    learning_rate=2e-4 * 5,
    max_grad_norm=None,
    dropout_rate = 0.5,
    # Model params
    residual_layers=6,
    residual_channels=32,
    dilation_cycle_length=6,
    step1 = 35,
    step2 = 15,
    noise_schedule=np.linspace(1e-4, 0.035, 50).tolist(),
)


def Conv1d(*args, **kwargs):
  layer = nn.Conv1d(*args, **kwargs)
  nn.init.kaiming_normal_(layer.weight)
  return layer


class DiffusionEmbedding(nn.Module):
  def __init__(self, max_steps):
    super().__init__()
    self.register_buffer('embedding', self._build_embedding(max_steps), persistent=False)
    self.projection1 = nn.Linear(128, 512)
    self.projection2 = nn.Linear(512, 512)

  def forward(self, diffusion_step):
    x = self.embedding[diffusion_step]
    x = self.projection1(x)
    x = F.silu(x)
    x = self.projection2(x)
    x = F.silu(x)
    return x

  def _build_embedding(self, max_steps):
    steps = torch.arange(max_steps).unsqueeze(1)  # [T,1]
    dims = torch.arange(64).unsqueeze(0)          # [1,64]
    table = steps * 10.0**(dims * 4.0 / 63.0)     # [T,64]
    table = torch.cat([torch.sin(table), torch.cos(table)], dim=1)
    return table


class ResidualBlock(nn.Module):
  def __init__(self, residual_channels, dilation):
    super().__init__()
    self.dilated_conv = Conv1d(residual_channels, 2 * residual_channels, 3, padding=dilation, dilation=dilation)
    self.diffusion_projection = nn.Linear(512, residual_channels)
    self.output_projection = Conv1d(residual_channels, 2 * residual_channels, 1)

  def forward(self, x, diffusion_step):
    diffusion_step = self.diffusion_projection(diffusion_step).unsqueeze(-1)
    y = x + diffusion_step
    y = self.dilated_conv(y)
    gate, filter = torch.chunk(y, 2, dim=1)
    y = torch.sigmoid(gate) * torch.tanh(filter)
    y = self.output_projection(y)
    residual, skip = torch.chunk(y, 2, dim=1)
    return (x + residual) / sqrt(2.0), skip


class DOSE(nn.Module):
  def __init__(self, params):
    super().__init__()
    self.params = params
    self.version46_input_projection = Conv1d(2, params.residual_channels, 1)
    self.diffusion_embedding = DiffusionEmbedding(len(params.noise_schedule))
    self.residual_layers = nn.ModuleList([
        ResidualBlock(params.residual_channels, 2**(i % params.dilation_cycle_length))
        for i in range(params.residual_layers)
    ])
    self.skip_projection = Conv1d(params.residual_channels, params.residual_channels, 1)
    self.output_projection = Conv1d(params.residual_channels, 1, 1)
    nn.init.zeros_(self.output_projection.weight)

  def forward(self, audio, diffusion_step, spectrogram=None):
    audio = audio.unsqueeze(1)
    spectrogram = spectrogram.unsqueeze(1)
    x = torch.cat([audio, spectrogram], dim=1)
    x = self.version46_input_projection(x)
    x = F.relu(x)
    diffusion_step = self.diffusion_embedding(diffusion_step)
    skip = None
    for layer in self.residual_layers:
      x, skip_connection = layer(x, diffusion_step)
      skip = skip_connection if skip is None else skip_connection + skip
    x = skip / sqrt(len(self.residual_layers))
    x = self.skip_projection(x)
    x = F.relu(x)
    x = self.output_projection(x)
    return x


class DOSELearner:
  def __init__(self, model, dataset, optimizer, params):
    self.model = model
    self.dataset = dataset
    self.optimizer = optimizer
    self.params = params
    self.step = 0
    beta = np.array(self.params.noise_schedule)
    noise_level = np.cumprod(1 - beta)
    self.noise_level = torch.tensor(noise_level.astype(np.float32))
    self.loss_fn = nn.L1Loss()
    self.dropout = params.dropout_rate

  def train_step(self, features):
    for param in self.model.parameters():
      param.grad = None

    audio = features['clean_speech']
    noisy = features['noisy_speech']


    N,T= audio.shape
    device = audio.device
    self.noise_level = self.noise_level.to(device)

    t = torch.randint(0, len(self.params.noise_schedule), [N], device=audio.device)

    noise_scale = self.noise_level[t].unsqueeze(1)
    noise_scale_sqrt = noise_scale**0.5
    noise = torch.randn_like(audio)

    masks = torch.bernoulli(torch.zeros(N)+self.dropout)

    for i in range(masks.size(0)):
      if masks[i] == 1:
        audio[i] = torch.randn_like(audio[i])

    noisy_audio = noise_scale_sqrt * audio + (1.0 - noise_scale)**0.5 * noise
    predicted = self.model(noisy_audio, t, noisy)
    loss = self.loss_fn(audio, predicted.squeeze(1))

    loss.backward()
    self.grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.params.max_grad_norm or 1e9)
    self.optimizer.step()
    return loss


@torch.no_grad()
def predict(model, condition, params):
  # DOSE two-step inference (inference.py predict(), fast_sampling=False)
  training_noise_schedule = np.array(params.noise_schedule)
  talpha_cum = np.cumprod(1 - training_noise_schedule)
  noise_level = torch.tensor(talpha_cum.astype(np.float32))
  model.eval()
  audio = condition
  for i, time_step in enumerate([params.step1, params.step2]):
    if i == 1:
      audio = 0.5*(audio + condition)
    noise_scale = noise_level[torch.full([1], time_step)].unsqueeze(1)
    noise = torch.randn_like(condition)
    audio = noise_scale**0.5 * audio + (1.0 - noise_scale)**0.5 * noise
    audio = model(audio, torch.full([condition.shape[0]], time_step), condition)
    audio = torch.clamp(audio, -1.0, 1.0).squeeze(1)
  model.train()
  return audio


def make_pairs(n, T, rng):
  # "speech": a few decaying harmonics; the noisy version adds white and hum noise
  t = np.arange(T) / 8000.0
  clean = np.zeros((n, T), np.float32)
  for k in range(n):
    f0 = rng.uniform(100, 300)
    env = np.exp(-((t - rng.uniform(0.02, 0.1)) ** 2) / 0.002)
    clean[k] = sum(rng.uniform(0.1, 0.3) / h * np.sin(2 * np.pi * f0 * h * t + rng.uniform(0, 6)) for h in (1, 2, 3)) * env
  noisy = clean + rng.normal(0, 0.08, clean.shape).astype(np.float32)
  return torch.from_numpy(clean), torch.from_numpy(noisy)


def snr(est, ref):
  return float(10 * torch.log10((ref ** 2).sum() / ((est - ref) ** 2).sum()))


def main():
  torch.manual_seed(0)
  torch.set_num_threads(1)
  rng = np.random.RandomState(0)
  clean, noisy = make_pairs(256, 512, rng)
  val_clean, val_noisy = make_pairs(32, 512, rng)
  model = DOSE(params)
  opt = torch.optim.Adam(model.parameters(), lr=params.learning_rate)
  learner = DOSELearner(model, None, opt, params)
  print(f"validation SNR of the noisy input: {snr(val_noisy, val_clean):.2f} dB")
  for epoch in range(5):
    perm = torch.randperm(256)
    losses = []
    for b in range(0, 256, params.batch_size):
      idx = perm[b:b + params.batch_size]
      features = {'clean_speech': clean[idx].clone(), 'noisy_speech': noisy[idx].clone()}
      losses.append(learner.train_step(features).item())
      learner.step += 1
    enhanced = predict(model, val_noisy, params)
    print(f"epoch {epoch}: train L1 {np.mean(losses):.4f} | validation SNR of the enhanced speech {snr(enhanced, val_clean):.2f} dB, "
          f"L1 to clean {float((enhanced - val_clean).abs().mean()):.4f}")


if __name__ == '__main__':
  main()
