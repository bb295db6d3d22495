# Source: LianpoWang/SLIIF, models/resmlps.py (RESMLPS, RES_MLP, COOD_MLP, ExpansionNet), models/sliif.py (SLIIF.query_rgb), train_liif.py, configs/train-div2k/train_rdn-sliif.yaml, commit 5d5181bc1eac0806a55c63befb4fbd3e4daf3924
# Report: https://github.com/LianpoWang/SLIIF/issues/13
# SLIIF: a local implicit image function for speckle-image super-resolution. An encoder gives a
# feature map; for each queried HR coordinate the unfolded nearest feature, the relative
# coordinate and the cell size go to the "resmlps" decoder: 10 residual MLPs whose outputs are
# mixed by normalised scores from an ExpansionNet. The RDN/MUSE encoder is reduced to a small
# conv net (8 channels), the local ensemble is off; speckle images are synthetic 32x32 fields,
# the LR input is the 2x average-pooled image; 256 HR coordinates are queried per image.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RESMLPS(nn.Module):

    def __init__(self, in_dim, out_dim, hidden_list,coord_hidden_list):
        super().__init__()

        self.mlps = [RES_MLP(in_dim, out_dim, coord_hidden_list) for _ in range(10)]

        self.cood_mlp = COOD_MLP(2, 16, hidden_list)

        self.expansionNet = ExpansionNet(in_dim, 10, hidden_list)

    def forward(self, x, rel_coord):
        scores = self.expansionNet(x)

        cood_out = self.cood_mlp(rel_coord)

        res_list = [mlp(x, cood_out).cpu().detach().numpy() for mlp in self.mlps]

        mlp_res = torch.tensor(np.array(res_list))

        mlp_res = mlp_res.transpose(0, 1)

        return torch.sum(scores.unsqueeze(-1) * mlp_res, 1)


class RES_MLP(nn.Module):

    def __init__(self, in_dim, out_dim, coord_hidden_list):
        super().__init__()
        layers = []
        lastv = in_dim
        for hidden in coord_hidden_list:
            layers.append(nn.Linear(lastv, 16))
            lastv = hidden
        self.layers = nn.Sequential(*layers)
        self.relu = nn.ReLU()

        self.linear_out = nn.Linear(lastv, out_dim)

    def forward(self, x, cood_out):
        out = x.view(-1, x.shape[-1])

        for layer in self.layers:
            out = self.relu(layer(out))
            out = torch.add(out, cood_out)
        out = self.linear_out(out)
        shape = out.shape[:-1]
        return out.view(*shape, -1)


class COOD_MLP(nn.Module):

    def __init__(self, in_dim, out_dim, hidden_list):
        super().__init__()
        layers = []
        lastv = in_dim
        for hidden in hidden_list:
            layers.append(nn.Linear(lastv, hidden))
            layers.append(nn.ReLU())
            lastv = hidden
        layers.append(nn.Linear(lastv, out_dim))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        shape = x.shape[:-1]
        x = self.layers(x.view(-1, x.shape[-1]))
        return x.view(*shape, -1)


class ExpansionNet(nn.Module):
    def __init__(self, in_dim, out_dim, hidden_list):
        super(ExpansionNet, self).__init__()
        layers = []
        lastv = in_dim
        self.out_dim = out_dim
        for hidden in hidden_list:
            layers.append(nn.Linear(lastv, hidden))
            layers.append(nn.ReLU())
            lastv = hidden
        layers.append(nn.Linear(lastv, out_dim))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        b, c = x.shape
        x = x.view(-1, c)
        logits = self.layers(x)
        out = nn.functional.normalize(logits, dim=1)
        return out.view(b, self.out_dim)


def make_coord(shape, flatten=True):
    coord_seqs = []
    for n in shape:
        r = 1 / n
        coord_seqs.append(-1 + r + (2 * r) * torch.arange(n).float())
    ret = torch.stack(torch.meshgrid(*coord_seqs, indexing='ij'), dim=-1)
    return ret.view(-1, ret.shape[-1]) if flatten else ret


