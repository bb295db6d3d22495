# Source: yang-song/score_sde_pytorch, losses.py, run_lib.py, models/ema.py, models/utils.py, models/layers.py, models/layerspp.py, models/ncsnpp.py, sde_lib.py, configs/ve/cifar10_ncsnpp_continuous.py, commit cb1f359f4aadf0ff9a5e122fe8fffc9451fd6e44
# https://github.com/yang-song/score_sde_pytorch
#
# Continuous-time denoising score matching with the VE SDE (sigma 0.01 -> 50), NCSN++-style score
# network (Gaussian Fourier embedding of log sigma, BigGAN residual blocks whose last conv is initialised
# at scale 1e-10, output divided by sigma), Adam with linear warmup + grad clipping, EMA of the weights,
# and an evaluation step that swaps the EMA weights in and out through .data under no_grad.
# Adaptation: ml_collections/tensorflow datasets are not available: config as SimpleNamespace, CIFAR-10
# -> synthetic 3x16x16 images in [0, 1]; NCSN++ reduced to 1 down level and 2 residual blocks of 32
# channels without FIR / attention / progressive input; 1.3M iterations -> 180 with warmup 5000 -> 240
# (the run ends inside the warmup, as the first 180 steps of the real run do); fixed seeds.
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


# ----------------------------------------------------------------------------- configs
def get_config():
  config = SimpleNamespace()
  config.training = SimpleNamespace(batch_size=16, n_iters=180, log_freq=20, eval_freq=40,
                                    likelihood_weighting=False, continuous=True, reduce_mean=False, sde='vesde')
  config.data = SimpleNamespace(image_size=16, centered=False, num_channels=3)
  config.model = SimpleNamespace(sigma_min=0.01, sigma_max=50, num_scales=1000, dropout=0.1,
                                 embedding_type='fourier', name='ncsnpp', scale_by_sigma=True, ema_rate=0.999,
                                 nf=32, conditional=True, skip_rescale=True, init_scale=0., fourier_scale=16)
  config.optim = SimpleNamespace(weight_decay=0, optimizer='Adam', lr=2e-3, beta1=0.9, eps=1e-8,
                                 warmup=240, grad_clip=1.)
  config.seed = 42
  config.device = torch.device('cpu')
  return config


# ----------------------------------------------------------------------------- sde_lib.py
class VESDE:
  def __init__(self, sigma_min=0.01, sigma_max=50, N=1000):
    self.sigma_min = sigma_min
    self.sigma_max = sigma_max
    self.discrete_sigmas = torch.exp(torch.linspace(np.log(self.sigma_min), np.log(self.sigma_max), N))
    self.N = N

  @property
  def T(self):
    return 1

  def sde(self, x, t):
    sigma = self.sigma_min * (self.sigma_max / self.sigma_min) ** t
    drift = torch.zeros_like(x)
    diffusion = sigma * torch.sqrt(torch.tensor(2 * (np.log(self.sigma_max) - np.log(self.sigma_min)),
                                                device=t.device))
    return drift, diffusion

  def marginal_prob(self, x, t):
    std = self.sigma_min * (self.sigma_max / self.sigma_min) ** t
    mean = x
    return mean, std


# ----------------------------------------------------------------------------- models/layers.py
def variance_scaling(scale, mode, distribution, in_axis=1, out_axis=0, dtype=torch.float32, device='cpu'):
  """Ported from JAX. """

  def _compute_fans(shape, in_axis=1, out_axis=0):
    receptive_field_size = np.prod(shape) / shape[in_axis] / shape[out_axis]
    fan_in = shape[in_axis] * receptive_field_size
    fan_out = shape[out_axis] * receptive_field_size
    return fan_in, fan_out

  def init(shape, dtype=dtype, device=device):
    fan_in, fan_out = _compute_fans(shape, in_axis, out_axis)
    denominator = (fan_in + fan_out) / 2
    variance = scale / denominator
    return (torch.rand(*shape, dtype=dtype, device=device) * 2. - 1.) * np.sqrt(3 * variance)

  return init


