# Source: zhaoyuzhi/deepfillv2, deepfillv2/trainer.py (WGAN_trainer), deepfillv2/network.py (GatedGenerator, PatchDiscriminator), deepfillv2/network_module.py, commit e58b5a2e9b89c0fdd3acdb65157d92e8b7af8b16
# Report: https://github.com/zhaoyuzhi/deepfillv2/issues/6
# DeepFill v2 inpainting: a coarse and a refinement gated-conv generator, a spectral-normalised
# patch discriminator, WGAN hinge-free losses, mask L1 + perceptual + GAN loss for G; Adam for G
# and D with a step lr decay per epoch. The ImageNet folder and free-form masks are replaced by
# synthetic 32x32 images and random rectangles, the networks are narrowed (8 latent channels,
# fewer bottleneck layers), the pretrained VGG16 perceptual net is a fixed random conv stack.
import datetime
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class GatedConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, activation='lrelu', norm='none'):
        super(GatedConv2d, self).__init__()
        self.pad = nn.ReflectionPad2d(padding)
        self.norm = nn.InstanceNorm2d(out_channels) if norm == 'in' else None
        self.activation = nn.LeakyReLU(0.2) if activation == 'lrelu' else nn.Tanh()
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding=0, dilation=dilation)
        self.mask_conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding=0, dilation=dilation)
        self.sigmoid = torch.nn.Sigmoid()

    def forward(self, x):
        x = self.pad(x)
        conv = self.conv2d(x)
        mask = self.mask_conv2d(x)
        gated_mask = self.sigmoid(mask)
        if self.norm:
            conv = self.norm(conv)
        conv = self.activation(conv)
        return conv * gated_mask


class TransposeGatedConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, activation='lrelu', norm='in', scale_factor=2):
        super(TransposeGatedConv2d, self).__init__()
        self.scale_factor = scale_factor
        self.gated_conv2d = GatedConv2d(in_channels, out_channels, kernel_size, stride, padding, dilation, activation, norm)

    def forward(self, x):
        x = nn.functional.interpolate(x, scale_factor=self.scale_factor, mode='nearest')
        return self.gated_conv2d(x)


class Conv2dLayer(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, activation='lrelu', norm='none', sn=True):
        super(Conv2dLayer, self).__init__()
        self.pad = nn.ReflectionPad2d(padding)
        self.norm = nn.InstanceNorm2d(out_channels) if norm == 'in' else None
        self.activation = nn.LeakyReLU(0.2) if activation == 'lrelu' else None
        conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding=0)
        self.conv2d = nn.utils.spectral_norm(conv) if sn else conv

    def forward(self, x):
        x = self.conv2d(self.pad(x))
        if self.norm:
            x = self.norm(x)
        if self.activation:
            x = self.activation(x)
        return x


def coarse_or_refine(c, in_channels=4, out_channels=3):
    return nn.Sequential(
        GatedConv2d(in_channels, c, 5, 1, 2, norm='none'),
        GatedConv2d(c, c * 2, 4, 2, 1, norm='in'),
        GatedConv2d(c * 2, c * 4, 4, 2, 1, norm='in'),
        GatedConv2d(c * 4, c * 4, 3, 1, 2, dilation=2, norm='in'),
        GatedConv2d(c * 4, c * 4, 3, 1, 4, dilation=4, norm='in'),
        TransposeGatedConv2d(c * 4, c * 2, 3, 1, 1, norm='in'),
        TransposeGatedConv2d(c * 2, c, 3, 1, 1, norm='in'),
        GatedConv2d(c, out_channels, 5, 1, 2, activation='tanh', norm='none'))


class GatedGenerator(nn.Module):
    def __init__(self, opt):
        super(GatedGenerator, self).__init__()
        self.coarse = coarse_or_refine(opt["latent_channels"])
        self.refinement = coarse_or_refine(opt["latent_channels"])

    def forward(self, img, mask):
        first_masked_img = img * (1 - mask) + mask
        first_in = torch.cat((first_masked_img, mask), 1)
        first_out = self.coarse(first_in)
        second_masked_img = img * (1 - mask) + first_out * mask
        second_in = torch.cat((second_masked_img, mask), 1)
        second_out = self.refinement(second_in)
        return first_out, second_out


class PatchDiscriminator(nn.Module):
    def __init__(self, opt):
        super(PatchDiscriminator, self).__init__()
        c = opt["latent_channels"]
        self.block1 = Conv2dLayer(4, c, 5, 1, 2, norm='none', sn=True)
        self.block2 = Conv2dLayer(c, c * 2, 4, 2, 1, norm='in', sn=True)
        self.block3 = Conv2dLayer(c * 2, c * 4, 4, 2, 1, norm='in', sn=True)
        self.block4 = Conv2dLayer(c * 4, 1, 4, 2, 1, activation='none', norm='none', sn=True)

    def forward(self, img, mask):
        x = torch.cat((img, mask), 1)
        x = self.block1(x)
        x = self.block2(x)
        x = self.block3(x)
        x = self.block4(x)
        return x


class InpaintDataset(Dataset):
    def __init__(self, n=128, size=32, seed=0):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing='ij')
        colors = torch.rand(n, 3, 2, generator=g) * 2 - 1
        freq = 1 + 3 * torch.rand(n, 1, generator=g)
        stripes = torch.sin(freq.view(n, 1, 1) * 3.14 * (xx + yy)).unsqueeze(1)
        self.imgs = colors[..., 0, None, None] * (stripes > 0) + colors[..., 1, None, None] * (stripes <= 0)
        self.masks = torch.zeros(n, 1, size, size)
        for k in range(n):
            y, x = torch.randint(4, size - 16, (2,), generator=g).tolist()
            h, w = torch.randint(6, 12, (2,), generator=g).tolist()
            self.masks[k, :, y:y + h, x:x + w] = 1

    def __len__(self):
        return len(self.imgs)

    def __getitem__(self, index):
        return self.imgs[index], self.masks[index]


