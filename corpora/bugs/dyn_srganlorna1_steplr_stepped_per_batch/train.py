# Source: Lornatang/SRGAN-PyTorch, trainer.py (train_gan, Trainer), srgan_pytorch/models/srgan.py, commit af7f97db03b4b63fd5261866eac2441d1a3e6896
# Report: https://github.com/Lornatang/SRGAN-PyTorch/issues/1
# SRGAN training (GAN stage): SRResNet generator, VGG-style discriminator, content loss on
# frozen conv features + 0.001 * adversarial BCE, Adam for D and G with StepLR(step_size=epochs // 2,
# gamma=0.1). The image folders are replaced by synthetic smooth colour textures (HR 32x32,
# LR 16x16, 2x upscaling), the generator has 4 residual blocks of 32 channels, the pretrained
# VGG19 of VGGLoss is replaced by a fixed random conv stack, tqdm / image saving / LPIPS removed.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.prelu = nn.PReLU()
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, input):
        out = self.conv1(input)
        out = self.bn1(out)
        out = self.prelu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        return out + input


class Generator(nn.Module):
    def __init__(self, upscale_factor=2, num_residual_block=4, channels=32):
        num_upsample_block = int(math.log(upscale_factor, 2))
        super(Generator, self).__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels, kernel_size=9, stride=1, padding=4, bias=False), nn.PReLU())
        self.Trunk = nn.Sequential(*[ResidualBlock(channels) for _ in range(num_residual_block)])
        self.conv2 = nn.Sequential(nn.Conv2d(channels, channels, kernel_size=3, stride=1, padding=1, bias=False),
                                   nn.BatchNorm2d(channels))
        upsampling = []
        for _ in range(num_upsample_block):
            upsampling += [nn.Conv2d(channels, channels * 4, kernel_size=3, stride=1, padding=1, bias=False),
                           nn.BatchNorm2d(channels * 4), nn.PixelShuffle(upscale_factor=2), nn.PReLU()]
        self.upsampling = nn.Sequential(*upsampling)
        self.conv3 = nn.Sequential(nn.Conv2d(channels, 3, kernel_size=9, stride=1, padding=4, bias=False), nn.Tanh())

    def forward(self, input):
        out1 = self.conv1(input)
        out = self.Trunk(out1)
        out2 = self.conv2(out)
        out = torch.add(out1, out2)
        out = self.upsampling(out)
        out = self.conv3(out)
        return out


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, 1, 1), nn.LeakyReLU(0.2, True),
            nn.Conv2d(32, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.LeakyReLU(0.2, True),
            nn.Conv2d(32, 64, 3, 2, 1, bias=False), nn.BatchNorm2d(64), nn.LeakyReLU(0.2, True))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 8 * 8, 100), nn.LeakyReLU(0.2, True),
                                        nn.Linear(100, 1), nn.Sigmoid())

    def forward(self, input):
        return self.classifier(self.features(input))


class VGGLoss(nn.Module):
    def __init__(self):
        super(VGGLoss, self).__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, 1, 1), nn.ReLU()).eval()
        for name, param in self.features.named_parameters():
            param.requires_grad = False

    def forward(self, input, target):
        return F.mse_loss(self.features(input), self.features(target))


def weights_init(m):
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight)
        m.weight.data *= 0.1


def make_images(n, g):
    # smooth colour textures: a few random low-frequency sinusoids per channel
    yy, xx = torch.meshgrid(torch.linspace(0, 1, 32), torch.linspace(0, 1, 32), indexing="ij")
    hr = torch.zeros(n, 3, 32, 32)
    for _ in range(3):
        fy, fx = torch.rand(n, 3, 1, 1, generator=g) * 6, torch.rand(n, 3, 1, 1, generator=g) * 6
        ph = torch.rand(n, 3, 1, 1, generator=g) * 6.28
        hr += torch.sin(fy * 6.28 * yy + fx * 6.28 * xx + ph) / 3
    lr = F.avg_pool2d(hr, 2)
    return lr, hr


def test_psnr(model, criterion, dataloader):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for lr, hr in dataloader:
            mse = criterion(model(lr), hr).item()
            total += 10 * math.log10(4.0 / mse)
    model.train()
    return total / len(dataloader)


