# Source: Lornatang/ESRGAN-PyTorch, train_gan.py (main, define_optimizer, define_scheduler, train), model.py (RRDBNet, DiscriminatorForVGG), commit c94e5bd3de0bda7b171828dab5756613c27d24a4
# Report: https://github.com/Lornatang/ESRGAN-PyTorch/issues/39
# ESRGAN adversarial fine-tuning: an RRDB generator trained with pixel + content + relativistic
# adversarial losses against a VGG-style discriminator, each with its own Adam and MultiStepLR,
# under AMP with one GradScaler. Images are synthetic 32x32 textures (x2 super-resolution),
# the networks are narrowed, the VGG19 content network is a small frozen conv net, and CUDA AMP
# is replaced by CPU bfloat16 autocast with torch.amp.GradScaler("cpu").
import math
import random
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F_torch
from torch import nn, optim, Tensor
from torch.optim import lr_scheduler


class _ResidualDenseBlock(nn.Module):
    def __init__(self, channels: int, growth_channels: int) -> None:
        super(_ResidualDenseBlock, self).__init__()
        self.conv1 = nn.Conv2d(channels + growth_channels * 0, growth_channels, (3, 3), (1, 1), (1, 1))
        self.conv2 = nn.Conv2d(channels + growth_channels * 1, growth_channels, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(channels + growth_channels * 2, growth_channels, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(channels + growth_channels * 3, growth_channels, (3, 3), (1, 1), (1, 1))
        self.conv5 = nn.Conv2d(channels + growth_channels * 4, channels, (3, 3), (1, 1), (1, 1))
        self.leaky_relu = nn.LeakyReLU(0.2, True)
        self.identity = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out1 = self.leaky_relu(self.conv1(x))
        out2 = self.leaky_relu(self.conv2(torch.cat([x, out1], 1)))
        out3 = self.leaky_relu(self.conv3(torch.cat([x, out1, out2], 1)))
        out4 = self.leaky_relu(self.conv4(torch.cat([x, out1, out2, out3], 1)))
        out5 = self.identity(self.conv5(torch.cat([x, out1, out2, out3, out4], 1)))
        x = torch.mul(out5, 0.2)
        return torch.add(x, identity)


class _ResidualResidualDenseBlock(nn.Module):
    def __init__(self, channels: int, growth_channels: int) -> None:
        super(_ResidualResidualDenseBlock, self).__init__()
        self.rdb1 = _ResidualDenseBlock(channels, growth_channels)
        self.rdb2 = _ResidualDenseBlock(channels, growth_channels)
        self.rdb3 = _ResidualDenseBlock(channels, growth_channels)

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        x = self.rdb3(self.rdb2(self.rdb1(x)))
        x = torch.mul(x, 0.2)
        return torch.add(x, identity)


class RRDBNet(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, channels: int, growth_channels: int,
                 num_rrdb: int, upscale: int) -> None:
        super(RRDBNet, self).__init__()
        self.upscale = upscale
        self.conv1 = nn.Conv2d(in_channels, channels, (3, 3), (1, 1), (1, 1))
        self.trunk = nn.Sequential(*[_ResidualResidualDenseBlock(channels, growth_channels) for _ in range(num_rrdb)])
        self.conv2 = nn.Conv2d(channels, channels, (3, 3), (1, 1), (1, 1))
        self.upsampling1 = nn.Sequential(
            nn.Conv2d(channels, channels, (3, 3), (1, 1), (1, 1)),
            nn.LeakyReLU(0.2, True)
        )
        self.conv3 = nn.Sequential(
            nn.Conv2d(channels, channels, (3, 3), (1, 1), (1, 1)),
            nn.LeakyReLU(0.2, True)
        )
        self.conv4 = nn.Conv2d(channels, out_channels, (3, 3), (1, 1), (1, 1))
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight)
                module.weight.data *= 0.2
                if module.bias is not None:
                    nn.init.constant_(module.bias, 0)

    def forward(self, x: Tensor) -> Tensor:
        conv1 = self.conv1(x)
        x = self.trunk(conv1)
        x = self.conv2(x)
        x = torch.add(x, conv1)
        x = self.upsampling1(F_torch.interpolate(x, scale_factor=2, mode="nearest"))
        x = self.conv3(x)
        x = self.conv4(x)
        return torch.clamp_(x, 0.0, 1.0)


class DiscriminatorForVGG(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, channels: int) -> None:
        super(DiscriminatorForVGG, self).__init__()
        self.features = nn.Sequential(
            # input size. (3) x 32 x 32
            nn.Conv2d(in_channels, channels, (3, 3), (1, 1), (1, 1), bias=True),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(channels, channels, (4, 4), (2, 2), (1, 1), bias=False),
            nn.BatchNorm2d(channels),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(channels, int(2 * channels), (3, 3), (1, 1), (1, 1), bias=False),
            nn.BatchNorm2d(int(2 * channels)),
            nn.LeakyReLU(0.2, True),
            # state size. x 16 x 16
            nn.Conv2d(int(2 * channels), int(2 * channels), (4, 4), (2, 2), (1, 1), bias=False),
            nn.BatchNorm2d(int(2 * channels)),
            nn.LeakyReLU(0.2, True),
            # state size. x 8 x 8
            nn.Conv2d(int(2 * channels), int(4 * channels), (4, 4), (2, 2), (1, 1), bias=False),
            nn.BatchNorm2d(int(4 * channels)),
            nn.LeakyReLU(0.2, True),
            # state size. x 4 x 4
        )
        self.classifier = nn.Sequential(
            nn.Linear(int(4 * channels) * 4 * 4, 100),
            nn.LeakyReLU(0.2, True),
            nn.Linear(100, out_channels)
        )

    def forward(self, x: Tensor) -> Tensor:
        out = self.features(x)
        out = torch.flatten(out, 1)
        return self.classifier(out)


class ContentLoss(nn.Module):
    """Feature-space L1 loss on a frozen feature extractor (stands in for VGG19 conv5_4)."""
    def __init__(self) -> None:
        super(ContentLoss, self).__init__()
        g = torch.Generator().manual_seed(123)
        self.feature_extractor = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(True), nn.Conv2d(16, 16, 3, 1, 1))
        with torch.no_grad():
            for p in self.feature_extractor.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        for p in self.feature_extractor.parameters():
            p.requires_grad = False
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, sr_tensor: Tensor, gt_tensor: Tensor) -> Tensor:
        sr_feature = self.feature_extractor((sr_tensor - self.mean) / self.std)
        gt_feature = self.feature_extractor((gt_tensor - self.mean) / self.std)
        return F_torch.l1_loss(sr_feature, gt_feature)


