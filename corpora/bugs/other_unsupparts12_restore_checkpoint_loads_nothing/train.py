# Source: subhc/unsup-parts, models/model_factory.py (model_generator), trainer_ours.py (Trainer.__init__, step, save_model, adjust_learning_rate), loss.py (contrastive_loss, consistency_loss), train.py (main loop), commit 3e30b372136517ef010e974503389a3ae6833bb2
# Report: https://github.com/subhc/unsup-parts/pull/12
# Unsupervised part segmentation (unsup-parts, a SCOPS successor): a DeepLab-style network
# predicts K part maps inside the foreground mask; losses are semantic consistency with frozen
# "zoo" features, colour consistency, a part-basis contrastive loss and an equivariance KL
# under a random warp. SGD with momentum, poly lr, gradient clipping; Trainer.save_model writes
# {'iter', 'model_state_dict', 'optimizer_state_dict'}. A second run continues from that
# snapshot with restore_from. The ResNet-50 DeepLab is reduced to a small conv net, the VGG
# feature extractor to a frozen random conv stack, RandTPS to a random affine warp, and the
# CUB images to synthetic 32x32 "birds" (an ellipse with head / body / tail colours); wandb,
# hydra and the visualizer are removed.
import os
import tempfile
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


def contrastive_loss(feats, t=0.07):
    feats = F.normalize(feats, dim=2)
    scores = torch.einsum('aid, bjd -> abij', feats, feats)
    A, B, I, J = scores.shape
    scores = scores.permute(0, 2, 1, 3).reshape(A * I, B * J)
    pos_idx = torch.eye(feats.size(1), dtype=torch.int).repeat(feats.size(0), feats.size(0))
    pos_idx.fill_diagonal_(0)
    l_pos = torch.gather(scores, 1, pos_idx.nonzero()[:, 1].view(scores.size(0), -1))
    rand_idx = torch.randint(1, l_pos.size(1), (l_pos.size(0), 1))
    l_pos = torch.gather(l_pos, 1, rand_idx)
    neg_idx = (1 - torch.eye(feats.size(1), dtype=torch.int)).repeat(feats.size(0), feats.size(0))
    l_neg = torch.gather(scores, 1, neg_idx.nonzero()[:, 1].view(scores.size(0), -1))
    logits = torch.cat([l_pos, l_neg], dim=1) / t
    labels = torch.zeros(logits.shape[0], dtype=torch.long)
    return F.cross_entropy(logits, labels)


def consistency_loss(masks, image, fg):
    weighted_regions = masks.unsqueeze(2) * image.unsqueeze(1)
    mask_sum = masks.sum(3).sum(2, keepdim=True)
    means = weighted_regions.sum(4).sum(3) / (mask_sum + 1e-5)
    diff_sq = (image.unsqueeze(1) - means.unsqueeze(3).unsqueeze(4)) ** 2
    loss = (diff_sq * masks.unsqueeze(2) * fg.unsqueeze(2)).sum(4).sum(3)
    loss /= (fg.unsqueeze(2).sum(4).sum(3) + 1e-5)
    return loss.sum(2).sum(1).mean()