class SLIIF(nn.Module):
    def __init__(self, out_dim=1, feat_dim=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, 32, 3, 1, 1), nn.ReLU(),
                                     nn.Conv2d(32, feat_dim, 3, 1, 1))
        imnet_in_dim = feat_dim * 9 + 2 + 2
        self.imnet = RESMLPS(imnet_in_dim, out_dim, hidden_list=[64, 64], coord_hidden_list=[16, 16, 16, 16])

    def query_rgb(self, coord, cell):
        feat = self.feat
        feat = F.unfold(feat, 3, padding=1).view(feat.shape[0], feat.shape[1] * 9, feat.shape[2], feat.shape[3])
        feat_coord = make_coord(feat.shape[-2:], flatten=False).permute(2, 0, 1) \
            .unsqueeze(0).expand(feat.shape[0], 2, *feat.shape[-2:])
        coord_ = coord.clone().clamp_(-1 + 1e-6, 1 - 1e-6)
        q_feat = F.grid_sample(feat, coord_.flip(-1).unsqueeze(1), mode='nearest', align_corners=False)[:, :, 0, :].permute(0, 2, 1)
        q_coord = F.grid_sample(feat_coord, coord_.flip(-1).unsqueeze(1), mode='nearest', align_corners=False)[:, :, 0, :].permute(0, 2, 1)
        rel_coord = coord - q_coord
        rel_coord[:, :, 0] *= feat.shape[-2]
        rel_coord[:, :, 1] *= feat.shape[-1]
        inp = torch.cat([q_feat, rel_coord], dim=-1)
        rel_cell = cell.clone()
        rel_cell[:, :, 0] *= feat.shape[-2]
        rel_cell[:, :, 1] *= feat.shape[-1]
        inp = torch.cat([inp, rel_cell], dim=-1)
        bs, q = coord.shape[:2]
        return self.imnet(inp.view(bs * q, -1), rel_coord.view(bs * q, -1)).view(bs, q, -1)

    def forward(self, inp, coord, cell):
        self.feat = self.encoder(inp)
        return self.query_rgb(coord, cell)


def speckle_images(n, g):
    """Synthetic speckle: band-limited random phase field, intensity normalised to [0, 1]."""
    k = torch.randn(n, 32, 32, generator=g) + 1j * torch.randn(n, 32, 32, generator=g)
    fy, fx = torch.meshgrid(torch.fft.fftfreq(32), torch.fft.fftfreq(32), indexing='ij')
    k = k * ((fy ** 2 + fx ** 2) < 0.12 ** 2)
    img = torch.fft.ifft2(k).abs() ** 2
    img = img / img.amax(dim=(1, 2), keepdim=True)
    return img.unsqueeze(1)


def sample_batch(hr, g, sample_q=256):
    lr = F.avg_pool2d(hr, 2)
    coord = make_coord((32, 32))
    idx = torch.stack([torch.randperm(1024, generator=g)[:sample_q] for _ in range(len(hr))])
    q_coord = coord[idx]
    gt = hr.view(len(hr), -1, 1).gather(1, idx.unsqueeze(-1))
    cell = torch.full_like(q_coord, 2 / 32)
    return (lr - 0.5) / 0.5, q_coord, cell, (gt - 0.5) / 0.5


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    train_hr, val_hr = speckle_images(256, g), speckle_images(32, g)
    model = SLIIF()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[200, 400, 600, 800], gamma=0.5)
    loss_fn = nn.L1Loss()
    print('model params in optimizer: %d' % sum(p.numel() for grp in optimizer.param_groups for p in grp['params']))
    for epoch in range(1, 9):
        model.train()
        perm = torch.randperm(256, generator=g)
        train_loss = []
        for i in range(0, 256, 16):
            inp, coord, cell, gt = sample_batch(train_hr[perm[i:i + 16]], g)
            pred = model(inp, coord, cell)
            loss = loss_fn(pred, gt)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            train_loss.append(loss.item())
        lr_scheduler.step()
        model.eval()
        with torch.no_grad():
            inp, coord, cell, gt = sample_batch(val_hr, torch.Generator().manual_seed(1), sample_q=1024)
            pred = model(inp, coord, cell)
            mse = ((pred - gt) / 2).pow(2).mean()
        print('epoch %d: train loss %.4f  val psnr %.2f' % (epoch, np.mean(train_loss), (-10 * torch.log10(mse)).item()))


if __name__ == '__main__':
    main()
