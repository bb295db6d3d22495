# Source: ifzhang/FairMOT, src/train.py, src/lib/trains/base_trainer.py, src/lib/trains/mot.py, src/lib/models/losses.py (code before commit 2a353b16a591bf997aadd5d24b73e599672906c4)
# Report: https://github.com/ifzhang/FairMOT/issues/223
# FairMOT joint detection + re-ID training: a CenterNet-style backbone with hm / wh / reg / id
# heads, MotLoss holding the identity classifier and the uncertainty weights s_det / s_id,
# ModleWithLoss wrapping model and loss, and BaseTrainer.run_epoch. The DLA-34 backbone is
# reduced to three conv layers, the MOT datasets to synthetic 32x32 frames with up to 4 people
# whose identity sets their colour pattern; 6 epochs of 12 batches on one CPU thread.
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def _sigmoid(x):
    return torch.clamp(x.sigmoid_(), min=1e-4, max=1 - 1e-4)


def _gather_feat(feat, ind):
    dim = feat.size(2)
    ind = ind.unsqueeze(2).expand(ind.size(0), ind.size(1), dim)
    return feat.gather(1, ind)


def _tranpose_and_gather_feat(feat, ind):
    feat = feat.permute(0, 2, 3, 1).contiguous()
    feat = feat.view(feat.size(0), -1, feat.size(3))
    return _gather_feat(feat, ind)


def _neg_loss(pred, gt):
    pos_inds = gt.eq(1).float()
    neg_inds = gt.lt(1).float()
    neg_weights = torch.pow(1 - gt, 4)
    pos_loss = torch.log(pred) * torch.pow(1 - pred, 2) * pos_inds
    neg_loss = torch.log(1 - pred) * torch.pow(pred, 2) * neg_weights * neg_inds
    num_pos = pos_inds.float().sum()
    pos_loss = pos_loss.sum()
    neg_loss = neg_loss.sum()
    if num_pos == 0:
        return -neg_loss
    return -(pos_loss + neg_loss) / num_pos


class FocalLoss(nn.Module):
    def forward(self, out, target):
        return _neg_loss(out, target)


class RegL1Loss(nn.Module):
    def forward(self, output, mask, ind, target):
        pred = _tranpose_and_gather_feat(output, ind)
        mask = mask.unsqueeze(2).expand_as(pred).float()
        loss = F.l1_loss(pred * mask, target * mask, reduction='sum')
        return loss / (mask.sum() + 1e-4)


class MotLoss(torch.nn.Module):
    def __init__(self, opt):
        super(MotLoss, self).__init__()
        self.crit = FocalLoss()
        self.crit_reg = RegL1Loss()
        self.opt = opt
        self.emb_dim = opt["reid_dim"]
        self.nID = opt["nID"]
        self.classifier = nn.Linear(self.emb_dim, self.nID)
        self.IDLoss = nn.CrossEntropyLoss(ignore_index=-1)
        self.emb_scale = math.sqrt(2) * math.log(self.nID - 1)
        self.s_det = nn.Parameter(-1.85 * torch.ones(1))
        self.s_id = nn.Parameter(-1.05 * torch.ones(1))

    def forward(self, output, batch):
        opt = self.opt
        output['hm'] = _sigmoid(output['hm'])
        hm_loss = self.crit(output['hm'], batch['hm'])
        wh_loss = self.crit_reg(output['wh'], batch['reg_mask'], batch['ind'], batch['wh'])
        off_loss = self.crit_reg(output['reg'], batch['reg_mask'], batch['ind'], batch['reg'])

        id_head = _tranpose_and_gather_feat(output['id'], batch['ind'])
        id_head = id_head[batch['reg_mask'] > 0].contiguous()
        id_head = self.emb_scale * F.normalize(id_head)
        id_target = batch['ids'][batch['reg_mask'] > 0]
        id_output = self.classifier(id_head).contiguous()
        id_loss = self.IDLoss(id_output, id_target)
        id_acc = (id_output.argmax(1) == id_target).float().mean()

        det_loss = opt["hm_weight"] * hm_loss + opt["wh_weight"] * wh_loss + opt["off_weight"] * off_loss
        loss = torch.exp(-self.s_det) * det_loss + torch.exp(-self.s_id) * id_loss + (self.s_det + self.s_id)
        loss *= 0.5
        loss_stats = {'loss': loss, 'hm_loss': hm_loss, 'wh_loss': wh_loss, 'off_loss': off_loss,
                      'id_loss': id_loss, 'id_acc': id_acc}
        return loss, loss_stats


class PoseNet(nn.Module):
    """Small stand-in for DLASeg: stride-4 features and one 2-layer head per output."""
    def __init__(self, heads, head_conv=32):
        super().__init__()
        self.base = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True))
        self.heads = heads
        for head, classes in heads.items():
            fc = nn.Sequential(nn.Conv2d(32, head_conv, 3, padding=1), nn.ReLU(inplace=True),
                               nn.Conv2d(head_conv, classes, 1))
            if 'hm' in head:
                fc[-1].bias.data.fill_(-2.19)
            self.__setattr__(head, fc)

    def forward(self, x):
        x = self.base(x)
        return [{head: self.__getattr__(head)(x) for head in self.heads}]


