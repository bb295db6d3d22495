# Source: zju3dv/LoFTR, src/loftr/utils/coarse_matching.py, commit 4feac496c1eacebc49ce53793039a8162930935e
# Report: https://github.com/zju3dv/LoFTR/issues/285
# LoFTR coarse matching (dual-softmax) trained with 16-bit mixed precision. The ResNet-FPN
# backbone and the LoFTR transformer are replaced by a small conv encoder; image pairs are
# synthetic (the second view is a shifted copy), padded like MegaDepth/ScanNet pairs.
import torch
import torch.nn as nn
import torch.nn.functional as F

INF = 1e9


class CoarseMatching(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.thr = config['thr']
        self.match_type = config['match_type']
        if self.match_type == 'dual_softmax':
            self.temperature = config['dsmax_temperature']
        else:
            raise NotImplementedError()

    def forward(self, feat_c0, feat_c1, data, mask_c0=None, mask_c1=None):
        N, L, S, C = feat_c0.size(0), feat_c0.size(1), feat_c1.size(1), feat_c0.size(2)

        # normalize
        feat_c0, feat_c1 = map(lambda feat: feat / feat.shape[-1]**.5,
                               [feat_c0, feat_c1])

        if self.match_type == 'dual_softmax':
            sim_matrix = torch.einsum("nlc,nsc->nls", feat_c0,
                                      feat_c1) / self.temperature
            if mask_c0 is not None:
                sim_matrix.masked_fill_(
                    ~(mask_c0[..., None] * mask_c1[:, None]).bool(),
                    -INF)
            conf_matrix = F.softmax(sim_matrix, 1) * F.softmax(sim_matrix, 2)

        data.update({'conf_matrix': conf_matrix})


class Backbone(nn.Module):
    def __init__(self, d_model=64):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(1, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, d_model, 3, stride=2, padding=1))

    def forward(self, x):
        feat = self.layers(x)
        return feat.flatten(2).transpose(1, 2)


def make_batch(gen, n=4, size=64, shift=1):
    img0 = torch.rand(n, 1, size, size, generator=gen)
    img1 = torch.roll(img0, shifts=8 * shift, dims=3)
    mask = torch.ones(n, size // 8, size // 8)
    mask[n // 2:, :, -2:] = 0      # right-padded pairs
    hw = size // 8
    i_ids = torch.arange(hw * hw)
    j_ids = (i_ids // hw) * hw + (i_ids % hw + shift) % hw
    return img0, img1, mask.flatten(1), i_ids, j_ids


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    config = {'thr': 0.2, 'match_type': 'dual_softmax', 'dsmax_temperature': 0.1}
    backbone = Backbone()
    coarse_matching = CoarseMatching(config)
    optimizer = torch.optim.AdamW(backbone.parameters(), lr=1e-3)
    for step in range(30):
        img0, img1, mask, i_ids, j_ids = make_batch(gen)
        data = {}
        with torch.autocast('cpu', dtype=torch.float16):
            feat_c0 = backbone(img0)
            feat_c1 = backbone(img1)
            coarse_matching(feat_c0, feat_c1, data, mask_c0=mask, mask_c1=mask)
        conf = data['conf_matrix'].float()
        valid = mask[:, i_ids].bool() & mask[:, j_ids].bool()
        pos_conf = conf[:, i_ids, j_ids][valid]
        loss = -torch.log(pos_conf.clamp(min=1e-6)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 5 == 0 or step == 29:
            print("step %d loss_c %.4f mean_pos_conf %.4f" % (step, loss.item(), pos_conf.mean().item()))


if __name__ == "__main__":
    main()