def make_images(n, size, rng):
    yy, xx = np.mgrid[0:size, 0:size] / size
    imgs = np.zeros((n, 3, size, size), dtype=np.float32)
    for k in range(n):
        fx, fy = rng.uniform(2, 6, size=2)
        phase = rng.uniform(0, 2 * math.pi, size=3)
        for c in range(3):
            imgs[k, c] = 0.5 + 0.35 * np.sin(2 * math.pi * (fx * xx + fy * yy) + phase[c])
    return torch.from_numpy(imgs)


def degrade(gt):
    return F_torch.avg_pool2d(gt, 2)


def psnr(sr, gt):
    mse = F_torch.mse_loss(sr, gt).item()
    return 10 * math.log10(1.0 / max(mse, 1e-10))


def define_optimizer(g_model: nn.Module, d_model: nn.Module, config: Any):
    g_optimizer = optim.Adam(g_model.parameters(), config["LR"], config["BETAS"], config["EPS"], config["WEIGHT_DECAY"])
    d_optimizer = optim.Adam(d_model.parameters(), config["LR"], config["BETAS"], config["EPS"], config["WEIGHT_DECAY"])
    return g_optimizer, d_optimizer


def define_scheduler(g_optimizer, d_optimizer, config: Any):
    g_scheduler = lr_scheduler.MultiStepLR(g_optimizer, config["MILESTONES"], config["GAMMA"])
    d_scheduler = lr_scheduler.MultiStepLR(d_optimizer, config["MILESTONES"], config["GAMMA"])
    return g_scheduler, d_scheduler