class Res50_Deeplab(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.layer3 = nn.Sequential(nn.Conv2d(32, 32, 3, padding=2, dilation=2), nn.BatchNorm2d(32), nn.ReLU())
        self.layer5 = nn.Conv2d(32, num_classes, 3, padding=1)

    def forward(self, x):
        x1 = self.layer1(x)
        x3 = self.layer3(self.layer2(x1))
        return x1, x3, self.layer5(x3), None

    def optim_parameters(self, args):
        return [{'params': [p for n, p in self.named_parameters() if not n.startswith('layer5')],
                 'lr': args.learning_rate},
                {'params': self.layer5.parameters(), 'lr': 10 * args.learning_rate}]


def model_generator(args, add_bg_mask=True):
    add_bg_mask = int(add_bg_mask)
    restore_from = args.restore_from
    if args.model == 'DeepLab50':
        model = Res50_Deeplab(num_classes=args.num_parts + add_bg_mask)
    else:
        print('Model "{}" not exist!'.format(args.model))

    if restore_from != 'None':
        print('load model from {}'.format(os.path.basename(restore_from)))
        saved_state_dict = torch.load(restore_from)

        saved_state_dict = dict([(k.replace('module.', ''), v) for k, v in saved_state_dict.items()])
        new_params = model.state_dict().copy()
        for name, param in new_params.items():
            if name in saved_state_dict and param.size() == saved_state_dict[name].size():
                new_params[name].copy_(saved_state_dict[name])
        model.load_state_dict(new_params)

    return model


def lr_poly(base_lr, iter, max_iter, power):
    return base_lr * ((1 - float(iter) / max_iter) ** (power))


def adjust_learning_rate(optimizer, i_iter, args):
    lr = lr_poly(args.learning_rate, i_iter, 1000, args.power)
    optimizer.param_groups[0]['lr'] = lr
    if len(optimizer.param_groups) > 1:
        optimizer.param_groups[1]['lr'] = lr * 10


class RandAffine(nn.Module):
    def __init__(self, sigma):
        super().__init__()
        self.sigma = sigma
        self.reset_control_points(1)

    def reset_control_points(self, batch_size):
        ang = torch.randn(batch_size) * self.sigma
        scale = 1 + torch.randn(batch_size) * self.sigma / 2
        shift = torch.randn(batch_size, 2) * self.sigma / 2
        self.theta = torch.stack([torch.stack([scale * torch.cos(ang), -scale * torch.sin(ang), shift[:, 0]], 1),
                                  torch.stack([scale * torch.sin(ang), scale * torch.cos(ang), shift[:, 1]], 1)], 1)

    def forward(self, x, padding_mode='border'):
        grid = F.affine_grid(self.theta, x.shape, align_corners=False)
        return F.grid_sample(x, grid, padding_mode=padding_mode, align_corners=False)


class Trainer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        torch.manual_seed(args.random_seed)
        np.random.seed(args.random_seed)

        model = model_generator(args, add_bg_mask=False)
        model.train()
        self.model = model

        self.tps = RandAffine(args.tps_sigma)
        self.kl = nn.KLDivLoss(reduction='none')
        self.interp = nn.Upsample(size=(args.input_size, args.input_size), mode='bilinear', align_corners=True)

        g = torch.Generator().manual_seed(1234)
        self.zoo_feat_net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1))
        for p in self.zoo_feat_net.parameters():
            p.data.copy_(torch.randn(p.shape, generator=g) * 0.3)
            p.requires_grad_(False)
        self.zoo_feat_net.eval()

        self.optimizer_seg = optim.SGD(self.model.optim_parameters(args),
                                       lr=args.learning_rate, momentum=args.momentum, weight_decay=args.weight_decay)
        self.optimizer_seg.zero_grad()

    def get_zoo_feat(self, images_zoo):
        with torch.no_grad():
            return F.normalize(self.zoo_feat_net(images_zoo), dim=1)

    def step(self, batch, current_step):
        self.model.train()
        self.optimizer_seg.zero_grad()
        adjust_learning_rate(self.optimizer_seg, current_step, self.args)

        images, mask = batch['img_cj1'], batch['mask']
        _, _, pred_low, _ = self.model(images)
        pred = self.interp(pred_low)

        zoo_feat = self.get_zoo_feat(images) * mask
        pred_softmax = torch.softmax(pred, dim=1)
        basis = torch.einsum('brhw, bchw -> brc', pred_softmax * mask, zoo_feat)
        basis /= (pred_softmax * mask).sum((2, 3)).unsqueeze(-1) + 1e-7
        loss_sc = 0
        for pred_sm_, zoo_feat_, mask_ in zip(pred_softmax * mask, zoo_feat, mask):
            loss_sc += consistency_loss(pred_sm_.unsqueeze(0), zoo_feat_.unsqueeze(0), mask_.unsqueeze(0))
        loss_rgb = consistency_loss(pred_softmax * mask, batch['img_rec'], mask)
        loss_contrastive = contrastive_loss(basis, self.args.temperature)

        images_cj = batch['img_cj2']
        self.tps.reset_control_points(images_cj.shape[0])
        images_tps = self.tps(images_cj)
        mask_tps = self.tps(mask.float(), padding_mode='zeros')
        _, _, pred_low_tps, _ = self.model(images_tps)
        pred_tps = self.interp(pred_low_tps)
        pred_d = pred.detach()
        pred_tps_org = self.tps(pred_d, padding_mode='zeros')
        loss_eqv = self.kl(F.log_softmax(pred_tps, dim=1), F.softmax(pred_tps_org, dim=1))
        loss_eqv = (loss_eqv * mask_tps).flatten(1).sum(1) / (mask_tps.flatten(1).sum(1) + 1e-7)
        loss_eqv = loss_eqv.mean()

        total_loss = self.args.lambda_eqv * loss_eqv \
            + self.args.lambda_sc * loss_sc \
            + self.args.lambda_rgb * loss_rgb \
            + self.args.lambda_contrastive * loss_contrastive
        total_loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.args.clip_gradients)
        self.optimizer_seg.step()
        return total_loss.item(), loss_sc.item(), loss_rgb.item()

    def save_model(self, path, iter):
        torch.save({
            'iter': iter,
            'model_state_dict': self.model.state_dict(),
            'optimizer_state_dict': self.optimizer_seg.state_dict(),
        }, path)


