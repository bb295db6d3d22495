# Source: w86763777/pytorch-gan-collections, sngan.py + source/models/sngan.py + source/losses.py + source/utils.py, commit 860e90bd882eb5737103de55bcf0e977d6952343
# https://github.com/w86763777/pytorch-gan-collections/blob/master/sngan.py
#
# SNGAN (CNN architecture): spectral_norm applied to every conv/linear of the discriminator inside its
# initialize() (after the N(0, 0.02) init), hinge loss for D and -D(G(z)).mean() for G, n_dis discriminator
# steps per generator step with fakes made under no_grad and detached, the generator step on a batch twice
# as large, two Adam optimizers with betas (0.0, 0.9) and two LambdaLR linear decays to 0 at total_steps,
# an infinite loop over a drop_last DataLoader, uniform dequantisation noise x + U(0,1)/128 on the reals.
# Adaptation: CIFAR-10 -> 1024 synthetic 16x16 images (coloured blobs on a gradient background) in a
# TensorDataset with the same Normalize(0.5, 0.5) + dequantisation transform; absl flags -> a Namespace;
# widths /8 (512 -> 64 channels), G starts at 2x2 and D ends at 2x2 (16x16 images instead of 32x32);
# total_steps 100000 -> 120, n_dis 5 (res32 config) kept, batch 64 -> 32; lr 2e-4 -> 1e-3 (so few steps);
# tensorboard/tqdm/checkpoints and Inception/FID -> a pixel-statistics distance between 512 real and
# 512 generated images (mean image + 4x4-pooled covariance), printed every 30 steps; cuda -> cpu.
import random
from argparse import Namespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
import torch.optim as optim
from torch.nn.utils.spectral_norm import spectral_norm


class Hinge(nn.Module):
    def forward(self, pred_real, pred_fake=None):
        if pred_fake is not None:
            loss_real = F.relu(1 - pred_real).mean()
            loss_fake = F.relu(1 + pred_fake).mean()
            return loss_real + loss_fake
        else:
            loss = -pred_real.mean()
            return loss