def train(g_model, d_model, train_images, pixel_criterion, content_criterion, adversarial_criterion,
          g_optimizer, d_optimizer, epoch, scaler, config) -> None:
    g_model.train()
    d_model.train()

    pixel_weight = torch.Tensor(config["PIXEL_WEIGHT"])
    content_weight = torch.Tensor(config["CONTENT_WEIGHT"])
    adversarial_weight = torch.Tensor(config["ADVERSARIAL_WEIGHT"])

    batch_size = config["BATCH_SIZE"]
    real_label = torch.full([batch_size, 1], 1.0, dtype=torch.float)
    fake_label = torch.full([batch_size, 1], 0.0, dtype=torch.float)

    perm = torch.randperm(len(train_images))
    d_losses, g_losses, d_gt_probs, d_sr_probs = [], [], [], []
    for start in range(0, len(train_images) - batch_size + 1, batch_size):
        gt = train_images[perm[start:start + batch_size]]
        lr = degrade(gt)

        for d_parameters in d_model.parameters():
            d_parameters.requires_grad = False

        g_model.zero_grad(set_to_none=True)

        with torch.autocast("cpu", dtype=torch.bfloat16):
            sr = g_model(lr)
            gt_output = d_model(gt.detach().clone())
            sr_output = d_model(sr)
            pixel_loss = pixel_criterion(sr, gt)
            content_loss = content_criterion(sr, gt)
            d_loss_gt = adversarial_criterion(gt_output - torch.mean(sr_output), fake_label) * 0.5
            d_loss_sr = adversarial_criterion(sr_output - torch.mean(gt_output), real_label) * 0.5
            adversarial_loss = d_loss_gt + d_loss_sr
            pixel_loss = torch.sum(torch.mul(pixel_weight, pixel_loss))
            content_loss = torch.sum(torch.mul(content_weight, content_loss))
            adversarial_loss = torch.sum(torch.mul(adversarial_weight, adversarial_loss))
            g_loss = pixel_loss + content_loss + adversarial_loss
        scaler.scale(g_loss).backward()
        scaler.step(g_optimizer)
        scaler.update()

        for d_parameters in d_model.parameters():
            d_parameters.requires_grad = True

        d_model.zero_grad(set_to_none=True)

        with torch.autocast("cpu", dtype=torch.bfloat16):
            gt_output = d_model(gt)
            sr_output = d_model(sr.detach().clone())
            d_loss_gt = adversarial_criterion(gt_output - torch.mean(sr_output), real_label) * 0.5
        scaler.scale(d_loss_gt).backward(retain_graph=True)

        with torch.autocast("cpu", dtype=torch.bfloat16):
            sr_output = d_model(sr.detach().clone())
            d_loss_sr = adversarial_criterion(sr_output - torch.mean(gt_output), fake_label) * 0.5
        scaler.scale(d_loss_sr).backward()

        d_loss = d_loss_gt + d_loss_sr

        scaler.step(d_optimizer)
        scaler.update()

        d_losses.append(d_loss.item())
        g_losses.append(g_loss.item())
        d_gt_probs.append(torch.sigmoid(torch.mean(gt_output.detach().float())).item())
        d_sr_probs.append(torch.sigmoid(torch.mean(sr_output.detach().float())).item())

    print(f"Epoch: [{epoch + 1}] G Loss {np.mean(g_losses):.6f} D Loss {np.mean(d_losses):.6f} "
          f"D(GT) {np.mean(d_gt_probs):.4f} D(SR) {np.mean(d_sr_probs):.4f}")


def main():
    config = {"SEED": 0, "LR": 1e-4, "BETAS": (0.9, 0.99), "EPS": 1e-8, "WEIGHT_DECAY": 0.0,
              "MILESTONES": [4, 6], "GAMMA": 0.5, "EPOCHS": 8, "BATCH_SIZE": 16,
              "PIXEL_WEIGHT": [0.01], "CONTENT_WEIGHT": [1.0], "ADVERSARIAL_WEIGHT": [0.005]}

    random.seed(config["SEED"])
    np.random.seed(config["SEED"])
    torch.manual_seed(config["SEED"])

    scaler = torch.amp.GradScaler("cpu")
    rng = np.random.RandomState(config["SEED"])
    train_images = make_images(128, 32, rng)
    test_images = make_images(32, 32, rng)

    g_model = RRDBNet(in_channels=3, out_channels=3, channels=16, growth_channels=8, num_rrdb=1, upscale=2)
    d_model = DiscriminatorForVGG(in_channels=3, out_channels=1, channels=8)

    pixel_criterion = nn.L1Loss()
    feature_criterion = ContentLoss()
    adversarial_criterion = nn.BCEWithLogitsLoss()
    g_optimizer, d_optimizer = define_optimizer(g_model, d_model, config)
    g_scheduler, d_scheduler = define_scheduler(g_optimizer, d_optimizer, config)

    for epoch in range(0, config["EPOCHS"]):
        train(g_model,
              d_model,
              train_images,
              pixel_criterion,
              feature_criterion,
              adversarial_criterion,
              g_optimizer,
              g_optimizer,
              epoch,
              scaler,
              config)

        g_scheduler.step()
        d_scheduler.step()

        g_model.eval()
        with torch.no_grad():
            print(f"  Test PSNR {psnr(g_model(degrade(test_images)), test_images):.3f} dB")


if __name__ == "__main__":
    main()
