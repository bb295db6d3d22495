# Source: LynnHo/DCGAN-LSGAN-WGAN-GP-DRAGAN-Pytorch, train.py + module.py + torchprob/gan/gradient_penalty.py +
# torchprob/gan/loss.py + torchlib/layers/layers.py, commit 9e757de6f02dc5f3b31e380428787bf2b3137906
# https://github.com/LynnHo/DCGAN-LSGAN-WGAN-GP-DRAGAN-Pytorch
#
# DRAGAN (--adversarial_loss_mode gan --gradient_penalty_mode 1-gp --gradient_penalty_sample_mode dragan):
# the penalty samples are real + 0.5*std*U perturbations, .detach()ed and then given requires_grad=True,
# torch.autograd.grad(create_graph=True) of D at those points, (||grad|| - 1)^2 added with weight 10; the D step
# uses G(z).detach(); G.zero_grad()/D.zero_grad() instead of optimizer.zero_grad(); the G step backpropagates
# through D (D gets gradients it does not use until D.zero_grad()); BatchNorm is replaced by GroupNorm(1, C)
# ("layer_norm") in D because of the gradient penalty; generator samples are drawn under @torch.no_grad().
# Adaptation: fashion_mnist is not downloadable here, so 2048 synthetic 16x16 one-channel "garments" (random
# boxes/discs in [-1, 1]) are generated; 32x32 -> 16x16 (n_upsamplings 3 -> 2), dim 64 -> 16, z_dim 128 -> 32,
# epochs 25 -> 6; the module-level script is wrapped in main(); no tensorboard, image files or checkpoints. A
# pixel-statistics distance between 512 samples and the real data is printed per epoch as progress metric.
import functools

import numpy as np
import torch
from torch import nn


# ----------------------------------------------------------------------------------- torchlib/layers/layers.py
class Identity(torch.nn.Module):

    def __init__(self, *args, **keyword_args):
        super().__init__()

    def forward(self, x):
        return x


# ------------------------------------------------------------------------------------------------ module.py
def _get_norm_layer_2d(norm):
    if norm == 'none':
        return Identity
    elif norm == 'batch_norm':
        return nn.BatchNorm2d
    elif norm == 'instance_norm':
        return functools.partial(nn.InstanceNorm2d, affine=True)
    elif norm == 'layer_norm':
        return lambda num_features: nn.GroupNorm(1, num_features)
    else:
        raise NotImplementedError


class ConvGenerator(nn.Module):

    def __init__(self,
                 input_dim=128,
                 output_channels=3,
                 dim=64,
                 n_upsamplings=4,
                 norm='batch_norm'):
        super().__init__()

        Norm = _get_norm_layer_2d(norm)

        def dconv_norm_relu(in_dim, out_dim, kernel_size=4, stride=2, padding=1):
            return nn.Sequential(
                nn.ConvTranspose2d(in_dim, out_dim, kernel_size, stride=stride, padding=padding, bias=False or Norm == Identity),
                Norm(out_dim),
                nn.ReLU()
            )

        layers = []

        # 1: 1x1 -> 4x4
        d = min(dim * 2 ** (n_upsamplings - 1), dim * 8)
        layers.append(dconv_norm_relu(input_dim, d, kernel_size=4, stride=1, padding=0))

        # 2: upsamplings, 4x4 -> 8x8 -> 16x16 -> ...
        for i in range(n_upsamplings - 1):
            d_last = d
            d = min(dim * 2 ** (n_upsamplings - 2 - i), dim * 8)
            layers.append(dconv_norm_relu(d_last, d, kernel_size=4, stride=2, padding=1))

        layers.append(nn.ConvTranspose2d(d, output_channels, kernel_size=4, stride=2, padding=1))
        layers.append(nn.Tanh())

        self.net = nn.Sequential(*layers)

    def forward(self, z):
        x = self.net(z)
        return x


