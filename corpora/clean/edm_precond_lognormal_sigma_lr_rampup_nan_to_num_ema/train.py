# Source: NVlabs/edm, training/training_loop.py, training/loss.py, training/networks.py, train.py, commit 008a4e5316c8e3bfe61a62f874bddba254295afb
# https://github.com/NVlabs/edm/blob/main/training/training_loop.py
#
# EDM (Karras et al. 2022) training: EDMPrecond wraps the network with c_skip/c_out/c_in/c_noise, sigma drawn
# log-normally per image, per-pixel loss weighted by (sigma^2+sigma_data^2)/(sigma*sigma_data)^2 returned
# UNREDUCED; backward on loss.sum() * loss_scaling / batch_gpu_total over accumulation rounds; the LR is set
# by hand to lr * min(cur_nimg / lr_rampup, 1) (0 on the first step); gradients sanitised in place with
# torch.nan_to_num; EMA with a half-life that ramps with the images seen, updated with lerp under no_grad.
# Adaptation: dnnlib/torch_utils/distributed launch not available: single process, ddp_sync/training_stats
# removed, dataset -> synthetic uint8 3x16x16 images with 4 classes; the DhariwalUNet/SongUNet are replaced
# by a small conditional conv net with the same call signature (x, noise_labels, class_labels,
# augment_labels); no augment pipe; lr_rampup 10000 kimg -> 6 kimg while the run lasts 3.2 kimg (the whole
# run is inside the ramp, as the first 3.2 kimg of a real run are); batch 512 -> 32 in 2 accumulation rounds;
# ema_halflife 500 kimg (rampup ratio 0.05 kept); lr 10e-4 -> 2e-3; status printed every 0.32 kimg.
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


#----------------------------------------------------------------------------
# training/loss.py

class EDMLoss:
    def __init__(self, P_mean=-1.2, P_std=1.2, sigma_data=0.5):
        self.P_mean = P_mean
        self.P_std = P_std
        self.sigma_data = sigma_data

    def __call__(self, net, images, labels=None, augment_pipe=None):
        rnd_normal = torch.randn([images.shape[0], 1, 1, 1], device=images.device)
        sigma = (rnd_normal * self.P_std + self.P_mean).exp()
        weight = (sigma ** 2 + self.sigma_data ** 2) / (sigma * self.sigma_data) ** 2
        y, augment_labels = augment_pipe(images) if augment_pipe is not None else (images, None)
        n = torch.randn_like(y) * sigma
        D_yn = net(y + n, sigma, labels, augment_labels=augment_labels)
        loss = weight * ((D_yn - y) ** 2)
        return loss

#----------------------------------------------------------------------------
# Stand-in for DhariwalUNet/SongUNet: same call signature, much smaller.

class TinyCondNet(torch.nn.Module):
    def __init__(self, img_resolution, in_channels, out_channels, label_dim=0, model_channels=32, augment_dim=0):
        super().__init__()
        self.map_noise = torch.nn.Linear(16, model_channels * 4)
        self.map_label = torch.nn.Linear(label_dim, model_channels * 4, bias=False) if label_dim else None
        self.conv_in = torch.nn.Conv2d(in_channels, model_channels, 3, padding=1)
        self.down = torch.nn.Conv2d(model_channels, model_channels * 2, 3, stride=2, padding=1)
        self.mid = torch.nn.Conv2d(model_channels * 2, model_channels * 2, 3, padding=1)
        self.up = torch.nn.ConvTranspose2d(model_channels * 2, model_channels, 4, stride=2, padding=1)
        self.conv_out = torch.nn.Conv2d(model_channels * 2, out_channels, 3, padding=1)
        torch.nn.init.zeros_(self.conv_out.weight)
        torch.nn.init.zeros_(self.conv_out.bias)

    def forward(self, x, noise_labels, class_labels, augment_labels=None):
        freqs = torch.arange(8, dtype=torch.float32, device=x.device)
        freqs = (1 / 10000) ** (freqs / 8)
        emb = noise_labels.ger(freqs)
        emb = torch.cat([emb.cos(), emb.sin()], dim=1)
        emb = F.silu(self.map_noise(emb))
        if self.map_label is not None:
            emb = emb + self.map_label(class_labels)
        scale, shift = emb.chunk(2, dim=1)
        h0 = F.silu(self.conv_in(x))
        h = F.silu(self.down(h0))
        h = F.silu(self.mid(h) * (1 + scale[:, :, None, None]) + shift[:, :, None, None])
        h = F.silu(self.up(h))
        return self.conv_out(torch.cat([h, h0], dim=1))

