# Source: akanimax/pro_gan_pytorch, pro_gan_pytorch/Losses.py (WGAN_GP), pro_gan_pytorch/PRO_GAN.py (Generator, Discriminator, ProGAN), pro_gan_pytorch/CustomLayers.py, commit aeec6e9d84f2214bfca9e47dc69c3a3f5a87d10e
# Report: https://github.com/akanimax/pro_gan_pytorch/pull/12
# ProGAN (progressive growing of GANs) trained with the WGAN-GP loss: a generator / discriminator
# pair that grows from 4x4 to 16x16, fade-in alpha at each new depth, Adam (0, 0.99), n_critic 1,
# EMA shadow generator. Reduced: depth 3 (4/8/16 px), latent 32, plain convolutions
# (use_eql=False), synthetic 16x16 images of coloured blobs instead of CelebA-HQ; the
# resident memory of the process is printed after every epoch.
import copy

import numpy as np
import torch as th


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2 ** 20


# ============================ CustomLayers ============================
class PixelwiseNorm(th.nn.Module):
    def __init__(self):
        super(PixelwiseNorm, self).__init__()

    def forward(self, x, alpha=1e-8):
        y = x.pow(2.).mean(dim=1, keepdim=True).add(alpha).sqrt()  # [N1HW]
        y = x / y  # normalize the input x volume
        return y


class GenInitialBlock(th.nn.Module):
    def __init__(self, in_channels, use_eql):
        from torch.nn import LeakyReLU
        from torch.nn import Conv2d, ConvTranspose2d

        super(GenInitialBlock, self).__init__()
        self.conv_1 = ConvTranspose2d(in_channels, in_channels, (4, 4), bias=True)
        self.conv_2 = Conv2d(in_channels, in_channels, (3, 3), padding=1, bias=True)
        self.pixNorm = PixelwiseNorm()
        self.lrelu = LeakyReLU(0.2)

    def forward(self, x):
        y = th.unsqueeze(th.unsqueeze(x, -1), -1)
        y = self.lrelu(self.conv_1(y))
        y = self.lrelu(self.conv_2(y))
        y = self.pixNorm(y)
        return y


class GenGeneralConvBlock(th.nn.Module):
    def __init__(self, in_channels, out_channels, use_eql):
        from torch.nn import LeakyReLU, Conv2d
        from torch.nn.functional import interpolate

        super(GenGeneralConvBlock, self).__init__()
        self.upsample = lambda x: interpolate(x, scale_factor=2)
        self.conv_1 = Conv2d(in_channels, out_channels, (3, 3), padding=1, bias=True)
        self.conv_2 = Conv2d(out_channels, out_channels, (3, 3), padding=1, bias=True)
        self.pixNorm = PixelwiseNorm()
        self.lrelu = LeakyReLU(0.2)

    def forward(self, x):
        y = self.upsample(x)
        y = self.pixNorm(self.lrelu(self.conv_1(y)))
        y = self.pixNorm(self.lrelu(self.conv_2(y)))
        return y


def update_average(model_tgt, model_src, beta):
    def toggle_grad(model, requires_grad):
        for p in model.parameters():
            p.requires_grad_(requires_grad)

    toggle_grad(model_tgt, False)
    toggle_grad(model_src, False)
    param_dict_src = dict(model_src.named_parameters())
    for p_name, p_tgt in model_tgt.named_parameters():
        p_src = param_dict_src[p_name]
        assert (p_src is not p_tgt)
        p_tgt.copy_(beta * p_tgt + (1. - beta) * p_src)
    toggle_grad(model_tgt, True)
    toggle_grad(model_src, True)


class MinibatchStdDev(th.nn.Module):
    def __init__(self):
        super(MinibatchStdDev, self).__init__()

    def forward(self, x, alpha=1e-8):
        batch_size, _, height, width = x.shape
        y = x - x.mean(dim=0, keepdim=True)
        y = th.sqrt(y.pow(2.).mean(dim=0, keepdim=False) + alpha)
        y = y.mean().view(1, 1, 1, 1)
        y = y.repeat(batch_size, 1, height, width)
        y = th.cat([x, y], 1)
        return y


