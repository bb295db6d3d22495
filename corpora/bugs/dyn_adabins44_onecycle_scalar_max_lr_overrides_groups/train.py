# Source: shariqfarooq123/AdaBins, train.py (train), models/unet_adaptive_bins.py (UnetAdaptiveBins.get_1x_lr_params / get_10x_lr_params), loss.py (SILogLoss), commit 2fb686a66a304f0a719bc53d77412460af97fd61
# Report: https://github.com/shariqfarooq123/AdaBins/issues/44
# AdaBins depth training: encoder parameters at lr/10 and decoder + adaptive-bins head at lr
# (two AdamW parameter groups, since --same-lr is off by default), a OneCycleLR schedule stepped
# every iteration, SILog loss, gradient clipping at 0.1 and periodic validation. NYU-Depth is
# replaced by synthetic RGB-D pairs (a tilted floor plus boxes), the EfficientNet-B5 encoder and
# mini-ViT by small conv blocks, wandb and checkpoints by prints; the chamfer bins loss needs
# pytorch3d and is left out (w_chamfer = 0).
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


class SILogLoss(nn.Module):  # Main loss function used in AdaBins paper
    def __init__(self):
        super(SILogLoss, self).__init__()
        self.name = 'SILog'

    def forward(self, input, target, mask=None, interpolate=True):
        if interpolate:
            input = nn.functional.interpolate(input, target.shape[-2:], mode='bilinear', align_corners=True)

        if mask is not None:
            input = input[mask]
            target = target[mask]
        g = torch.log(input) - torch.log(target)
        Dg = torch.var(g) + 0.15 * torch.pow(torch.mean(g), 2)
        return 10 * torch.sqrt(Dg)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.b1 = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU())
        self.b2 = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU())

    def forward(self, x):
        f1 = self.b1(x)
        return [f1, self.b2(f1)]