def create_perceptualnet():
    net = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, 1, 1), nn.ReLU())
    for param in net.parameters():
        param.requires_grad = False
    return net


def normalize_ImageNet_stats(batch):
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return (batch - mean) / std


def WGAN_trainer(opt):
    # Build networks
    generator = GatedGenerator(opt)
    discriminator = PatchDiscriminator(opt)
    perceptualnet = create_perceptualnet()

    # Loss functions
    L1Loss = nn.L1Loss()

    # Optimizers
    optimizer_g = torch.optim.Adam(generator.parameters(), lr = opt["lr_g"], betas = (opt["b1"], opt["b2"]), weight_decay = opt["weight_decay"])
    optimizer_d = torch.optim.Adam(discriminator.parameters(), lr = opt["lr_d"], betas = (opt["b1"], opt["b2"]), weight_decay = opt["weight_decay"])

    # Learning rate decrease
    def adjust_learning_rate(lr_in, optimizer, epoch, opt):
        lr = lr_in * (opt["lr_decrease_factor"] ** (epoch // opt["lr_decrease_epoch"]))
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr

    trainset = InpaintDataset()
    dataloader = DataLoader(trainset, batch_size = opt["batch_size"], shuffle = True)

    prev_time = time.time()
    for epoch in range(opt["epochs"]):
        log = {"D": 0.0, "G": 0.0, "L1_1": 0.0, "L1_2": 0.0, "P": 0.0, "gap": 0.0}
        for batch_idx, (img, mask) in enumerate(dataloader):

            ### Train Discriminator
            optimizer_d.zero_grad()

            # Generator output
            first_out, second_out = generator(img, mask)

            # forward propagation
            first_out_wholeimg = img * (1 - mask) + first_out * mask        # in range [-1, 1]
            second_out_wholeimg = img * (1 - mask) + second_out * mask      # in range [-1, 1]

            # Fake samples
            fake_scalar = discriminator(second_out_wholeimg.detach(), mask)
            # True samples
            true_scalar = discriminator(img, mask)

            # Overall Loss and optimize
            loss_D = - torch.mean(true_scalar) + torch.mean(fake_scalar)
            loss_D.backward()

            ### Train Generator
            optimizer_g.zero_grad()

            # Mask L1 Loss
            first_MaskL1Loss = L1Loss(first_out_wholeimg, img)
            second_MaskL1Loss = L1Loss(second_out_wholeimg, img)

            # GAN Loss
            fake_scalar = discriminator(second_out_wholeimg, mask)
            GAN_Loss = - torch.mean(fake_scalar)

            # Get the deep semantic feature maps, and compute Perceptual Loss
            img = (img + 1) / 2
            img = normalize_ImageNet_stats(img)
            img_featuremaps = perceptualnet(img)
            second_out_wholeimg = (second_out_wholeimg + 1) / 2
            second_out_wholeimg = normalize_ImageNet_stats(second_out_wholeimg)
            second_out_wholeimg_featuremaps = perceptualnet(second_out_wholeimg)
            second_PerceptualLoss = L1Loss(second_out_wholeimg_featuremaps, img_featuremaps)

            # Compute losses
            loss = first_MaskL1Loss + second_MaskL1Loss + opt["perceptual_param"] * second_PerceptualLoss + opt["gan_param"] * GAN_Loss
            loss.backward()
            optimizer_g.step()

            batches_done = epoch * len(dataloader) + batch_idx
            batches_left = opt["epochs"] * len(dataloader) - batches_done
            time_left = datetime.timedelta(seconds = batches_left * (time.time() - prev_time))
            prev_time = time.time()

            for k, v in (("D", loss_D), ("G", GAN_Loss), ("L1_1", first_MaskL1Loss), ("L1_2", second_MaskL1Loss), ("P", second_PerceptualLoss)):
                log[k] += v.item() / len(dataloader)
            log["gap"] += (true_scalar.mean() - fake_scalar.mean()).item() / len(dataloader)

        print("[Epoch %d/%d] [first Mask L1 Loss: %.5f] [second Mask L1 Loss: %.5f] [D Loss: %.5f] [G Loss: %.5f] "
              "[D(real)-D(fake): %.5f] [Perceptual Loss: %.5f]" %
              ((epoch + 1), opt["epochs"], log["L1_1"], log["L1_2"], log["D"], log["G"], log["gap"], log["P"]))

        # Learning rate decrease
        adjust_learning_rate(opt["lr_g"], optimizer_g, (epoch + 1), opt)
        adjust_learning_rate(opt["lr_d"], optimizer_d, (epoch + 1), opt)


def main():
    torch.manual_seed(0)
    opt = {"epochs": 6, "batch_size": 16, "lr_g": 1e-4, "lr_d": 4e-4, "b1": 0.5, "b2": 0.999, "weight_decay": 0,
           "lr_decrease_epoch": 10, "lr_decrease_factor": 0.5, "perceptual_param": 10, "gan_param": 0.01,
           "latent_channels": 8}
    WGAN_trainer(opt)


if __name__ == "__main__":
    main()