class DisFinalBlock(th.nn.Module):
    def __init__(self, in_channels, use_eql):
        from torch.nn import LeakyReLU, Conv2d

        super(DisFinalBlock, self).__init__()
        self.batch_discriminator = MinibatchStdDev()
        self.conv_1 = Conv2d(in_channels + 1, in_channels, (3, 3), padding=1, bias=True)
        self.conv_2 = Conv2d(in_channels, in_channels, (4, 4), bias=True)
        self.conv_3 = Conv2d(in_channels, 1, (1, 1), bias=True)
        self.lrelu = LeakyReLU(0.2)

    def forward(self, x):
        y = self.batch_discriminator(x)
        y = self.lrelu(self.conv_1(y))
        y = self.lrelu(self.conv_2(y))
        y = self.conv_3(y)  # This layer has linear activation
        return y.view(-1)


class DisGeneralConvBlock(th.nn.Module):
    def __init__(self, in_channels, out_channels, use_eql):
        from torch.nn import AvgPool2d, LeakyReLU, Conv2d

        super(DisGeneralConvBlock, self).__init__()
        self.conv_1 = Conv2d(in_channels, in_channels, (3, 3), padding=1, bias=True)
        self.conv_2 = Conv2d(in_channels, out_channels, (3, 3), padding=1, bias=True)
        self.downSampler = AvgPool2d(2)
        self.lrelu = LeakyReLU(0.2)

    def forward(self, x):
        y = self.lrelu(self.conv_1(x))
        y = self.lrelu(self.conv_2(y))
        y = self.downSampler(y)
        return y


# ============================ Losses ============================
class GANLoss:
    def __init__(self, dis):
        self.dis = dis


class WGAN_GP(GANLoss):

    def __init__(self, dis, drift=0.001, use_gp=False):
        super().__init__(dis)
        self.drift = drift
        self.use_gp = use_gp

    def __gradient_penalty(self, real_samps, fake_samps,
                           height, alpha, reg_lambda=10):
        batch_size = real_samps.shape[0]

        # generate random epsilon
        epsilon = th.rand((batch_size, 1, 1, 1)).to(fake_samps.device)

        # create the merge of both real and fake samples
        merged = (epsilon * real_samps) + ((1 - epsilon) * fake_samps)
        merged.requires_grad = True

        # forward pass
        op = self.dis(merged, height, alpha)

        # perform backward pass from op to merged for obtaining the gradients
        op.backward(gradient=th.ones_like(op), create_graph=True)
        gradient = merged.grad  # this is the gradient of the op wrt. merged

        # calculate the penalty using these gradients
        gradient = gradient.view(gradient.shape[0], -1)
        penalty = reg_lambda * ((gradient.norm(p=2, dim=1) - 1) ** 2).mean()

        # return the calculated penalty:
        return penalty

    def dis_loss(self, real_samps, fake_samps, height, alpha):
        # define the (Wasserstein) loss
        fake_out = self.dis(fake_samps, height, alpha)
        real_out = self.dis(real_samps, height, alpha)

        loss = (th.mean(fake_out) - th.mean(real_out)
                + (self.drift * th.mean(real_out ** 2)))

        if self.use_gp:
            # calculate the WGAN-GP (gradient penalty)
            gp = self.__gradient_penalty(real_samps, fake_samps, height, alpha)
            loss += gp

        return loss

    def gen_loss(self, _, fake_samps, height, alpha):
        # calculate the WGAN loss for generator
        loss = -th.mean(self.dis(fake_samps, height, alpha))

        return loss


