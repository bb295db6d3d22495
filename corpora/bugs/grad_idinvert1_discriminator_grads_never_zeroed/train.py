# Source: Hsintien-Ng/idinvert_pytorch-reproduced, training/training_loop_encoder.py + train_encoder.py, commit 7b0ef1a0cbd96c6f65e15c63b13cffa7bb82c523
# Report: https://github.com/Hsintien-Ng/idinvert_pytorch-reproduced/issues/1
#
# In-domain GAN inversion (encoder training): a frozen StyleGAN synthesis network G, a trainable encoder E that maps
# an image to per-layer w codes, a frozen perceptual network F, and a discriminator D trained with softplus GAN
# losses plus an R1-style gradient penalty on the reals (autograd.grad with create_graph=True); E is trained with
# pixel + perceptual + adversarial losses (the adversarial term backpropagates through D); two Adam optimizers with
# ExponentialLR decays stepped every decay_step iterations.
# Adaptation: the pretrained StyleGAN-FFHQ generator, VGG perceptual model and CelebA-HQ images are unavailable:
# G.net.synthesis is a small frozen conv decoder (4 layers x 16-d w codes -> 3x16x16), F.net a small frozen conv
# net (named F_ so it does not shadow torch.nn.functional), E.net and D.net small conv nets with the same call pattern; the
# images are G outputs for random codes (so an exact inversion exists); lr 1e-5 -> 1e-3, decay_step 3000 -> 40,
# batch 16, 6 epochs of 256 images; .cuda() dropped; no image snapshots, tensorboard or checkpoints; the epoch
# summary is printed, and a D accuracy (real vs reconstruction) and validation pixel MSE are added to it.
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.autograd as autograd
from torch.utils.data import DataLoader


class EasyDict(dict):
    __getattr__ = dict.__getitem__


class _Wrap:
    def __init__(self, net):
        self.net = net


class Synthesis(nn.Module):
    def __init__(self, num_layers=4, w_dim=16):
        super().__init__()
        self.fc = nn.Linear(w_dim, 32 * 4 * 4)
        self.convs = nn.ModuleList([nn.Conv2d(32, 32, 3, padding=1) for _ in range(num_layers - 1)])
        self.styles = nn.ModuleList([nn.Linear(w_dim, 32) for _ in range(num_layers - 1)])
        self.to_rgb = nn.Conv2d(32, 3, 1)

    def forward(self, w):
        h = self.fc(w[:, 0]).view(-1, 32, 4, 4)
        for i, (conv, style) in enumerate(zip(self.convs, self.styles)):
            if i < 2:
                h = F.interpolate(h, scale_factor=2, mode='nearest')
            h = F.leaky_relu(conv(h) * (1 + 2 * style(w[:, i + 1])[:, :, None, None]), 0.2)
        return torch.tanh(4 * self.to_rgb(h))


class StyleGANGenerator(_Wrap):
    def __init__(self):
        net = nn.Module()
        net.synthesis = Synthesis()
        super().__init__(net)
        self.num_layers, self.w_space_dim = 4, 16
        self.min_val, self.max_val = -1.0, 1.0
        for p in net.parameters():
            p.requires_grad_(False)


class StyleGANEncoder(_Wrap):
    def __init__(self):
        super().__init__(nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.LeakyReLU(0.2),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.LeakyReLU(0.2),
            nn.Flatten(), nn.Linear(64 * 4 * 4, 4 * 16)))


class PerceptualModel(_Wrap):
    def __init__(self, min_val=-1.0, max_val=1.0):
        super().__init__(nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
                                       nn.Conv2d(16, 32, 3, padding=1), nn.ReLU()))
        for p in self.net.parameters():
            p.requires_grad_(False)


class StyleGANDiscriminator(_Wrap):
    def __init__(self):
        super().__init__(nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.LeakyReLU(0.2),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.LeakyReLU(0.2),
            nn.Flatten(), nn.Linear(64 * 4 * 4, 1)))