class Generator(nn.Module):
    def __init__(self, z_dim, M=4):
        super().__init__()
        self.M = M
        self.linear = nn.Linear(z_dim, M * M * 64)
        self.main = nn.Sequential(
            nn.BatchNorm2d(64),
            nn.ReLU(True),
            nn.ConvTranspose2d(64, 32, kernel_size=4, stride=2, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 16, kernel_size=4, stride=2, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(True),
            nn.ConvTranspose2d(16, 8, kernel_size=4, stride=2, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(True),
            nn.Conv2d(8, 3, kernel_size=3, stride=1, padding=1),
            nn.Tanh())
        self.initialize()

    def initialize(self):
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
                init.normal_(m.weight, std=0.02)
                init.zeros_(m.bias)

    def forward(self, z, *args, **kwargs):
        x = self.linear(z)
        x = x.view(x.size(0), -1, self.M, self.M)
        x = self.main(x)
        return x


class Discriminator(nn.Module):
    def __init__(self, M=32):
        super().__init__()
        self.M = M

        self.main = nn.Sequential(
            # M
            nn.Conv2d(3, 8, kernel_size=3, stride=1, padding=1),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(8, 16, kernel_size=4, stride=2, padding=1),
            nn.LeakyReLU(0.1, inplace=True),
            # M / 2
            nn.Conv2d(16, 16, kernel_size=3, stride=1, padding=1),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(16, 32, kernel_size=4, stride=2, padding=1),
            nn.LeakyReLU(0.1, inplace=True),
            # M / 4
            nn.Conv2d(32, 32, kernel_size=3, stride=1, padding=1),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(32, 64, kernel_size=4, stride=2, padding=1),
            nn.LeakyReLU(0.1, inplace=True),
            # M / 8
            nn.Conv2d(64, 64, kernel_size=3, stride=1, padding=1),
            nn.LeakyReLU(0.1, inplace=True))

        self.linear = nn.Linear(M // 8 * M // 8 * 64, 1)
        self.initialize()

    def initialize(self):
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                init.normal_(m.weight, std=0.02)
                init.zeros_(m.bias)
                spectral_norm(m)

    def forward(self, x, *args, **kwargs):
        x = self.main(x)
        x = torch.flatten(x, start_dim=1)
        x = self.linear(x)
        return x


class Generator16(Generator):
    def __init__(self, z_dim):
        super().__init__(z_dim, M=2)


class Discriminator16(Discriminator):
    def __init__(self):
        super().__init__(M=16)


def infiniteloop(dataloader):
    while True:
        for x, _ in iter(dataloader):
            yield x


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def generate_imgs(net_G, device, z_dim=128, size=5000, batch_size=128):
    net_G.eval()
    imgs = []
    with torch.no_grad():
        for start in range(0, size, batch_size):
            end = min(start + batch_size, size)
            z = torch.randn(end - start, z_dim).to(device)
            imgs.append(net_G(z).cpu())
    net_G.train()
    imgs = torch.cat(imgs, dim=0)
    imgs = (imgs + 1) / 2
    return imgs


class SyntheticImages(torch.utils.data.Dataset):
    """Stand-in for CIFAR10 + transforms: blobs on a gradient, ToTensor range [0, 1] then Normalize + noise."""

    def __init__(self, n=1024, size=16, seed=123):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
        cx, cy = torch.rand(n, generator=g) * 0.6 + 0.2, torch.rand(n, generator=g) * 0.6 + 0.2
        color = torch.rand(n, 3, generator=g)
        blob = torch.exp(-((xx - cx.view(n, 1, 1)) ** 2 + (yy - cy.view(n, 1, 1)) ** 2) / 0.02)
        bg = 0.3 * yy.expand(n, size, size)
        self.data = (bg.unsqueeze(1) * torch.tensor([0.2, 0.4, 0.9]).view(1, 3, 1, 1)
                     + blob.unsqueeze(1) * color.view(n, 3, 1, 1)).clamp(0, 1)
        self.transform = lambda x: (x - 0.5) / 0.5 + torch.rand_like(x) / 128

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(self.data[i]), 0


def pixel_stats_distance(real01, fake01):
    """Stand-in for FID: distance of mean images and of 4x4-pooled pixel covariances (inputs in [0, 1])."""
    def feats(x):
        return F.avg_pool2d(x, 4).flatten(1).double()
    fr, ff = feats(real01), feats(fake01)
    mu = (fr.mean(0) - ff.mean(0)).pow(2).sum()
    cov = (torch.cov(fr.T) - torch.cov(ff.T)).pow(2).sum().sqrt()
    return float(mu + cov)


def train(FLAGS):
    device = torch.device('cpu')
    dataset = SyntheticImages()

    dataloader = torch.utils.data.DataLoader(
        dataset, batch_size=FLAGS.batch_size, shuffle=True, num_workers=0,
        drop_last=True)

    net_G = Generator16(FLAGS.z_dim).to(device)
    net_D = Discriminator16().to(device)
    loss_fn = Hinge()

    optim_G = optim.Adam(net_G.parameters(), lr=FLAGS.lr_G, betas=FLAGS.betas)
    optim_D = optim.Adam(net_D.parameters(), lr=FLAGS.lr_D, betas=FLAGS.betas)
    sched_G = optim.lr_scheduler.LambdaLR(
        optim_G, lambda step: 1 - step / FLAGS.total_steps)
    sched_D = optim.lr_scheduler.LambdaLR(
        optim_D, lambda step: 1 - step / FLAGS.total_steps)

    real_eval = dataset.data[:512]
    history = []
    looper = infiniteloop(dataloader)
    for step in range(1, FLAGS.total_steps + 1):
        # Discriminator
        for _ in range(FLAGS.n_dis):
            with torch.no_grad():
                z = torch.randn(FLAGS.batch_size, FLAGS.z_dim).to(device)
                fake = net_G(z).detach()
            real = next(looper).to(device)
            net_D_real = net_D(real)
            net_D_fake = net_D(fake)
            loss = loss_fn(net_D_real, net_D_fake)

            optim_D.zero_grad()
            loss.backward()
            optim_D.step()

            if FLAGS.loss == 'was':
                loss = -loss
        loss_D = loss.item()

        # Generator
        z = torch.randn(FLAGS.batch_size * 2, FLAGS.z_dim).to(device)
        loss = loss_fn(net_D(net_G(z)))

        optim_G.zero_grad()
        loss.backward()
        optim_G.step()

        sched_G.step()
        sched_D.step()

        if step == 1 or step % FLAGS.eval_step == 0:
            imgs = generate_imgs(net_G, device, FLAGS.z_dim, 512, FLAGS.batch_size)
            dist = pixel_stats_distance(real_eval, imgs)
            history.append(dist)
            print("%s/%s loss_D: %.4f, loss_G: %.4f, lr: %.2e, pixel-stat distance: %.4f" % (
                step, FLAGS.total_steps, loss_D, loss.item(), sched_G.get_last_lr()[0], dist))
    return history


def main():
    FLAGS = Namespace(dataset='synthetic', arch='cnn16', total_steps=120, batch_size=32, lr_G=1e-3, lr_D=1e-3,
                      betas=[0.0, 0.9], n_dis=5, z_dim=32, loss='hinge', seed=0, eval_step=30)
    set_seed(FLAGS.seed)
    torch.set_num_threads(1)
    history = train(FLAGS)
    print('[summary] pixel_stat_distance first=%.4f last=%.4f best=%.4f decreased=%s' % (
        history[0], history[-1], min(history), history[-1] < history[0]))


if __name__ == '__main__':
    main()