def make_birds(n, rng, size=32):
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    imgs = np.zeros((n, 3, size, size), np.float32)
    masks = np.zeros((n, 1, size, size), np.float32)
    colours = np.array([[0.9, 0.2, 0.1], [0.2, 0.5, 0.9], [0.3, 0.9, 0.3]], np.float32)
    for k in range(n):
        cy, cx = rng.uniform(12, 20, size=2)
        ry, rx = rng.uniform(6, 9), rng.uniform(9, 13)
        fg = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
        part = np.where(xx < cx - rx / 3, 0, np.where(xx < cx + rx / 3, 1, 2))
        img = rng.uniform(0.3, 0.7, size=(3, 1, 1)).astype(np.float32) * np.ones((3, size, size), np.float32)
        for c in range(3):
            img[c][fg] = colours[part[fg], c]
        imgs[k] = img + rng.normal(0, 0.05, size=img.shape)
        masks[k, 0] = fg
    return torch.from_numpy(imgs), torch.from_numpy(masks)


def batches(data, args, rng):
    imgs, masks = data
    while True:
        order = rng.permutation(len(imgs))
        for s in range(0, len(order) - args.batch_size + 1, args.batch_size):
            idx = torch.from_numpy(order[s:s + args.batch_size])
            img = imgs[idx]
            jitter = 1 + 0.1 * torch.randn(len(idx), 3, 1, 1)
            yield {'img_cj1': img * jitter, 'img_cj2': img * jitter.flip(0), 'img_rec': img, 'mask': masks[idx]}


def main(args, data):
    rng = np.random.RandomState(args.random_seed)
    trainer = Trainer(args)
    loader = batches(data, args, rng)
    for i_iter in range(args.start_step, args.num_steps):
        batch = next(loader)
        total, sc, rgb = trainer.step(batch, i_iter)
        if i_iter % args.log_every == 0 or i_iter == args.num_steps - 1:
            print('iter = {:4d}/{:4d}, total_loss = {:.4f}, loss_sc = {:.4f}, loss_rgb = {:.4f}'.format(
                i_iter, args.num_steps, total, sc, rgb))
        if (i_iter + 1) % args.save_pred_every == 0:
            trainer.save_model(os.path.join(args.snapshot_dir, 'model_{}.pth'.format(i_iter + 1)), i_iter + 1)
    return trainer


if __name__ == '__main__':
    torch.set_num_threads(1)
    data = make_birds(64, np.random.RandomState(0))
    with tempfile.TemporaryDirectory() as tmp:
        args = SimpleNamespace(model='DeepLab50', num_parts=3, restore_from='None', input_size=32, batch_size=8,
                               learning_rate=2e-3, momentum=0.9, weight_decay=5e-4, power=0.9, num_steps=60,
                               start_step=0, tps_sigma=0.1, temperature=0.07, lambda_eqv=1.0, lambda_sc=1.0,
                               lambda_rgb=1.0, lambda_contrastive=0.1, clip_gradients=5.0, random_seed=0,
                               log_every=10, save_pred_every=60, snapshot_dir=tmp)
        print('-- run 1: iterations 0-59, snapshot model_60.pth')
        main(args, data)
        print('-- run 2: restore_from model_60.pth, iterations 60-119')
        args.restore_from = os.path.join(tmp, 'model_60.pth')
        args.start_step, args.num_steps, args.random_seed = 60, 120, 1
        main(args, data)
