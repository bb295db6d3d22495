"""DCGAN faces tutorial: the pytorch/examples update order, plus G_losses / D_losses lists of
.item() values and a grid drawn from fixed_noise every few iterations and at the very end,
under torch.no_grad() with the generator left in train() mode (make_grid(normalize=True)).

Source: pytorch/tutorials, beginner_source/dcgan_faces_tutorial.py,
commit 7d4b657ab2f03a756b525b7b174fc01f41f2e379.
Reduced: 16x16 images, ngf = ndf = 4, nz 8, 4 batches; make_grid is replaced by its normalize
step on the tensor (torchvision is not a test dependency).
"""

import torch
import torch.nn as nn
import torch.optim as optim

nz, ngf, ndf, nc = 8, 4, 4, 3


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, input):
        return self.main(input)


def make_grid(t, padding=2, normalize=True):
    t = t.clone()
    if normalize:
        lo, hi = float(t.min()), float(t.max())
        t.clamp_(min=lo, max=hi).sub_(lo).div_(max(hi - lo, 1e-5))
    return torch.cat(list(t), dim=-1)


def build():
    torch.manual_seed(999)
    dataloader = [(torch.rand(8, nc, 16, 16) * 2 - 1,) for _ in range(4)]
    netG = Generator()
    netG.apply(weights_init)
    netD = Discriminator()
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(8, nz, 1, 1)
    real_label, fake_label = 1.0, 0.0
    optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    num_epochs = 1

    def train():
        img_list, G_losses, D_losses = [], [], []
        iters = 0
        for epoch in range(num_epochs):
            for i, data in enumerate(dataloader, 0):
                netD.zero_grad()
                real_cpu = data[0]
                b_size = real_cpu.size(0)
                label = torch.full((b_size,), real_label)
                output = netD(real_cpu).view(-1)
                errD_real = criterion(output, label)
                errD_real.backward()
                D_x = output.mean().item()
                noise = torch.randn(b_size, nz, 1, 1)
                fake = netG(noise)
                label.fill_(fake_label)
                output = netD(fake.detach()).view(-1)
                errD_fake = criterion(output, label)
                errD_fake.backward()
                D_G_z1 = output.mean().item()
                errD = errD_real + errD_fake
                optimizerD.step()
                netG.zero_grad()
                label.fill_(real_label)
                output = netD(fake).view(-1)
                errG = criterion(output, label)
                errG.backward()
                D_G_z2 = output.mean().item()
                optimizerG.step()
                G_losses.append(errG.item())
                D_losses.append(errD.item())
                if (iters % 2 == 0) or ((epoch == num_epochs - 1) and (i == len(dataloader) - 1)):
                    with torch.no_grad():
                        fake = netG(fixed_noise).detach().cpu()
                    img_list.append(make_grid(fake, padding=2, normalize=True))
                iters += 1
        return img_list, D_x, D_G_z1, D_G_z2

    return [netG, netD], [optimizerD, optimizerG], train


if __name__ == "__main__":
    build()[2]()