#----------------------------------------------------------------------------
# training/networks.py

class EDMPrecond(torch.nn.Module):
    def __init__(self,
        img_resolution,                     # Image resolution.
        img_channels,                       # Number of color channels.
        label_dim       = 0,                # Number of class labels, 0 = unconditional.
        use_fp16        = False,            # Execute the underlying model at FP16 precision?
        sigma_min       = 0,                # Minimum supported noise level.
        sigma_max       = float('inf'),     # Maximum supported noise level.
        sigma_data      = 0.5,              # Expected standard deviation of the training data.
        model_type      = 'DhariwalUNet',   # Class name of the underlying model.
        **model_kwargs,                     # Keyword arguments for the underlying model.
    ):
        super().__init__()
        self.img_resolution = img_resolution
        self.img_channels = img_channels
        self.label_dim = label_dim
        self.use_fp16 = use_fp16
        self.sigma_min = sigma_min
        self.sigma_max = sigma_max
        self.sigma_data = sigma_data
        self.model = globals()[model_type](img_resolution=img_resolution, in_channels=img_channels, out_channels=img_channels, label_dim=label_dim, **model_kwargs)

    def forward(self, x, sigma, class_labels=None, force_fp32=False, **model_kwargs):
        x = x.to(torch.float32)
        sigma = sigma.to(torch.float32).reshape(-1, 1, 1, 1)
        class_labels = None if self.label_dim == 0 else torch.zeros([1, self.label_dim], device=x.device) if class_labels is None else class_labels.to(torch.float32).reshape(-1, self.label_dim)
        dtype = torch.float16 if (self.use_fp16 and not force_fp32 and x.device.type == 'cuda') else torch.float32

        c_skip = self.sigma_data ** 2 / (sigma ** 2 + self.sigma_data ** 2)
        c_out = sigma * self.sigma_data / (sigma ** 2 + self.sigma_data ** 2).sqrt()
        c_in = 1 / (self.sigma_data ** 2 + sigma ** 2).sqrt()
        c_noise = sigma.log() / 4

        F_x = self.model((c_in * x).to(dtype), c_noise.flatten(), class_labels=class_labels, **model_kwargs)
        assert F_x.dtype == dtype
        D_x = c_skip * x + c_out * F_x.to(torch.float32)
        return D_x

    def round_sigma(self, sigma):
        return torch.as_tensor(sigma)

#----------------------------------------------------------------------------
# Synthetic dataset (uint8 images + one-hot labels, as ImageFolderDataset yields them)

