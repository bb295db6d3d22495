# Source: Ugness/PiCANet-Implementation, train.py, network.py (Unet: encoder / decoder), commit 06ec9fa5ae7daed431dd0dbf45f465dd313425fc
# Report: https://github.com/Ugness/PiCANet-Implementation/issues/28
# PiCANet saliency training loop: a U-Net with a VGG-style encoder and a decoder that predicts
# saliency masks at several scales, two SGD optimizers (decoder at 10x the encoder lr),
# gradient clipping, and a step decay of the learning rate every decay_step iterations, done by
# re-creating both optimizers. DUTS is replaced by synthetic images with one bright blob as the
# salient object, the VGG16 / PiCANet modules by small conv blocks, tensorboard and checkpoint
# files by prints.
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class PairDataset(Dataset):
    def __init__(self, n=80, size=32, seed=0):
        rng = np.random.RandomState(seed)
        yy, xx = np.mgrid[0:size, 0:size]
        self.images, self.masks = [], []
        for _ in range(n):
            cy, cx = rng.uniform(8, 24, size=2)
            r = rng.uniform(4, 8)
            mask = (((yy - cy) ** 2 + (xx - cx) ** 2) <= r * r).astype(np.float32)
            img = rng.uniform(0, 0.6, size=(3, size, size)).astype(np.float32)
            img += 0.5 * mask[None] * rng.uniform(0.5, 1.0, size=(3, 1, 1)).astype(np.float32)
            self.images.append(torch.from_numpy(img))
            self.masks.append(torch.from_numpy(mask[None]))

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        return {'image': self.images[idx], 'mask': self.masks[idx]}


class Encoder(nn.Module):
    def __init__(self):
        super(Encoder, self).__init__()
        self.seq = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True),
        )

    def forward(self, x):
        feats = []
        for layer in self.seq:
            x = layer(x)
            if isinstance(layer, nn.ReLU):
                feats.append(x)
        return feats


class DecoderCell(nn.Module):
    def __init__(self, in_ch, skip_ch, out_ch):
        super(DecoderCell, self).__init__()
        self.conv = nn.Conv2d(in_ch + skip_ch, out_ch, 3, padding=1)
        self.out = nn.Conv2d(out_ch, 1, 1)

    def forward(self, dec, enc):
        dec = F.interpolate(dec, size=enc.shape[2:], mode='bilinear', align_corners=False)
        fmap = F.relu(self.conv(torch.cat([dec, enc], dim=1)))
        return fmap, torch.sigmoid(self.out(fmap))


class Unet(nn.Module):
    def __init__(self, cfg):
        super(Unet, self).__init__()
        self.encoder = Encoder()
        self.decoder = nn.ModuleList([DecoderCell(32, 32, 32), DecoderCell(32, 16, 16)])
        self.loss_ratio = cfg['loss_ratio']

    def forward(self, img, mask=None):
        en_out = self.encoder(img)
        dec = en_out[-1]
        pred = []
        for cell, skip in zip(self.decoder, [en_out[1], en_out[0]]):
            dec, p = cell(dec, skip)
            pred.append(p)
        loss = 0
        if mask is not None:
            for p, ratio in zip(pred, self.loss_ratio):
                m = F.interpolate(mask, size=p.shape[2:], mode='nearest')
                loss = loss + ratio * F.binary_cross_entropy(p, m)
        return pred, loss


cfg = {'loss_ratio': [0.8, 1]}

if __name__ == '__main__':
    torch.manual_seed(1234)
    torch.set_num_threads(1)

    parser = argparse.ArgumentParser()
    parser.add_argument('--batch_size', default=4, type=int)
    parser.add_argument('--epoch', default=6, type=int)
    parser.add_argument('-lr', '--learning_rate', default=0.001, type=float)
    parser.add_argument('--lr_decay', default=0.1, type=float)
    parser.add_argument('--decay_step', default=45, type=int)
    args = parser.parse_args()

    device = torch.device('cpu')
    batch_size = args.batch_size
    epoch = args.epoch
    duts_dataset = PairDataset()
    start_iter = 0
    model = Unet(cfg)
    start_epo = 0

    # Optimizer Setup
    learning_rate = args.learning_rate
    lr_decay = args.lr_decay
    decay_step = args.decay_step
    learning_rate = learning_rate * (lr_decay ** (start_iter // decay_step))
    opt_en = torch.optim.SGD(model.encoder.parameters(), lr=learning_rate, momentum=0.9, weight_decay=0.0005)
    opt_dec = torch.optim.SGD(model.decoder.parameters(), lr=learning_rate * 10, momentum=0.9, weight_decay=0.0005)
    # Dataloader Setup
    dataloader = DataLoader(duts_dataset, batch_size, shuffle=True, num_workers=0)
    iterate = start_iter
    for epo in range(start_epo, epoch):
        losses = []
        lrs = []
        for i, batch in enumerate(dataloader):
            opt_dec.zero_grad()
            opt_en.zero_grad()
            img = batch['image'].to(device)
            mask = batch['mask'].to(device)
            pred, loss = model(img, mask)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 100)
            opt_dec.step()
            opt_en.step()
            losses.append(loss.item())
            lrs.append(opt_en.param_groups[0]['lr'])

            if i + epo * len(dataloader) % decay_step == 0 and i != 0:
                learning_rate *= lr_decay
                opt_en = torch.optim.SGD(model.encoder.parameters(), lr=learning_rate, momentum=0.9,
                                         weight_decay=0.0005)
                opt_dec = torch.optim.SGD(model.decoder.parameters(), lr=learning_rate * 10, momentum=0.9,
                                          weight_decay=0.0005)
            iterate += 1
            del loss
        print("Epoch {} (iterations {}-{}): loss {:.4f}, encoder lr min {:.1e} max {:.1e}, decoder lr {:.1e}".format(
            epo, iterate - len(dataloader), iterate - 1, np.mean(losses), min(lrs), max(lrs),
            opt_dec.param_groups[0]['lr']))