class ConvDiscriminator(nn.Module):

    def __init__(self,
                 input_channels=3,
                 dim=64,
                 n_downsamplings=4,
                 norm='batch_norm'):
        super().__init__()

        Norm = _get_norm_layer_2d(norm)

        def conv_norm_lrelu(in_dim, out_dim, kernel_size=4, stride=2, padding=1):
            return nn.Sequential(
                nn.Conv2d(in_dim, out_dim, kernel_size, stride=stride, padding=padding, bias=False or Norm == Identity),
                Norm(out_dim),
                nn.LeakyReLU(0.2)
            )

        layers = []

        # 1: downsamplings, ... -> 16x16 -> 8x8 -> 4x4
        d = dim
        layers.append(nn.Conv2d(input_channels, d, kernel_size=4, stride=2, padding=1))
        layers.append(nn.LeakyReLU(0.2))

        for i in range(n_downsamplings - 1):
            d_last = d
            d = min(dim * 2 ** (i + 1), dim * 8)
            layers.append(conv_norm_lrelu(d_last, d, kernel_size=4, stride=2, padding=1))

        # 2: logit
        layers.append(nn.Conv2d(d, 1, kernel_size=4, stride=1, padding=0))

        self.net = nn.Sequential(*layers)

    def forward(self, x):
        y = self.net(x)
        return y


# ------------------------------------------------------------------------------------- torchprob/gan/loss.py
def get_gan_losses_fn():
    bce = torch.nn.BCEWithLogitsLoss()

    def d_loss_fn(r_logit, f_logit):
        r_loss = bce(r_logit, torch.ones_like(r_logit))
        f_loss = bce(f_logit, torch.zeros_like(f_logit))
        return r_loss, f_loss

    def g_loss_fn(f_logit):
        f_loss = bce(f_logit, torch.ones_like(f_logit))
        return f_loss

    return d_loss_fn, g_loss_fn


def get_adversarial_losses_fn(mode):
    if mode == 'gan':
        return get_gan_losses_fn()
    raise NotImplementedError(mode)


# ------------------------------------------------------------------------ torchprob/gan/gradient_penalty.py
def _sample_line(real, fake):
    shape = [real.size(0)] + [1] * (real.dim() - 1)
    alpha = torch.rand(shape, device=real.device)
    sample = real + alpha * (fake - real)
    return sample


def _sample_DRAGAN(real, fake):  # fake is useless
    beta = torch.rand_like(real)
    fake = real + 0.5 * real.std() * beta
    sample = _sample_line(real, fake)
    return sample


def _norm(x):
    norm = x.view(x.size(0), -1).norm(p=2, dim=1)
    return norm


def _one_mean_gp(grad):
    norm = _norm(grad)
    gp = ((norm - 1)**2).mean()
    return gp


def _zero_mean_gp(grad):
    norm = _norm(grad)
    gp = (norm**2).mean()
    return gp


def _lipschitz_penalty(grad):
    norm = _norm(grad)
    gp = (torch.max(torch.zeros_like(norm), norm - 1)**2).mean()
    return gp


def gradient_penalty(f, real, fake, gp_mode, sample_mode):
    sample_fns = {
        'line': _sample_line,
        'real': lambda real, fake: real,
        'fake': lambda real, fake: fake,
        'dragan': _sample_DRAGAN,
    }

    gp_fns = {
        '1-gp': _one_mean_gp,
        '0-gp': _zero_mean_gp,
        'lp': _lipschitz_penalty,
    }

    if gp_mode == 'none':
        gp = torch.tensor(0, dtype=real.dtype, device=real.device)
    else:
        x = sample_fns[sample_mode](real, fake).detach()
        x.requires_grad = True
        pred = f(x)
        grad = torch.autograd.grad(pred, x, grad_outputs=torch.ones_like(pred), create_graph=True)[0]
        gp = gp_fns[gp_mode](grad)

    return gp