def make_dataset(n, res, label_dim, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, label_dim, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, res), torch.linspace(-1, 1, res), indexing='ij')
    cx = (y % 2).float()[:, None, None] * 0.8 - 0.4
    cy = (y // 2).float()[:, None, None] * 0.8 - 0.4
    r = 0.3 + 0.15 * torch.rand(n, 1, 1, generator=g)
    blob = torch.sigmoid((r - ((xx - cx) ** 2 + (yy - cy) ** 2).sqrt()) * 25)
    colour = torch.rand(n, 3, 1, 1, generator=g)
    img = 0.1 + blob[:, None] * colour * 0.9
    images = (img * 255).round().clamp(0, 255).to(torch.uint8)
    labels = F.one_hot(y, label_dim).float()
    return images, labels


def infinite_iterator(images, labels, batch, seed):
    g = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(len(images), generator=g)
        for i in range(0, len(images) - batch + 1, batch):
            idx = perm[i:i + batch]
            yield images[idx], labels[idx]

#----------------------------------------------------------------------------
# training/training_loop.py (reduced)

def training_loop(
    seed                = 0,        # Global random seed.
    batch_size          = 32,       # Total batch size for one training iteration.
    batch_gpu           = 16,       # Limit batch size per GPU, None = no limit.
    total_kimg          = 3.2,      # Training duration, measured in thousands of training images.
    ema_halflife_kimg   = 500,      # Half-life of the exponential moving average (EMA) of model weights.
    ema_rampup_ratio    = 0.05,     # EMA ramp-up coefficient, None = no rampup.
    lr_rampup_kimg      = 6,        # Learning rate ramp-up duration.
    loss_scaling        = 1,        # Loss scaling factor for reducing FP16 under/overflows.
    kimg_per_tick       = 0.32,     # Interval of progress prints.
    optimizer_kwargs    = dict(lr=2e-3, betas=[0.9, 0.999], eps=1e-8),
    device              = torch.device('cpu'),
):
    # Initialize.
    np.random.seed(seed % (1 << 31))
    torch.manual_seed(np.random.randint(1 << 31))

    # Select batch size per GPU.
    batch_gpu_total = batch_size
    if batch_gpu is None or batch_gpu > batch_gpu_total:
        batch_gpu = batch_gpu_total
    num_accumulation_rounds = batch_gpu_total // batch_gpu
    assert batch_size == batch_gpu * num_accumulation_rounds

    # Load dataset.
    images_all, labels_all = make_dataset(2048, 16, 4, seed=1)
    dataset_iterator = infinite_iterator(images_all, labels_all, batch_gpu, seed=2)

    # Construct network.
    net = EDMPrecond(img_resolution=16, img_channels=3, label_dim=4, model_type='TinyCondNet', model_channels=32)
    net.train().requires_grad_(True).to(device)

    # Setup optimizer.
    loss_fn = EDMLoss(P_mean=-1.2, P_std=1.2, sigma_data=0.5)
    optimizer = torch.optim.Adam(params=net.parameters(), **optimizer_kwargs)
    augment_pipe = None
    ema = copy.deepcopy(net).eval().requires_grad_(False)

    # Fixed evaluation batch for the EMA network (added).
    g = torch.Generator().manual_seed(99)
    ev_images, ev_labels = make_dataset(256, 16, 4, seed=3)
    ev_images = ev_images.to(torch.float32) / 127.5 - 1
    ev_sigma = (torch.randn([256, 1, 1, 1], generator=g) * 1.2 - 1.2).exp()
    ev_noise = torch.randn(ev_images.shape, generator=g) * ev_sigma

    def ema_eval_loss():
        with torch.no_grad():
            weight = (ev_sigma ** 2 + 0.5 ** 2) / (ev_sigma * 0.5) ** 2
            D = ema(ev_images + ev_noise, ev_sigma, ev_labels)
            return (weight * (D - ev_images) ** 2).mean().item()

    # Train.
    print(f'Training for {total_kimg} kimg...')
    ema_first = ema_eval_loss()
    cur_nimg = 0
    tick_start_nimg = cur_nimg
    cur_tick = 0
    tick_losses, ticks = [], []
    while True:

        # Accumulate gradients.
        optimizer.zero_grad(set_to_none=True)
        for round_idx in range(num_accumulation_rounds):
            images, labels = next(dataset_iterator)
            images = images.to(device).to(torch.float32) / 127.5 - 1
            labels = labels.to(device)
            loss = loss_fn(net=net, images=images, labels=labels, augment_pipe=augment_pipe)
            tick_losses.append(loss.mean().item())
            loss.sum().mul(loss_scaling / batch_gpu_total).backward()

        # Update weights.
        for g in optimizer.param_groups:
            g['lr'] = optimizer_kwargs['lr'] * min(cur_nimg / max(lr_rampup_kimg * 1000, 1e-8), 1)
        for param in net.parameters():
            if param.grad is not None:
                torch.nan_to_num(param.grad, nan=0, posinf=1e5, neginf=-1e5, out=param.grad)
        optimizer.step()

        # Update EMA.
        ema_halflife_nimg = ema_halflife_kimg * 1000
        if ema_rampup_ratio is not None:
            ema_halflife_nimg = min(ema_halflife_nimg, cur_nimg * ema_rampup_ratio)
        ema_beta = 0.5 ** (batch_size / max(ema_halflife_nimg, 1e-8))
        with torch.no_grad():
            for p_ema, p_net in zip(ema.parameters(), net.parameters()):
                p_ema.copy_(p_net.detach().lerp(p_ema, ema_beta))

        # Perform maintenance tasks once per tick.
        cur_nimg += batch_size
        done = (cur_nimg >= total_kimg * 1000)
        if (not done) and (cur_tick != 0) and (cur_nimg < tick_start_nimg + kimg_per_tick * 1000):
            continue

        ticks.append(float(np.mean(tick_losses)))
        print(f"tick {cur_tick:<5d} kimg {cur_nimg / 1e3:<9.2f} loss {ticks[-1]:.4f} lr {optimizer.param_groups[0]['lr']:.2e} ema_beta {ema_beta:.4f}")
        tick_losses = []
        cur_tick += 1
        tick_start_nimg = cur_nimg
        if done:
            break

    ema_last = ema_eval_loss()
    print(f"[summary] loss(tick mean) first={ticks[0]:.4f} last={ticks[-1]:.4f} decreased={ticks[-1] < ticks[0]}; "
          f"EMA eval loss {ema_first:.4f} -> {ema_last:.4f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    training_loop()