# ============================ PRO_GAN ============================
class Generator(th.nn.Module):
    def __init__(self, depth=7, latent_size=512, use_eql=True):
        from torch.nn import ModuleList, Conv2d
        from torch.nn.functional import interpolate

        super(Generator, self).__init__()
        self.use_eql = use_eql
        self.depth = depth
        self.latent_size = latent_size
        self.initial_block = GenInitialBlock(self.latent_size, use_eql=self.use_eql)
        self.layers = ModuleList([])
        self.toRGB = lambda in_channels: Conv2d(in_channels, 3, (1, 1), bias=True)
        self.rgb_converters = ModuleList([self.toRGB(self.latent_size)])
        for i in range(self.depth - 1):
            layer = GenGeneralConvBlock(self.latent_size, self.latent_size, use_eql=self.use_eql)
            rgb = self.toRGB(self.latent_size)
            self.layers.append(layer)
            self.rgb_converters.append(rgb)
        self.temporaryUpsampler = lambda x: interpolate(x, scale_factor=2)

    def forward(self, x, depth, alpha):
        assert depth < self.depth, "Requested output depth cannot be produced"
        y = self.initial_block(x)
        if depth > 0:
            for block in self.layers[:depth - 1]:
                y = block(y)
            residual = self.rgb_converters[depth - 1](self.temporaryUpsampler(y))
            straight = self.rgb_converters[depth](self.layers[depth - 1](y))
            out = (alpha * straight) + ((1 - alpha) * residual)
        else:
            out = self.rgb_converters[0](y)
        return out


class Discriminator(th.nn.Module):
    def __init__(self, height=7, feature_size=512, use_eql=True):
        from torch.nn import ModuleList, AvgPool2d, Conv2d

        super(Discriminator, self).__init__()
        self.use_eql = use_eql
        self.height = height
        self.feature_size = feature_size
        self.final_block = DisFinalBlock(self.feature_size, use_eql=self.use_eql)
        self.layers = ModuleList([])
        self.fromRGB = lambda out_channels: Conv2d(3, out_channels, (1, 1), bias=True)
        self.rgb_to_features = ModuleList([self.fromRGB(self.feature_size)])
        for i in range(self.height - 1):
            layer = DisGeneralConvBlock(self.feature_size, self.feature_size, use_eql=self.use_eql)
            rgb = self.fromRGB(self.feature_size)
            self.layers.append(layer)
            self.rgb_to_features.append(rgb)
        self.temporaryDownsampler = AvgPool2d(2)

    def forward(self, x, height, alpha):
        assert height < self.height, "Requested output depth cannot be produced"
        if height > 0:
            residual = self.rgb_to_features[height - 1](self.temporaryDownsampler(x))
            straight = self.layers[height - 1](
                self.rgb_to_features[height](x)
            )
            y = (alpha * straight) + ((1 - alpha) * residual)
            for block in reversed(self.layers[:height - 1]):
                y = block(y)
        else:
            y = self.rgb_to_features[0](x)
        out = self.final_block(y)
        return out