class DecoderBN(nn.Module):
    def __init__(self, num_classes=16):
        super().__init__()
        self.up = nn.Sequential(nn.Conv2d(32 + 16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.LeakyReLU())
        self.conv3 = nn.Conv2d(32, num_classes, 3, padding=1)

    def forward(self, features):
        f1, f2 = features
        x = F.interpolate(f2, size=f1.shape[-2:], mode='bilinear', align_corners=True)
        return self.conv3(self.up(torch.cat([x, f1], dim=1)))


class mViT(nn.Module):
    def __init__(self, in_channels, n_query_channels=16, dim_out=32):
        super().__init__()
        self.regressor = nn.Sequential(nn.Linear(in_channels, 64), nn.LeakyReLU(), nn.Linear(64, dim_out))
        self.dot_product_layer = nn.Conv2d(in_channels, n_query_channels, 1)

    def forward(self, x):
        y = self.regressor(x.mean(dim=(2, 3)))
        y = torch.relu(y) + 0.1
        y = y / y.sum(dim=1, keepdim=True)
        return y, self.dot_product_layer(x)


class UnetAdaptiveBins(nn.Module):
    def __init__(self, n_bins=32, min_val=0.1, max_val=10):
        super(UnetAdaptiveBins, self).__init__()
        self.min_val, self.max_val = min_val, max_val
        self.encoder = Encoder()
        self.adaptive_bins_layer = mViT(16, n_query_channels=16, dim_out=n_bins)
        self.decoder = DecoderBN(num_classes=16)
        self.conv_out = nn.Sequential(nn.Conv2d(16, n_bins, kernel_size=1), nn.Softmax(dim=1))

    def forward(self, x):
        unet_out = self.decoder(self.encoder(x))
        bin_widths_normed, range_attention_maps = self.adaptive_bins_layer(unet_out)
        out = self.conv_out(range_attention_maps)

        bin_widths = (self.max_val - self.min_val) * bin_widths_normed
        bin_widths = F.pad(bin_widths, (1, 0), mode='constant', value=self.min_val)
        bin_edges = torch.cumsum(bin_widths, dim=1)

        centers = 0.5 * (bin_edges[:, :-1] + bin_edges[:, 1:])
        n, dout = centers.size()
        centers = centers.view(n, dout, 1, 1)

        pred = torch.sum(out * centers, dim=1, keepdim=True)
        return bin_edges, pred

    def get_1x_lr_params(self):  # lr/10 learning rate
        return self.encoder.parameters()

    def get_10x_lr_params(self):  # lr learning rate
        modules = [self.decoder, self.adaptive_bins_layer, self.conv_out]
        for m in modules:
            yield from m.parameters()


class DepthDataset(Dataset):
    def __init__(self, n, seed, size=32):
        rng = np.random.RandomState(seed)
        yy, xx = np.mgrid[0:size, 0:size] / size
        self.items = []
        for _ in range(n):
            depth = 1.5 + 6.0 * yy[::-1] * rng.uniform(0.7, 1.2) + rng.uniform(-0.5, 0.5) * xx
            for _ in range(rng.randint(1, 4)):
                cy, cx = rng.randint(4, size - 10, size=2)
                h, w = rng.randint(4, 10, size=2)
                depth[cy:cy + h, cx:cx + w] = rng.uniform(1.0, 4.0)
            shade = 1.0 / depth
            img = np.stack([shade * rng.uniform(0.8, 1.2) for _ in range(3)]) + 0.05 * rng.randn(3, size, size)
            self.items.append({'image': torch.tensor(img, dtype=torch.float32),
                               'depth': torch.tensor(depth[None].copy(), dtype=torch.float32)})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def validate(args, model, test_loader, criterion_ueff, device='cpu'):
    with torch.no_grad():
        losses, abs_rel = [], []
        for batch in test_loader:
            img = batch['image'].to(device)
            depth = batch['depth'].to(device)
            bins, pred = model(img)
            mask = depth > args.min_depth
            losses.append(criterion_ueff(pred, depth, mask=mask.to(torch.bool), interpolate=True).item())
            pred = nn.functional.interpolate(pred, depth.shape[-2:], mode='bilinear', align_corners=True)
            abs_rel.append((torch.abs(pred - depth) / depth).mean().item())
    return np.mean(losses), np.mean(abs_rel)


def train(model, args, epochs=10, lr=0.0001, device='cpu'):
    train_loader = DataLoader(DepthDataset(64, seed=0), batch_size=args.bs, shuffle=True)
    test_loader = DataLoader(DepthDataset(16, seed=1), batch_size=args.bs, shuffle=False)

    criterion_ueff = SILogLoss()
    model.train()

    ###################################### Optimizer ################################################
    if args.same_lr:
        print("Using same LR")
        params = model.parameters()
    else:
        print("Using diff LR")
        m = model
        params = [{"params": m.get_1x_lr_params(), "lr": lr / 10},
                  {"params": m.get_10x_lr_params(), "lr": lr}]

    optimizer = optim.AdamW(params, weight_decay=args.wd, lr=args.lr)
    ################################################################################################
    iters = len(train_loader)
    step = args.epoch * iters

    ###################################### Scheduler ###############################################
    scheduler = optim.lr_scheduler.OneCycleLR(optimizer, lr, epochs=epochs, steps_per_epoch=len(train_loader),
                                              cycle_momentum=True,
                                              base_momentum=0.85, max_momentum=0.95, last_epoch=args.last_epoch,
                                              div_factor=args.div_factor,
                                              final_div_factor=args.final_div_factor)
    ################################################################################################

    for epoch in range(args.epoch, epochs):
        enc_lrs, dec_lrs, train_losses = [], [], []
        for i, batch in enumerate(train_loader):
            optimizer.zero_grad()

            img = batch['image'].to(device)
            depth = batch['depth'].to(device)

            bin_edges, pred = model(img)

            mask = depth > args.min_depth
            l_dense = criterion_ueff(pred, depth, mask=mask.to(torch.bool), interpolate=True)
            loss = l_dense
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.1)  # optional
            optimizer.step()
            enc_lrs.append(optimizer.param_groups[0]['lr'])
            dec_lrs.append(optimizer.param_groups[1]['lr'])
            train_losses.append(loss.item())

            step += 1
            scheduler.step()

        model.eval()
        val_si, abs_rel = validate(args, model, test_loader, criterion_ueff, device)
        model.train()
        print(f"Epoch {epoch + 1}/{epochs}: train SILog {np.mean(train_losses):.3f} val SILog {val_si:.3f} "
              f"abs_rel {abs_rel:.3f} | encoder lr max {max(enc_lrs):.2e} decoder lr max {max(dec_lrs):.2e}")
    return model


if __name__ == '__main__':
    torch.manual_seed(0)
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description='Training script. Default values of all arguments are recommended for reproducibility')
    parser.add_argument('--epochs', default=8, type=int, help='number of total epochs to run')
    parser.add_argument('--lr', '--learning-rate', default=0.000357, type=float, help='max learning rate')
    parser.add_argument('--wd', '--weight-decay', default=0.1, type=float, help='weight decay')
    parser.add_argument('--div-factor', '--div_factor', default=25, type=float, help="Initial div factor for lr")
    parser.add_argument('--final-div-factor', '--final_div_factor', default=100, type=float,
                        help="final div factor for lr")
    parser.add_argument('--bs', default=8, type=int, help='batch size')
    parser.add_argument("--same-lr", '--same_lr', default=False, action="store_true",
                        help="Use same LR for all param groups")
    parser.add_argument('--min_depth', type=float, help='minimum depth in estimation', default=1e-3)
    args = parser.parse_args()

    model = UnetAdaptiveBins(n_bins=32, min_val=0.1, max_val=10)
    args.epoch = 0
    args.last_epoch = -1
    train(model, args, epochs=args.epochs, lr=args.lr, device='cpu')