class CelebaHQ(torch.utils.data.Dataset):
    """Stand-in for the CelebA-HQ loader: images produced by the frozen generator from random codes."""

    def __init__(self, G, n, seed):
        g = torch.Generator().manual_seed(seed)
        w = torch.randn(n, 4, 16, generator=g)
        with torch.no_grad():
            self.images = G.net.synthesis(w)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        return self.images[idx]


def div_loss_(D, real_x, fake_x, p=2, cuda=False):
    x_ = real_x.requires_grad_(True)
    y_ = D.net(x_)
    # cal f'(x)
    grad = autograd.grad(
        outputs=y_,
        inputs=x_,
        grad_outputs=torch.ones_like(y_),
        create_graph=True,
        retain_graph=True,
        only_inputs=True,
    )[0]
    div = (grad * grad).sum(dim=1, keepdim=True).sum(dim=2, keepdim=True).sum(dim=3, keepdim=True)
    div = torch.mean(div)
    return div


def GAN_loss(scores_out, real=True):
    if real:
        return torch.mean(F.softplus(-scores_out))
    else:
        return torch.mean(F.softplus(scores_out))


def training_loop(
        config,
        E_lr_args            = EasyDict(),
        D_lr_args            = EasyDict(),
        opt_args             = EasyDict(),
        E_loss_args          = EasyDict(),
        D_loss_args          = EasyDict(),
        max_epoch            = 50
):
    # parse
    loss_pix_weight = E_loss_args.loss_pix_weight
    loss_feat_weight = E_loss_args.loss_feat_weight
    loss_adv_weight = E_loss_args.loss_adv_weight
    loss_real_weight = D_loss_args.loss_real_weight
    loss_fake_weight = D_loss_args.loss_fake_weight
    loss_gp_weight = D_loss_args.loss_gp_weight
    loss_ep_weight = D_loss_args.loss_ep_weight
    E_learning_rate = E_lr_args.learning_rate
    D_learning_rate = D_lr_args.learning_rate

    # construct model
    G = StyleGANGenerator()
    E = StyleGANEncoder()
    F_ = PerceptualModel(min_val=G.min_val, max_val=G.max_val)
    D = StyleGANDiscriminator()
    G.net.synthesis.eval()
    E.net.train()
    F_.net.eval()
    D.net.train()
    encode_dim = [G.num_layers, G.w_space_dim]

    # construct dataloader
    train_dataset = CelebaHQ(G, 256, seed=1)
    val_dataset = CelebaHQ(G, 64, seed=2)
    train_dataloader = DataLoader(train_dataset, batch_size=config.train_batch_size, shuffle=True)
    val_dataloader = DataLoader(val_dataset, batch_size=config.test_batch_size, shuffle=False)

    # optimizer
    optimizer_E = torch.optim.Adam(E.net.parameters(), lr=E_learning_rate, **opt_args)
    optimizer_D = torch.optim.Adam(D.net.parameters(), lr=D_learning_rate, **opt_args)
    lr_scheduler_E = torch.optim.lr_scheduler.ExponentialLR(optimizer=optimizer_E, gamma=E_lr_args.decay_rate)
    lr_scheduler_D = torch.optim.lr_scheduler.ExponentialLR(optimizer=optimizer_D, gamma=D_lr_args.decay_rate)

    global_step = 0
    for epoch in range(max_epoch):
        E_loss_rec = 0.
        E_loss_adv = 0.
        E_loss_feat = 0.
        D_loss_real = 0.
        D_loss_fake = 0.
        D_loss_grad = 0.
        learning_rate = lr_scheduler_E.get_last_lr()[0]
        for step, items in enumerate(train_dataloader):
            E.net.train()
            x = items
            x = x.float()
            batch_size = x.shape[0]
            z = E.net(x).view(batch_size, *encode_dim)
            x_rec = G.net.synthesis(z)

            # ===============================
            #         optimizing D
            # ===============================

            x_real = D.net(x)
            x_fake = D.net(x_rec.detach())
            loss_real = GAN_loss(x_real, real=True)
            loss_fake = GAN_loss(x_fake, real=False)
            # gradient div
            loss_gp = div_loss_(D, x, x_rec.detach(), cuda=config.cuda)

            D_loss_real += loss_real.item()
            D_loss_fake += loss_fake.item()
            D_loss_grad += loss_gp.item()
            D_loss = loss_real_weight * loss_real + loss_fake_weight * loss_fake + loss_gp_weight * loss_gp + loss_ep_weight * (loss_real * loss_real)
            D_loss.backward()
            optimizer_D.step()

            # ===============================
            #         optimizing G
            # ===============================
            # Reconstruction loss.
            loss_pix = torch.mean((x - x_rec) ** 2)
            E_loss_rec += loss_pix.item()

            # Perceptual loss.
            loss_feat = 0.
            if loss_feat_weight:
                x_feat = F_.net(x)
                x_rec_feat = F_.net(x_rec)
                loss_feat = torch.mean((x_feat - x_rec_feat) ** 2)
                E_loss_feat += loss_feat.item()

            # adversarial loss.
            loss_adv = 0.
            if loss_adv_weight:
                x_adv = D.net(x_rec)
                loss_adv = GAN_loss(x_adv, real=True)
                E_loss_adv += loss_adv.item()

            E_loss = loss_pix_weight * loss_pix + loss_feat_weight * loss_feat + loss_adv_weight * loss_adv
            optimizer_E.zero_grad()
            E_loss.backward()
            optimizer_E.step()

            global_step += 1
            if (global_step + 1) % E_lr_args.decay_step == 0:
                lr_scheduler_E.step()
            if (global_step + 1) % D_lr_args.decay_step == 0:
                lr_scheduler_D.step()

        D_loss_real /= train_dataloader.__len__()
        D_loss_fake /= train_dataloader.__len__()
        D_loss_grad /= train_dataloader.__len__()
        E_loss_rec /= train_dataloader.__len__()
        E_loss_adv /= train_dataloader.__len__()
        E_loss_feat /= train_dataloader.__len__()

        # validation: reconstruction error and how well D separates reals from reconstructions
        E.net.eval()
        val_mse, d_correct, n = 0., 0, 0
        with torch.no_grad():
            for x_val in val_dataloader:
                z_val = E.net(x_val).view(x_val.shape[0], *encode_dim)
                x_rec_val = G.net.synthesis(z_val)
                val_mse += torch.mean((x_val - x_rec_val) ** 2).item() * x_val.shape[0]
                d_correct += (D.net(x_val) > 0).sum().item() + (D.net(x_rec_val) < 0).sum().item()
                n += x_val.shape[0]
        log_message_ep = f'D-[real:{D_loss_real:.3f}, fake:{D_loss_fake:.3f}, gp:{D_loss_grad:.3f}], ' \
                         f'G-[pix:{E_loss_rec:.4f}, feat:{E_loss_feat:.3f}, adv:{E_loss_adv:.3f}], ' \
                         f'val-[pix:{val_mse / n:.4f}, D acc:{d_correct / (2 * n):.3f}]'
        print(f'Epoch: {epoch:03d}, '
              f'lr: {learning_rate:.2e}, '
              f'{log_message_ep}')


def main():
    torch.manual_seed(0)
    config = EasyDict(train_batch_size=16, test_batch_size=8, cuda=False)
    opt_args = EasyDict(betas=(0.9, 0.99), eps=1e-8)
    E_lr_args = EasyDict(learning_rate=0.001, decay_step=40, decay_rate=0.8, stair=False)
    D_lr_args = EasyDict(learning_rate=0.001, decay_step=40, decay_rate=0.8, stair=False)
    E_loss_args = EasyDict(loss_pix_weight=1.0, loss_feat_weight=0.00005, loss_adv_weight=0.1)
    D_loss_args = EasyDict(loss_real_weight=1.0, loss_fake_weight=1.0, loss_gp_weight=5.0, loss_ep_weight=0.001)
    training_loop(config, E_lr_args, D_lr_args, opt_args, E_loss_args, D_loss_args, max_epoch=6)


if __name__ == '__main__':
    main()
