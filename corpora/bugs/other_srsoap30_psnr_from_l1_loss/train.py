# Source: soapisnotfat/super-resolution, EDSR/solver.py (EDSRTrainer), EDSR/model.py (Net), commit 212997aa6e85b0f56a2bcf2f0c9f1b3a6357448f
# Report: https://github.com/soapisnotfat/super-resolution/issues/30
# EDSRTrainer from soapisnotfat/super-resolution: a small EDSR (input conv, residual blocks with
# BatchNorm, mid conv with a global skip, PixelShuffle upscaling, output conv) trained with L1Loss
# and Adam under MultiStepLR, with the average PSNR over the test loader printed after each epoch.
# BSDS300 is replaced by synthetic smooth 1-channel 32x32 images downsampled 2x by area averaging;
# base_channel 64 -> 32, 4 epochs, and progress_bar is replaced by a per-epoch print.
from __future__ import print_function

import math
from math import log10

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
np.random.seed(0)


class Net(nn.Module):
    def __init__(self, num_channels, base_channel, upscale_factor, num_residuals):
        super(Net, self).__init__()

        self.input_conv = nn.Conv2d(num_channels, base_channel, kernel_size=3, stride=1, padding=1)

        resnet_blocks = []
        for _ in range(num_residuals):
            resnet_blocks.append(ResnetBlock(base_channel, kernel=3, stride=1, padding=1))
        self.residual_layers = nn.Sequential(*resnet_blocks)

        self.mid_conv = nn.Conv2d(base_channel, base_channel, kernel_size=3, stride=1, padding=1)

        upscale = []
        for _ in range(int(math.log2(upscale_factor))):
            upscale.append(PixelShuffleBlock(base_channel, base_channel, upscale_factor=2))
        self.upscale_layers = nn.Sequential(*upscale)

        self.output_conv = nn.Conv2d(base_channel, num_channels, kernel_size=3, stride=1, padding=1)

    def weight_init(self, mean=0.0, std=0.02):
        for m in self._modules:
            normal_init(self._modules[m], mean, std)

    def forward(self, x):
        x = self.input_conv(x)
        residual = x
        x = self.residual_layers(x)
        x = self.mid_conv(x)
        x = torch.add(x, residual)
        x = self.upscale_layers(x)
        x = self.output_conv(x)
        return x


def normal_init(m, mean, std):
    if isinstance(m, nn.ConvTranspose2d) or isinstance(m, nn.Conv2d):
        m.weight.data.normal_(mean, std)
        if m.bias is not None:
            m.bias.data.zero_()


class ResnetBlock(nn.Module):
    def __init__(self, num_channel, kernel=3, stride=1, padding=1):
        super(ResnetBlock, self).__init__()
        self.conv1 = nn.Conv2d(num_channel, num_channel, kernel, stride, padding)
        self.conv2 = nn.Conv2d(num_channel, num_channel, kernel, stride, padding)
        self.bn = nn.BatchNorm2d(num_channel)
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x):
        residual = x
        x = self.bn(self.conv1(x))
        x = self.activation(x)
        x = self.bn(self.conv2(x))
        x = torch.add(x, residual)
        return x


class PixelShuffleBlock(nn.Module):
    def __init__(self, in_channel, out_channel, upscale_factor, kernel=3, stride=1, padding=1):
        super(PixelShuffleBlock, self).__init__()
        self.conv = nn.Conv2d(in_channel, out_channel * upscale_factor ** 2, kernel, stride, padding)
        self.ps = nn.PixelShuffle(upscale_factor)

    def forward(self, x):
        x = self.ps(self.conv(x))
        return x


class EDSRTrainer(object):
    def __init__(self, config, training_loader, testing_loader):
        super(EDSRTrainer, self).__init__()
        self.device = torch.device('cpu')
        self.model = None
        self.lr = config['lr']
        self.nEpochs = config['nEpochs']
        self.criterion = None
        self.optimizer = None
        self.scheduler = None
        self.seed = config['seed']
        self.upscale_factor = config['upscale_factor']
        self.training_loader = training_loader
        self.testing_loader = testing_loader

    def build_model(self):
        torch.manual_seed(self.seed)
        self.model = Net(num_channels=1, upscale_factor=self.upscale_factor, base_channel=32, num_residuals=4).to(self.device)
        self.model.weight_init(mean=0.0, std=0.02)
        self.criterion = torch.nn.L1Loss()

        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.lr, betas=(0.9, 0.999), eps=1e-8)
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=[50, 75, 100], gamma=0.5)

    def train(self):
        self.model.train()
        train_loss = 0
        for batch_num, (data, target) in enumerate(self.training_loader):
            data, target = data.to(self.device), target.to(self.device)
            self.optimizer.zero_grad()
            loss = self.criterion(self.model(data), target)
            train_loss += loss.item()
            loss.backward()
            self.optimizer.step()

        print("    Average Loss: {:.4f}".format(train_loss / len(self.training_loader)))

    def test(self):
        self.model.eval()
        avg_psnr = 0

        with torch.no_grad():
            for batch_num, (data, target) in enumerate(self.testing_loader):
                data, target = data.to(self.device), target.to(self.device)
                prediction = self.model(data)
                mse = self.criterion(prediction, target)
                psnr = 10 * log10(1 / mse.item())
                avg_psnr += psnr

        print("    Average PSNR: {:.4f} dB".format(avg_psnr / len(self.testing_loader)))
        return avg_psnr / len(self.testing_loader)

    def run(self):
        self.build_model()
        for epoch in range(1, self.nEpochs + 1):
            print("\n===> Epoch {} starts:".format(epoch))
            self.train()
            self.test()
            self.scheduler.step()


def make_images(n, size, rng):
    yy, xx = np.meshgrid(np.linspace(0, 1, size), np.linspace(0, 1, size), indexing="ij")
    imgs = np.zeros((n, 1, size, size), dtype=np.float32)
    for i in range(n):
        img = np.full((size, size), 0.5)
        for _ in range(4):
            fx, fy = rng.uniform(0.5, 3.0, size=2)
            ph = rng.uniform(0, 2 * np.pi)
            img += rng.uniform(0.05, 0.15) * np.sin(2 * np.pi * (fx * xx + fy * yy) + ph)
        imgs[i, 0] = np.clip(img, 0.0, 1.0)
    return torch.from_numpy(imgs)


def main():
    rng = np.random.RandomState(0)
    hr_train = make_images(160, 32, rng)
    hr_test = make_images(64, 32, rng)
    lr_train = F.avg_pool2d(hr_train, 2)
    lr_test = F.avg_pool2d(hr_test, 2)
    g = torch.Generator().manual_seed(0)
    training_loader = DataLoader(TensorDataset(lr_train, hr_train), batch_size=16, shuffle=True, generator=g)
    testing_loader = DataLoader(TensorDataset(lr_test, hr_test), batch_size=16, shuffle=False)

    config = {'lr': 1e-3, 'nEpochs': 4, 'seed': 123, 'upscale_factor': 2}
    model = EDSRTrainer(config, training_loader, testing_loader)
    model.run()


if __name__ == "__main__":
    main()