# ------------------------------------------------------------------------------------------------- data.py
def make_garments(n=2048, seed=0):
    """fashion_mnist stand-in: 16x16 one-channel images in [-1, 1] with a box or a disc of random size."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:16, 0:16]
    imgs = np.full((n, 1, 16, 16), -1.0, np.float32)
    for i in range(n):
        cy, cx = rng.uniform(5, 11, 2)
        r = rng.uniform(2.5, 5)
        if rng.rand() < 0.5:
            m = (np.abs(yy - cy) < r) & (np.abs(xx - cx) < r * 0.7)
        else:
            m = (yy - cy) ** 2 + (xx - cx) ** 2 < r ** 2
        imgs[i, 0][m] = rng.uniform(0.3, 1.0)
    return torch.from_numpy(imgs)


def pixel_stat_distance(fake, real):
    """|mean image difference| + |std image difference| + mean-intensity histogram L1 (lower is better)."""
    d_mean = (fake.mean(0) - real.mean(0)).abs().mean()
    d_std = (fake.std(0) - real.std(0)).abs().mean()
    h_f = torch.histc(fake, bins=20, min=-1, max=1) / fake.numel()
    h_r = torch.histc(real, bins=20, min=-1, max=1) / real.numel()
    return float(d_mean + d_std + (h_f - h_r).abs().sum())


# ------------------------------------------------------------------------------------------------ train.py
def main():
    torch.manual_seed(0)
    np.random.seed(0)

    class args:
        dataset = 'fashion_mnist'
        batch_size = 64
        epochs = 6
        lr = 0.0002
        beta_1 = 0.5
        n_d = 1
        z_dim = 32
        adversarial_loss_mode = 'gan'
        gradient_penalty_mode = '1-gp'
        gradient_penalty_sample_mode = 'dragan'
        gradient_penalty_weight = 10.0
        gradient_penalty_d_norm = 'layer_norm'

    device = torch.device("cpu")

    data = make_garments()
    data_loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    shape = (16, 16, 1)
    n_G_upsamplings = n_D_downsamplings = 2

    # setup the normalization function for discriminator
    if args.gradient_penalty_mode == 'none':
        d_norm = 'batch_norm'
    else:  # cannot use batch normalization with gradient penalty
        d_norm = args.gradient_penalty_d_norm

    # networks
    G = ConvGenerator(args.z_dim, shape[-1], dim=16, n_upsamplings=n_G_upsamplings).to(device)
    D = ConvDiscriminator(shape[-1], dim=16, n_downsamplings=n_D_downsamplings, norm=d_norm).to(device)
    print(G)
    print(D)

    # adversarial_loss_functions
    d_loss_fn, g_loss_fn = get_adversarial_losses_fn(args.adversarial_loss_mode)

    # optimizer
    G_optimizer = torch.optim.Adam(G.parameters(), lr=args.lr, betas=(args.beta_1, 0.999))
    D_optimizer = torch.optim.Adam(D.parameters(), lr=args.lr, betas=(args.beta_1, 0.999))

    def train_G():
        G.train()
        D.train()

        z = torch.randn(args.batch_size, args.z_dim, 1, 1).to(device)
        x_fake = G(z)

        x_fake_d_logit = D(x_fake)
        G_loss = g_loss_fn(x_fake_d_logit)

        G.zero_grad()
        G_loss.backward()
        G_optimizer.step()

        return {'g_loss': G_loss}

    def train_D(x_real):
        G.train()
        D.train()

        z = torch.randn(args.batch_size, args.z_dim, 1, 1).to(device)
        x_fake = G(z).detach()

        x_real_d_logit = D(x_real)
        x_fake_d_logit = D(x_fake)

        x_real_d_loss, x_fake_d_loss = d_loss_fn(x_real_d_logit, x_fake_d_logit)
        gp = gradient_penalty(functools.partial(D), x_real, x_fake, gp_mode=args.gradient_penalty_mode, sample_mode=args.gradient_penalty_sample_mode)

        D_loss = (x_real_d_loss + x_fake_d_loss) + gp * args.gradient_penalty_weight

        D.zero_grad()
        D_loss.backward()
        D_optimizer.step()

        return {'d_loss': x_real_d_loss + x_fake_d_loss, 'gp': gp}

    @torch.no_grad()
    def sample(z):
        G.eval()
        return G(z)

    ep, it_d, it_g = 0, 0, 0
    z = torch.randn(512, args.z_dim, 1, 1).to(device)  # a fixed noise for sampling
    dists = [pixel_stat_distance(sample(z), data)]
    print('epoch 0: pixel_stat_distance %.4f' % dists[0])

    for ep_ in range(args.epochs):
        if ep_ < ep:
            continue
        ep += 1

        # train for an epoch
        for x_real in data_loader:
            x_real = x_real.to(device)

            D_loss_dict = train_D(x_real)
            it_d += 1

            if it_d % args.n_d == 0:
                G_loss_dict = train_G()
                it_g += 1

        dists.append(pixel_stat_distance(sample(z), data))
        print('epoch %d: d_loss %.4f gp %.4f g_loss %.4f pixel_stat_distance %.4f' % (
            ep, D_loss_dict['d_loss'].item(), D_loss_dict['gp'].item(), G_loss_dict['g_loss'].item(), dists[-1]))
    print(f"[summary] pixel_stat_distance first={dists[0]:.4f} last={dists[-1]:.4f} decreased={dists[-1] < dists[0]}")


if __name__ == '__main__':
    main()
