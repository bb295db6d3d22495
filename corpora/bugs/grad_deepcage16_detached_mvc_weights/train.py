# Source: yifita/deep_cage, common.py (deform_with_MVC), losses.py (MVC regulariser), commit 1bad6bdf435614f392d4bada8ddcdf1fc5da1256
# Report: https://github.com/yifita/deep_cage/issues/16
# Neural cage deformation: a network predicts a cage around the source shape; points are bound
# to the cage with mean value coordinates (MVC) and follow the deformed cage. A regulariser
# ("WREG", weight mvc_weight) penalises negative MVC weights. 2D shapes and a closed-form 2D
# MVC replace the 3D meshes; the cage predictor is a small MLP.
import math

import torch
import torch.nn as nn


def mean_value_coordinates_2D(query, cage):
    """query (B,Q,2), cage (B,C,2) counter-clockwise polygon -> weights (B,Q,C), unnormalised"""
    d = cage.unsqueeze(1) - query.unsqueeze(2)                     # (B,Q,C,2)
    r = d.norm(dim=-1).clamp(min=1e-8)                              # (B,Q,C)
    d_next = torch.roll(d, -1, dims=2)
    r_next = torch.roll(r, -1, dims=2)
    cross = d[..., 0] * d_next[..., 1] - d[..., 1] * d_next[..., 0]
    dot = (d * d_next).sum(-1)
    tan_half = cross / (r * r_next + dot).clamp(min=1e-8)          # tan(alpha_i / 2)
    w = (torch.roll(tan_half, 1, dims=2) + tan_half) / r
    return w / w.sum(-1, keepdim=True), w


def deform_with_MVC(cage, cage_deformed, query, verbose=False):
    weights, weights_unnormed = mean_value_coordinates_2D(query, cage)
    weights = weights.detach()
    deformed = torch.sum(weights.unsqueeze(-1) * cage_deformed.unsqueeze(1), dim=2)
    if verbose:
        return deformed, weights, weights_unnormed
    return deformed


def mvc_reg_loss(weights):
    return (torch.relu(-weights) ** 2).sum(-1).mean()


class CageNet(nn.Module):
    def __init__(self, n_cage=12, n_points=64):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n_points * 2, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU())
        self.cage_head = nn.Linear(128, n_cage * 2)
        self.deform_head = nn.Linear(256, n_cage * 2)
        angles = torch.arange(n_cage) * 2 * math.pi / n_cage
        self.register_buffer("template", 1.1 * torch.stack([angles.cos(), angles.sin()], -1))
        nn.init.zeros_(self.cage_head.weight); nn.init.zeros_(self.cage_head.bias)
        nn.init.zeros_(self.deform_head.weight); nn.init.zeros_(self.deform_head.bias)

    def forward(self, source, target):
        B = source.size(0)
        fs = self.encoder(source.flatten(1))
        ft = self.encoder(target.flatten(1))
        cage = self.template + 0.5 * torch.tanh(self.cage_head(fs)).view(B, -1, 2)
        new_cage = cage + self.deform_head(torch.cat([fs, ft], 1)).view(B, -1, 2)
        deformed, weights, _ = deform_with_MVC(cage, new_cage, source, verbose=True)
        return {"cage": cage, "new_cage": new_cage, "deformed": deformed, "weight": weights}


def make_shapes(n, gen, n_points=64):
    t = torch.arange(n_points) * 2 * math.pi / n_points
    base = torch.stack([t.cos(), 0.5 * t.sin()], -1)
    src_scale = 0.6 + 0.35 * torch.rand(n, 1, 2, generator=gen)
    tgt_scale = 0.6 + 0.35 * torch.rand(n, 1, 2, generator=gen)
    bump = 0.25 * (torch.rand(n, 1, 1, generator=gen) - 0.5) * (3 * t).cos()[None, :, None]
    return base * src_scale + bump, base * tgt_scale


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    source, target = make_shapes(256, gen)
    net = CageNet()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    mvc_weight = 10.0
    for epoch in range(8):
        for i in range(0, 256, 32):
            all_outputs = net(source[i:i + 32], target[i:i + 32])
            loss_cd = ((all_outputs["deformed"] - target[i:i + 32]) ** 2).sum(-1).mean()
            loss_wreg = mvc_reg_loss(all_outputs["weight"]) * mvc_weight
            loss = loss_cd + loss_wreg
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            out = net(source, target)
            neg = (out["weight"] < 0).float().mean().item()
        print("epoch %d loss_cd %.5f WREG %.5f negative MVC weights %.3f" % (epoch, loss_cd.item(), loss_wreg.item(), neg))


if __name__ == "__main__":
    main()