class ProGAN:
    def __init__(self, depth=7, latent_size=512, learning_rate=0.001, beta_1=0.0,
                 beta_2=0.99, eps=1e-8, drift=0.001, n_critic=1, use_eql=True,
                 loss="wgan-gp", use_ema=True, ema_decay=0.999,
                 device=th.device("cpu")):
        from torch.optim import Adam

        self.gen = Generator(depth, latent_size, use_eql=use_eql).to(device)
        self.dis = Discriminator(depth, latent_size, use_eql=use_eql).to(device)
        self.latent_size = latent_size
        self.depth = depth
        self.use_ema = use_ema
        self.ema_decay = ema_decay
        self.n_critic = n_critic
        self.use_eql = use_eql
        self.device = device
        self.drift = drift
        self.gen_optim = Adam(self.gen.parameters(), lr=learning_rate,
                              betas=(beta_1, beta_2), eps=eps)
        self.dis_optim = Adam(self.dis.parameters(), lr=learning_rate,
                              betas=(beta_1, beta_2), eps=eps)
        self.loss = WGAN_GP(self.dis, self.drift, use_gp=True)
        if self.use_ema:
            self.gen_shadow = copy.deepcopy(self.gen)
            self.ema_updater = update_average
            self.ema_updater(self.gen_shadow, self.gen, beta=0)

    def __progressive_downsampling(self, real_batch, depth, alpha):
        from torch.nn import AvgPool2d
        from torch.nn.functional import interpolate

        down_sample_factor = int(np.power(2, self.depth - depth - 1))
        prior_downsample_factor = max(int(np.power(2, self.depth - depth)), 0)
        ds_real_samples = AvgPool2d(down_sample_factor)(real_batch)
        if depth > 0:
            prior_ds_real_samples = interpolate(AvgPool2d(prior_downsample_factor)(real_batch),
                                                scale_factor=2)
        else:
            prior_ds_real_samples = ds_real_samples
        real_samples = (alpha * ds_real_samples) + ((1 - alpha) * prior_ds_real_samples)
        return real_samples

    def optimize_discriminator(self, noise, real_batch, depth, alpha):
        real_samples = self.__progressive_downsampling(real_batch, depth, alpha)

        loss_val = 0
        for _ in range(self.n_critic):
            # generate a batch of samples
            fake_samples = self.gen(noise, depth, alpha).detach()

            loss = self.loss.dis_loss(real_samples, fake_samples, depth, alpha)

            # optimize discriminator
            self.dis_optim.zero_grad()
            loss.backward()
            self.dis_optim.step()

            loss_val += loss.item()

        return loss_val / self.n_critic

    def optimize_generator(self, noise, real_batch, depth, alpha):
        real_samples = self.__progressive_downsampling(real_batch, depth, alpha)
        fake_samples = self.gen(noise, depth, alpha)
        loss = self.loss.gen_loss(real_samples, fake_samples, depth, alpha)
        self.gen_optim.zero_grad()
        loss.backward()
        self.gen_optim.step()
        if self.use_ema:
            self.ema_updater(self.gen_shadow, self.gen, self.ema_decay)
        return loss.item()

    def train(self, dataset, epochs, batch_sizes, fade_in_percentage):
        self.gen.train()
        self.dis.train()
        for current_depth in range(self.depth):
            print("\n\nCurrently working on Depth: ", current_depth)
            current_res = np.power(2, current_depth + 2)
            data = th.utils.data.DataLoader(dataset, batch_size=batch_sizes[current_depth], shuffle=True,
                                            drop_last=True)
            ticker = 1
            for epoch in range(1, epochs[current_depth] + 1):
                total_batches = len(data)
                fader_point = int((fade_in_percentage[current_depth] / 100)
                                  * epochs[current_depth] * total_batches)
                d_losses, g_losses = [], []
                for (i, batch) in enumerate(data, 1):
                    alpha = ticker / fader_point if ticker <= fader_point else 1
                    images = batch
                    gan_input = th.randn(images.shape[0], self.latent_size).to(self.device)
                    dis_loss = self.optimize_discriminator(gan_input, images, current_depth, alpha)
                    gen_loss = self.optimize_generator(gan_input, images, current_depth, alpha)
                    d_losses.append(dis_loss)
                    g_losses.append(gen_loss)
                    ticker += 1
                print(f"depth {current_depth} ({current_res}px) epoch {epoch}: d_loss {np.mean(d_losses):.3f} "
                      f"g_loss {np.mean(g_losses):.3f}  process RSS {rss_mb():.0f} MB")


def make_images(n, seed=0):
    g = th.Generator().manual_seed(seed)
    yy, xx = th.meshgrid(th.arange(16.0), th.arange(16.0), indexing="ij")
    c = th.rand(n, 2, generator=g) * 10 + 3
    colour = th.rand(n, 3, 1, 1, generator=g) * 2 - 1
    blob = th.exp(-((xx - c[:, 0, None, None]) ** 2 + (yy - c[:, 1, None, None]) ** 2) / 8.0)
    return (colour * blob[:, None]).clamp(-1, 1)


if __name__ == "__main__":
    th.manual_seed(0)
    th.set_num_threads(1)
    pro_gan = ProGAN(depth=3, latent_size=32, use_eql=False, learning_rate=0.001)
    dataset = make_images(384)
    print(f"start: process RSS {rss_mb():.0f} MB")
    pro_gan.train(dataset, epochs=[1, 1, 4], batch_sizes=[32, 32, 32], fade_in_percentage=[50, 50, 50])