def default_init(scale=1.):
  """The same initialization used in DDPM."""
  scale = 1e-10 if scale == 0 else scale
  return variance_scaling(scale, 'fan_avg', 'uniform')


def conv1x1(in_planes, out_planes, stride=1, bias=True, init_scale=1., padding=0):
  conv = nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, padding=padding, bias=bias)
  conv.weight.data = default_init(init_scale)(conv.weight.data.shape)
  nn.init.zeros_(conv.bias)
  return conv


def conv3x3(in_planes, out_planes, stride=1, bias=True, dilation=1, init_scale=1., padding=1):
  conv = nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=padding,
                   dilation=dilation, bias=bias)
  conv.weight.data = default_init(init_scale)(conv.weight.data.shape)
  nn.init.zeros_(conv.bias)
  return conv


# ----------------------------------------------------------------------------- models/layerspp.py
class GaussianFourierProjection(nn.Module):
  """Gaussian Fourier embeddings for noise levels."""

  def __init__(self, embedding_size=256, scale=1.0):
    super().__init__()
    self.W = nn.Parameter(torch.randn(embedding_size) * scale, requires_grad=False)

  def forward(self, x):
    x_proj = x[:, None] * self.W[None, :] * 2 * np.pi
    return torch.cat([torch.sin(x_proj), torch.cos(x_proj)], dim=-1)