def train_gan(epoch, total_epoch, total_iters, dataloader, discriminator, generator, content_criterion,
              adversarial_criterion, discriminator_optimizer, generator_optimizer, discriminator_scheduler,
              generator_scheduler):
    generator.train()
    discriminator.train()
    content_total = 0.0
    for i, data in enumerate(dataloader):
        lr = data[0]
        hr = data[1]
        batch_size = lr.size(0)

        real_label = torch.full((batch_size, 1), 1, dtype=lr.dtype)
        fake_label = torch.full((batch_size, 1), 0, dtype=lr.dtype)

        # (1) Update D network
        discriminator.zero_grad()
        output = discriminator(hr)
        errD_real = adversarial_criterion(output, real_label)
        D_x = output.mean().item()
        errD_real.backward()

        sr = generator(lr)
        output = discriminator(sr.detach())
        errD_fake = adversarial_criterion(output, fake_label)
        D_G_z1 = output.mean().item()
        errD_fake.backward()

        errD = errD_real + errD_fake
        discriminator_optimizer.step()

        # (2) Update G network
        generator.zero_grad()
        content_loss = content_criterion(sr, hr)
        output = discriminator(sr)
        D_G_z2 = output.mean().item()
        adversarial_loss = adversarial_criterion(output, real_label)
        errG = content_loss + 0.001 * adversarial_loss
        errG.backward()
        generator_optimizer.step()

        # Dynamic adjustment of learning rate
        discriminator_scheduler.step()
        generator_scheduler.step()

        content_total += content_loss.item()
        iters = i + epoch * len(dataloader) + 1
        if iters == int(total_iters):
            break
    return errD.item(), errG.item(), D_x, D_G_z1, D_G_z2, content_total / len(dataloader)


class Trainer(object):
    def __init__(self, args):
        self.args = args
        torch.manual_seed(args["manualSeed"])
        g = torch.Generator().manual_seed(args["manualSeed"])
        train_dataset = torch.utils.data.TensorDataset(*make_images(160, g))
        test_dataset = torch.utils.data.TensorDataset(*make_images(32, g))
        self.train_dataloader = torch.utils.data.DataLoader(train_dataset, batch_size=args["batch_size"], shuffle=True)
        self.test_dataloader = torch.utils.data.DataLoader(test_dataset, batch_size=args["batch_size"])

        self.generator = Generator(upscale_factor=args["upscale_factor"])
        self.discriminator = Discriminator()
        self.generator = self.generator.apply(weights_init)
        self.discriminator = self.discriminator.apply(weights_init)

        # Parameters of GAN training model.
        self.start_epoch = math.floor(args["start_iter"] / len(self.train_dataloader))
        self.epochs = math.ceil(args["iters"] / len(self.train_dataloader))
        self.discriminator_optimizer = torch.optim.Adam(self.discriminator.parameters(), lr=args["lr"], betas=(0.9, 0.999))
        self.generator_optimizer = torch.optim.Adam(self.generator.parameters(), lr=args["lr"], betas=(0.9, 0.999))
        self.discriminator_scheduler = torch.optim.lr_scheduler.StepLR(self.discriminator_optimizer,
                                                                       step_size=self.epochs // 2,
                                                                       gamma=0.1)
        self.generator_scheduler = torch.optim.lr_scheduler.StepLR(self.generator_optimizer,
                                                                   step_size=self.epochs // 2,
                                                                   gamma=0.1)
        print(f"Iters is {args['iters']}, Epoch is {self.epochs}, Scheduler is StepLR(step_size={self.epochs // 2})")

        self.content_criterion = VGGLoss()
        self.criterion = nn.MSELoss()
        self.adversarial_criterion = nn.BCELoss()

    def run(self):
        args = self.args
        for epoch in range(self.start_epoch, self.epochs):
            errD, errG, D_x, D_G_z1, D_G_z2, content = train_gan(
                epoch=epoch, total_epoch=self.epochs, total_iters=args["iters"], dataloader=self.train_dataloader,
                discriminator=self.discriminator, generator=self.generator,
                content_criterion=self.content_criterion, adversarial_criterion=self.adversarial_criterion,
                discriminator_optimizer=self.discriminator_optimizer, generator_optimizer=self.generator_optimizer,
                discriminator_scheduler=self.discriminator_scheduler, generator_scheduler=self.generator_scheduler)
            psnr = test_psnr(self.generator, self.criterion, self.test_dataloader)
            print(f"[{epoch + 1}/{self.epochs}] Loss_D: {errD:.4f} Loss_G: {errG:.4f} content: {content:.5f} "
                  f"D(HR): {D_x:.3f} D(G(LR)): {D_G_z1:.3f}/{D_G_z2:.3f} PSNR: {psnr:.2f} dB "
                  f"lr_G: {self.generator_optimizer.param_groups[0]['lr']:.1e}")


def main():
    args = {"manualSeed": 1111, "batch_size": 16, "upscale_factor": 2, "start_iter": 0, "iters": 80, "lr": 0.0001}
    Trainer(args).run()


if __name__ == "__main__":
    main()