class ModleWithLoss(torch.nn.Module):
    def __init__(self, model, loss):
        super(ModleWithLoss, self).__init__()
        self.model = model
        self.loss = loss

    def forward(self, batch):
        outputs = self.model(batch['input'])
        loss, loss_stats = self.loss(outputs[-1], batch)
        return outputs[-1], loss, loss_stats


class AverageMeter(object):
    def __init__(self):
        self.sum, self.count, self.avg = 0.0, 0, 0.0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class BaseTrainer(object):
    def __init__(self, opt, model, optimizer=None):
        self.opt = opt
        self.optimizer = optimizer
        self.loss_stats = ['loss', 'hm_loss', 'wh_loss', 'off_loss', 'id_loss', 'id_acc']
        self.loss = MotLoss(opt)
        self.model_with_loss = ModleWithLoss(model, self.loss)

    def run_epoch(self, phase, epoch, data_loader):
        model_with_loss = self.model_with_loss
        model_with_loss.train()
        avg_loss_stats = {l: AverageMeter() for l in self.loss_stats}
        for iter_id, batch in enumerate(data_loader):
            output, loss, loss_stats = model_with_loss(batch)
            loss = loss.mean()
            if phase == 'train':
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            for l in avg_loss_stats:
                avg_loss_stats[l].update(loss_stats[l].mean().item(), batch['input'].size(0))
        return {k: v.avg for k, v in avg_loss_stats.items()}

    def train(self, epoch, data_loader):
        return self.run_epoch('train', epoch, data_loader)


def make_frames(n, opt, rng):
    """Frames with up to 4 people; each identity has its own 3-colour pattern."""
    out_hw, K = 8, opt["K"]
    palette = rng.uniform(-1, 1, size=(opt["nID"], 3, 2, 2)).astype(np.float32)
    frames = []
    for _ in range(n):
        img = rng.normal(0, 0.2, size=(3, 32, 32)).astype(np.float32)
        hm = np.zeros((1, out_hw, out_hw), np.float32)
        wh = np.zeros((K, 2), np.float32)
        reg = np.zeros((K, 2), np.float32)
        ind = np.zeros(K, np.int64)
        mask = np.zeros(K, np.uint8)
        ids = -np.ones(K, np.int64)
        cells = rng.choice(out_hw * out_hw, size=rng.randint(1, K + 1), replace=False)
        for k, c in enumerate(cells):
            cy, cx = divmod(int(c), out_hw)
            pid = rng.randint(opt["nID"])
            y0, x0 = cy * 4, cx * 4
            img[:, y0:y0 + 4, x0:x0 + 4] = np.kron(palette[pid], np.ones((2, 2), np.float32))
            hm[0, cy, cx] = 1.0
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    if 0 <= cy + dy < out_hw and 0 <= cx + dx < out_hw and (dy or dx):
                        hm[0, cy + dy, cx + dx] = max(hm[0, cy + dy, cx + dx], 0.6)
            wh[k] = (4.0, 4.0)
            reg[k] = (0.5, 0.5)
            ind[k] = c
            mask[k] = 1
            ids[k] = pid
        frames.append(dict(input=img, hm=hm, wh=wh, reg=reg, ind=ind, reg_mask=mask, ids=ids))
    return frames


def collate(frames):
    return {k: torch.from_numpy(np.stack([f[k] for f in frames])) for k in frames[0]}


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    opt = {"reid_dim": 32, "nID": 24, "K": 4, "hm_weight": 1.0, "wh_weight": 0.1, "off_weight": 1.0,
           "lr": 2e-3, "num_epochs": 6, "batch_size": 16}
    heads = {'hm': 1, 'wh': 2, 'id': opt["reid_dim"], 'reg': 2}
    frames = make_frames(192, opt, rng)

    print('Creating model...')
    model = PoseNet(heads)
    optimizer = torch.optim.Adam(model.parameters(), opt["lr"])
    trainer = BaseTrainer(opt, model, optimizer)
    w0 = trainer.loss.classifier.weight.detach().clone()

    for epoch in range(1, opt["num_epochs"] + 1):
        t0 = time.time()
        order = rng.permutation(len(frames))
        loader = [collate([frames[i] for i in order[s:s + opt["batch_size"]]])
                  for s in range(0, len(frames), opt["batch_size"])]
        log = trainer.train(epoch, loader)
        moved = (trainer.loss.classifier.weight.detach() - w0).abs().max().item()
        print('epoch: {} |'.format(epoch) + ' | '.join('{} {:.4f}'.format(k, v) for k, v in log.items())
              + ' | classifier max|dW| {:.2e} | s_det {:.3f} s_id {:.3f} ({:.1f}s)'.format(
                  moved, trainer.loss.s_det.item(), trainer.loss.s_id.item(), time.time() - t0))


if __name__ == '__main__':
    main()