class ResnetBlockBigGANpp(nn.Module):
  def __init__(self, act, in_ch, out_ch=None, temb_dim=None, down=False, dropout=0.1,
               skip_rescale=True, init_scale=0.):
    super().__init__()
    out_ch = out_ch if out_ch else in_ch
    self.GroupNorm_0 = nn.GroupNorm(num_groups=min(in_ch // 4, 32), num_channels=in_ch, eps=1e-6)
    self.down = down
    self.Conv_0 = conv3x3(in_ch, out_ch)
    if temb_dim is not None:
      self.Dense_0 = nn.Linear(temb_dim, out_ch)
      self.Dense_0.weight.data = default_init()(self.Dense_0.weight.shape)
      nn.init.zeros_(self.Dense_0.bias)
    self.GroupNorm_1 = nn.GroupNorm(num_groups=min(out_ch // 4, 32), num_channels=out_ch, eps=1e-6)
    self.Dropout_0 = nn.Dropout(dropout)
    self.Conv_1 = conv3x3(out_ch, out_ch, init_scale=init_scale)
    if in_ch != out_ch or down:
      self.Conv_2 = conv1x1(in_ch, out_ch)
    self.skip_rescale = skip_rescale
    self.act = act
    self.in_ch = in_ch
    self.out_ch = out_ch

  def forward(self, x, temb=None):
    h = self.act(self.GroupNorm_0(x))
    if self.down:
      h = F.avg_pool2d(h, 2)
      x = F.avg_pool2d(x, 2)
    h = self.Conv_0(h)
    # Add bias to each feature map conditioned on the time embedding
    if temb is not None:
      h += self.Dense_0(self.act(temb))[:, :, None, None]
    h = self.act(self.GroupNorm_1(h))
    h = self.Dropout_0(h)
    h = self.Conv_1(h)
    if self.in_ch != self.out_ch or self.down:
      x = self.Conv_2(x)
    if not self.skip_rescale:
      return x + h
    else:
      return (x + h) / np.sqrt(2.)


# ----------------------------------------------------------------------------- models/ncsnpp.py (reduced)
class NCSNpp(nn.Module):
  """NCSN++ model (one resolution level down and up)."""

  def __init__(self, config):
    super().__init__()
    self.config = config
    self.act = act = nn.SiLU()
    nf = config.model.nf
    self.embedding_type = config.model.embedding_type
    self.conditional = config.model.conditional
    modules = []
    modules.append(GaussianFourierProjection(embedding_size=nf, scale=config.model.fourier_scale))
    embed_dim = 2 * nf
    modules.append(nn.Linear(embed_dim, nf * 4))
    modules[-1].weight.data = default_init()(modules[-1].weight.shape)
    nn.init.zeros_(modules[-1].bias)
    modules.append(nn.Linear(nf * 4, nf * 4))
    modules[-1].weight.data = default_init()(modules[-1].weight.shape)
    nn.init.zeros_(modules[-1].bias)
    kw = dict(act=act, temb_dim=nf * 4, dropout=config.model.dropout,
              skip_rescale=config.model.skip_rescale, init_scale=config.model.init_scale)
    modules.append(conv3x3(config.data.num_channels, nf))
    modules.append(ResnetBlockBigGANpp(in_ch=nf, out_ch=nf, **kw))
    modules.append(ResnetBlockBigGANpp(in_ch=nf, out_ch=2 * nf, down=True, **kw))
    modules.append(ResnetBlockBigGANpp(in_ch=2 * nf, out_ch=2 * nf, **kw))
    modules.append(ResnetBlockBigGANpp(in_ch=3 * nf, out_ch=nf, **kw))
    modules.append(nn.GroupNorm(num_groups=min(nf // 4, 32), num_channels=nf, eps=1e-6))
    modules.append(conv3x3(nf, config.data.num_channels, init_scale=config.model.init_scale))
    self.all_modules = nn.ModuleList(modules)

  def forward(self, x, time_cond):
    modules = self.all_modules
    m_idx = 0
    # Gaussian Fourier features embeddings.
    used_sigmas = time_cond
    temb = modules[m_idx](torch.log(used_sigmas))
    m_idx += 1
    temb = modules[m_idx](temb)
    m_idx += 1
    temb = modules[m_idx](self.act(temb))
    m_idx += 1
    if not self.config.data.centered:
      # If input data is in [0, 1]
      x = 2 * x - 1.
    h0 = modules[m_idx](x)
    m_idx += 1
    h1 = modules[m_idx](h0, temb)
    m_idx += 1
    h = modules[m_idx](h1, temb)
    m_idx += 1
    h = modules[m_idx](h, temb)
    m_idx += 1
    h = F.interpolate(h, scale_factor=2, mode='nearest')
    h = modules[m_idx](torch.cat([h, h1], dim=1), temb)
    m_idx += 1
    h = self.act(modules[m_idx](h))
    m_idx += 1
    h = modules[m_idx](h)
    m_idx += 1
    assert m_idx == len(modules)
    if self.config.model.scale_by_sigma:
      used_sigmas = used_sigmas.reshape((x.shape[0], *([1] * len(x.shape[1:]))))
      h = h / used_sigmas
    return h


# ----------------------------------------------------------------------------- models/utils.py
def create_model(config):
  score_model = NCSNpp(config)
  score_model = score_model.to(config.device)
  score_model = torch.nn.DataParallel(score_model)
  return score_model


def get_model_fn(model, train=False):
  def model_fn(x, labels):
    if not train:
      model.eval()
      return model(x, labels)
    else:
      model.train()
      return model(x, labels)

  return model_fn


def get_score_fn(sde, model, train=False, continuous=False):
  model_fn = get_model_fn(model, train=train)

  def score_fn(x, t):
    if continuous:
      labels = sde.marginal_prob(torch.zeros_like(x), t)[1]
    else:
      # For VE-trained models, t=0 corresponds to the highest noise level
      labels = sde.T - t
      labels *= sde.N - 1
      labels = torch.round(labels).long()
    score = model_fn(x, labels)
    return score

  return score_fn


# ----------------------------------------------------------------------------- models/ema.py
class ExponentialMovingAverage:
  """
  Maintains (exponential) moving average of a set of parameters.
  """

  def __init__(self, parameters, decay, use_num_updates=True):
    if decay < 0.0 or decay > 1.0:
      raise ValueError('Decay must be between 0 and 1')
    self.decay = decay
    self.num_updates = 0 if use_num_updates else None
    self.shadow_params = [p.clone().detach()
                          for p in parameters if p.requires_grad]
    self.collected_params = []

  def update(self, parameters):
    decay = self.decay
    if self.num_updates is not None:
      self.num_updates += 1
      decay = min(decay, (1 + self.num_updates) / (10 + self.num_updates))
    one_minus_decay = 1.0 - decay
    with torch.no_grad():
      parameters = [p for p in parameters if p.requires_grad]
      for s_param, param in zip(self.shadow_params, parameters):
        s_param.sub_(one_minus_decay * (s_param - param))

  def copy_to(self, parameters):
    parameters = [p for p in parameters if p.requires_grad]
    for s_param, param in zip(self.shadow_params, parameters):
      if param.requires_grad:
        param.data.copy_(s_param.data)

  def store(self, parameters):
    self.collected_params = [param.clone() for param in parameters]

  def restore(self, parameters):
    for c_param, param in zip(self.collected_params, parameters):
      param.data.copy_(c_param.data)


# ----------------------------------------------------------------------------- losses.py
def get_optimizer(config, params):
  if config.optim.optimizer == 'Adam':
    optimizer = optim.Adam(params, lr=config.optim.lr, betas=(config.optim.beta1, 0.999), eps=config.optim.eps,
                           weight_decay=config.optim.weight_decay)
  else:
    raise NotImplementedError(
      f'Optimizer {config.optim.optimizer} not supported yet!')
  return optimizer


def optimization_manager(config):
  """Returns an optimize_fn based on `config`."""

  def optimize_fn(optimizer, params, step, lr=config.optim.lr,
                  warmup=config.optim.warmup,
                  grad_clip=config.optim.grad_clip):
    """Optimizes with warmup and gradient clipping (disabled if negative)."""
    if warmup > 0:
      for g in optimizer.param_groups:
        g['lr'] = lr * np.minimum(step / warmup, 1.0)
    if grad_clip >= 0:
      torch.nn.utils.clip_grad_norm_(params, max_norm=grad_clip)
    optimizer.step()

  return optimize_fn


def get_sde_loss_fn(sde, train, reduce_mean=True, continuous=True, likelihood_weighting=True, eps=1e-5):
  reduce_op = torch.mean if reduce_mean else lambda *args, **kwargs: 0.5 * torch.sum(*args, **kwargs)

  def loss_fn(model, batch):
    score_fn = get_score_fn(sde, model, train=train, continuous=continuous)
    t = torch.rand(batch.shape[0], device=batch.device) * (sde.T - eps) + eps
    z = torch.randn_like(batch)
    mean, std = sde.marginal_prob(batch, t)
    perturbed_data = mean + std[:, None, None, None] * z
    score = score_fn(perturbed_data, t)

    if not likelihood_weighting:
      losses = torch.square(score * std[:, None, None, None] + z)
      losses = reduce_op(losses.reshape(losses.shape[0], -1), dim=-1)
    else:
      g2 = sde.sde(torch.zeros_like(batch), t)[1] ** 2
      losses = torch.square(score + z / std[:, None, None, None])
      losses = reduce_op(losses.reshape(losses.shape[0], -1), dim=-1) * g2

    loss = torch.mean(losses)
    return loss

  return loss_fn


def get_step_fn(sde, train, optimize_fn=None, reduce_mean=False, continuous=True, likelihood_weighting=False):
  loss_fn = get_sde_loss_fn(sde, train, reduce_mean=reduce_mean,
                            continuous=True, likelihood_weighting=likelihood_weighting)

  def step_fn(state, batch):
    model = state['model']
    if train:
      optimizer = state['optimizer']
      optimizer.zero_grad()
      loss = loss_fn(model, batch)
      loss.backward()
      optimize_fn(optimizer, model.parameters(), step=state['step'])
      state['step'] += 1
      state['ema'].update(model.parameters())
    else:
      with torch.no_grad():
        ema = state['ema']
        ema.store(model.parameters())
        ema.copy_to(model.parameters())
        loss = loss_fn(model, batch)
        ema.restore(model.parameters())
    return loss

  return step_fn


# ----------------------------------------------------------------------------- synthetic CIFAR-like data
def make_dataset(n, size, seed):
  g = torch.Generator().manual_seed(seed)
  yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing='ij')
  cx = torch.rand(n, 1, 1, generator=g) * 1.2 - 0.6
  cy = torch.rand(n, 1, 1, generator=g) * 1.2 - 0.6
  r = torch.rand(n, 1, 1, generator=g) * 0.3 + 0.25
  blob = torch.sigmoid((r - torch.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)) * 20.)
  colour = torch.rand(n, 3, 1, 1, generator=g)
  background = torch.rand(n, 3, 1, 1, generator=g) * 0.3
  img = background + blob[:, None] * (colour - background)
  return img.permute(0, 2, 3, 1).contiguous()   # NHWC like the tf.data pipeline


def batches(data, batch_size, seed):
  g = torch.Generator().manual_seed(seed)
  while True:
    perm = torch.randperm(data.shape[0], generator=g)
    for i in range(0, data.shape[0] - batch_size + 1, batch_size):
      yield {'image': data[perm[i:i + batch_size]]}


# ----------------------------------------------------------------------------- run_lib.py train()
def main():
  config = get_config()
  torch.manual_seed(config.seed)
  np.random.seed(config.seed)
  torch.set_num_threads(1)

  score_model = create_model(config)
  ema = ExponentialMovingAverage(score_model.parameters(), decay=config.model.ema_rate)
  optimizer = get_optimizer(config, score_model.parameters())
  state = dict(optimizer=optimizer, model=score_model, ema=ema, step=0)
  initial_step = int(state['step'])

  train_iter = batches(make_dataset(2048, config.data.image_size, 0), config.training.batch_size, 1)
  eval_iter = batches(make_dataset(512, config.data.image_size, 2), config.training.batch_size, 3)
  scaler = (lambda x: x * 2. - 1.) if config.data.centered else (lambda x: x)

  sde = VESDE(sigma_min=config.model.sigma_min, sigma_max=config.model.sigma_max, N=config.model.num_scales)

  optimize_fn = optimization_manager(config)
  continuous = config.training.continuous
  reduce_mean = config.training.reduce_mean
  likelihood_weighting = config.training.likelihood_weighting
  train_step_fn = get_step_fn(sde, train=True, optimize_fn=optimize_fn,
                              reduce_mean=reduce_mean, continuous=continuous,
                              likelihood_weighting=likelihood_weighting)
  eval_step_fn = get_step_fn(sde, train=False, optimize_fn=optimize_fn,
                             reduce_mean=reduce_mean, continuous=continuous,
                             likelihood_weighting=likelihood_weighting)

  num_train_steps = config.training.n_iters
  print("Starting training loop at step %d." % (initial_step,))
  train_hist, eval_hist = [], []
  for step in range(initial_step, num_train_steps + 1):
    batch = next(train_iter)['image'].to(config.device).float()
    batch = batch.permute(0, 3, 1, 2)
    batch = scaler(batch)
    # Execute one training step
    loss = train_step_fn(state, batch)
    train_hist.append(loss.item())
    if step % config.training.log_freq == 0:
      print("step: %d, training_loss: %.5e" % (step, loss.item()))

    # Report the loss on an evaluation dataset periodically
    if step % config.training.eval_freq == 0:
      eval_batch = next(eval_iter)['image'].to(config.device).float()
      eval_batch = eval_batch.permute(0, 3, 1, 2)
      eval_batch = scaler(eval_batch)
      eval_loss = eval_step_fn(state, eval_batch)
      eval_hist.append(eval_loss.item())
      print("step: %d, eval_loss: %.5e" % (step, eval_loss.item()))

  first = float(np.mean(train_hist[:20]))
  last = float(np.mean(train_hist[-20:]))
  print("[summary] training_loss(mean of 20 steps) first=%.2f last=%.2f decreased=%s; eval_loss(ema) first=%.2f last=%.2f"
        % (first, last, last < first, eval_hist[0], eval_hist[-1]))


if __name__ == "__main__":
  main()
