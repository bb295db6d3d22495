# Source: mlzxy/devit, detectron2/modeling/meta_arch/devit.py, commit 3448fd6663b849ced1b7c132d150c2fa2f39a4ee
# Report: https://github.com/mlzxy/devit/issues/51
# DE-ViT mask head (mask_forward: per-RoI distance embeddings -> mask propagation layers -> mask
# predictor) trained with sigmoid CE + dice losses normalised by num_masks = number of foreground
# RoIs. Synthetic data: 7x7 RoI feature maps with a blob mask; some images carry no annotation, so
# the proposal sampler yields no foreground RoI for them. The loop follows detectron2's
# SimpleTrainer (sum of the loss dict, finite check on the total before logging).
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def dice_loss(
        inputs: torch.Tensor,
        targets: torch.Tensor,
        num_masks: float,
    ):
    inputs = inputs.sigmoid()
    inputs = inputs.flatten(1)
    numerator = 2 * (inputs * targets).sum(-1)
    denominator = inputs.sum(-1) + targets.sum(-1)
    loss = 1 - (numerator + 1) / (denominator + 1)
    return loss.sum() / num_masks


def sigmoid_ce_loss(
        inputs: torch.Tensor,
        targets: torch.Tensor,
        num_masks: float,
    ):
    loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")

    return loss.mean(1).sum() / num_masks


class MaskHead(nn.Module):
    def __init__(self, feat_dim=16, temb=8, size=7, num_layers=2):
        super().__init__()
        self.mask_roialign_size = size
        self.Temb = temb
        self.mask_intra_dist_emb = nn.Linear(feat_dim, temb)
        self.mask_bg_dist_emb = nn.Linear(feat_dim, temb)
        self.fc_init_mask = nn.Conv2d(1, 1, 1)
        self.mp_layers = nn.ModuleList()
        self.mp_out_layers = nn.ModuleList()
        in_dim = temb * 2
        for i in range(num_layers):
            self.mp_layers.append(nn.Sequential(nn.Conv2d(in_dim + i + 1, temb * 2, 3, padding=1), nn.ReLU()))
            self.mp_out_layers.append(nn.Conv2d(temb * 2, 1, 1))
            in_dim = temb * 2
        self.mask_deconv = nn.Sequential(nn.ConvTranspose2d(temb * 2 + num_layers + 1, temb, 2, stride=2), nn.ReLU())
        self.mask_predictor = nn.Conv2d(temb, 1, 1)

    def forward(self, roi_feats, gt_masks_middle, gt_masks_final):
        N = num_masks = len(roi_feats)
        K = self.mask_roialign_size
        roi_feats = roi_feats.flatten(2).transpose(-2, -1)  # N x K2 x C
        fg_roi_emb = self.mask_intra_dist_emb(roi_feats)
        bg_roi_emb = self.mask_bg_dist_emb(roi_feats)
        fg_roi_feats = roi_feats.mean(-1)
        bg_roi_emb = bg_roi_emb.permute(0, 2, 1).reshape(N, self.Temb, K, K)
        fg_roi_emb = fg_roi_emb.permute(0, 2, 1).reshape(N, self.Temb, K, K)
        embedding = torch.cat([fg_roi_emb, bg_roi_emb], dim=1)
        masks = []
        loss_dict = {}

        init_mask = self.fc_init_mask(fg_roi_feats.reshape(N, 1, K, K))
        loss_dict["mask_bce_loss_0"] = sigmoid_ce_loss(init_mask.flatten(1),
                                                       gt_masks_middle.flatten(1), num_masks)
        loss_dict["mask_dice_loss_0"] = dice_loss(init_mask.flatten(1),
                                                  gt_masks_middle.flatten(1), num_masks)
        masks.append(init_mask.sigmoid())

        mask_temperature = 0.1
        for i, (mp, mp_out) in enumerate(zip(self.mp_layers, self.mp_out_layers)):
            if len(masks) > 0:
                all_mask_tensor = torch.cat(masks, dim=1)
                embedding = torch.cat([embedding, all_mask_tensor], dim=1)
            embedding = mp(embedding)
            pred_mask_logits = mp_out(embedding) / mask_temperature
            masks.insert(0, pred_mask_logits.sigmoid())
            loss_dict[f"mask_bce_loss_{len(masks) - 1}"] = sigmoid_ce_loss(pred_mask_logits.flatten(1),
                                                                           gt_masks_middle.flatten(1), num_masks)
            loss_dict[f"mask_dice_loss_{len(masks) - 1}"] = dice_loss(pred_mask_logits.flatten(1),
                                                                      gt_masks_middle.flatten(1), num_masks)

        all_mask_tensor = torch.cat(masks, dim=1)
        embedding = torch.cat([embedding, all_mask_tensor], dim=1)
        embedding = self.mask_deconv(embedding)
        mask_logits = self.mask_predictor(embedding) / mask_temperature
        loss_dict["mask_bce_loss_out"] = sigmoid_ce_loss(mask_logits.flatten(1),
                                                         gt_masks_final.flatten(1), num_masks)
        loss_dict["mask_dice_loss_out"] = dice_loss(mask_logits.flatten(1),
                                                    gt_masks_final.flatten(1), num_masks)
        return loss_dict


def make_image(rng, feat_dim=16, size=7, annotated=True):
    # foreground RoIs sampled for one image: features carry the blob, masks are the blob
    n = int(rng.integers(2, 6)) if annotated else 0
    yy, xx = np.mgrid[0:size * 2, 0:size * 2] / 2.0
    feats, middle, final = [], [], []
    direction = np.linspace(-1, 1, feat_dim).astype(np.float32)
    for _ in range(n):
        cy, cx, r = rng.uniform(2, 5), rng.uniform(2, 5), rng.uniform(1.2, 2.5)
        blob = ((yy - cy) ** 2 + (xx - cx) ** 2 < r ** 2).astype(np.float32)
        small = blob[::2, ::2]
        f = small[None] * direction[:, None, None] + 0.3 * rng.normal(size=(feat_dim, size, size))
        feats.append(f.astype(np.float32))
        middle.append(small)
        final.append(blob)
    if n == 0:
        return (torch.zeros(0, feat_dim, size, size), torch.zeros(0, size, size),
                torch.zeros(0, size * 2, size * 2))
    return (torch.from_numpy(np.stack(feats)), torch.from_numpy(np.stack(middle)),
            torch.from_numpy(np.stack(final)))


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    data = [make_image(rng, annotated=(i % 23 != 17)) for i in range(200)]
    model = MaskHead()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    it = 0
    window = []
    for epoch in range(3):
        for feats, middle, final in data:
            loss_dict = model(feats, middle, final)
            losses = sum(loss_dict.values())
            optimizer.zero_grad()
            losses.backward()
            optimizer.step()
            total_losses_reduced = sum(v.item() for v in loss_dict.values())
            if not np.isfinite(total_losses_reduced):
                raise FloatingPointError(
                    f"Loss became infinite or NaN at iteration={it}!\n"
                    f"loss_dict = {({k: v.item() for k, v in loss_dict.items()})}"
                )
            window.append(loss_dict["mask_dice_loss_out"].item())
            it += 1
            if it % 100 == 0:
                print(f"iter {it} total_loss {total_losses_reduced:.4f} mean dice_out (last 100) {np.mean(window):.4f}")
                window = []


if __name__ == "__main__":
    main()
