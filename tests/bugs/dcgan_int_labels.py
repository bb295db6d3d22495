"""DCGAN: D on real then on G(z).detach(), errD = errD_real + errD_fake after both backward calls,
G step through D, and every few batches a grid sampled from fixed noise in train() mode.

Source: pytorch/examples, dcgan/main.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: 16x16 images, ngf = ndf = 4, nz = 8, 3 batches; the grid is kept as a tensor (no file).

Mutation: `dtype=real_cpu.dtype` dropped from `torch.full((batch_size,), real_label)` with `real_label = 1`: the BCELoss targets are int64.
Expected: error dtype.loss_target at the discriminator's `errD_real = criterion(output, label)` line.
"""

import torch
import torch.nn as nn
import torch.optim as optim

nz, ngf, ndf, nc = 8, 4, 4, 3


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        output = self.main(input)
        return output.view(-1, 1).squeeze(1)


def build():
    torch.manual_seed(1)
    dataloader = [(torch.rand(8, nc, 16, 16) * 2 - 1, None) for _ in range(3)]
    netG = Generator()
    netG.apply(weights_init)
    netD = Discriminator()
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(8, nz, 1, 1)
    real_label, fake_label = 1, 0
    optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))

    def train():
        for epoch in range(1):
            for i, data in enumerate(dataloader, 0):
                netD.zero_grad()
                real_cpu = data[0]
                batch_size = real_cpu.size(0)
                label = torch.full((batch_size,), real_label)
                output = netD(real_cpu)
                errD_real = criterion(output, label)  # <- bug
                errD_real.backward()
                D_x = output.mean().item()

                noise = torch.randn(batch_size, nz, 1, 1)
                fake = netG(noise)
                label.fill_(fake_label)
                output = netD(fake.detach())
                errD_fake = criterion(output, label)
                errD_fake.backward()
                D_G_z1 = output.mean().item()
                errD = errD_real + errD_fake
                optimizerD.step()

                netG.zero_grad()
                label.fill_(real_label)
                output = netD(fake)
                errG = criterion(output, label)
                errG.backward()
                D_G_z2 = output.mean().item()
                optimizerG.step()
                print(errD.item(), errG.item(), D_x, D_G_z1, D_G_z2)
                if i % 2 == 0:
                    fake = netG(fixed_noise)  # the image grid: train() mode, as the original
                    grid = fake.detach()
            return grid

    return [netG, netD], [optimizerD, optimizerG], train


if __name__ == "__main__":
    build()[2]()
