# Source: CSCYQJ/MICCAI23-ProtoContra-SFDA, trainers/target_adapt_PFA_trainer.py (PFA_Trainer), losses/adaptation_loss.py (ProtoLoss), models/unet.py (UNet, OutConv), configs/train_target_adapt_PFA.yaml, commit a719dd53ef3acc951bec75887d6ec922691219e0
# Report: https://github.com/CSCYQJ/MICCAI23-ProtoContra-SFDA/issues/18
# Source-free domain adaptation by prototype-anchored feature alignment (PFA): a U-Net trained
# on the source site (MR) is adapted on unlabeled target images (CT); the weights of the 1x1
# output convolution are the class prototypes, kept fixed as anchors, and the bi-directional
# transport loss (PCT) pulls the target features towards them. Abdomen MR/CT slices become
# synthetic 32x32 three-slice images with four "organs" whose intensities differ between sites;
# the U-Net is reduced (16-64 channels, two levels); source training is a short CE loop.
import os
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from typing import Optional


class DoubleConv(nn.Module):
    """(convolution => [BN] => ReLU) * 2"""

    def __init__(self, in_channels, out_channels, mid_channels=None):
        super().__init__()
        if not mid_channels:
            mid_channels = out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(mid_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True)
        )

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
        self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        x = torch.cat([x2, x1], dim=1)
        return self.conv(x)


class OutConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(OutConv, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False)

    def forward(self, x):
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, n_channels, n_classes, only_feature=True):
        super(UNet, self).__init__()
        self.n_channels = n_channels
        self.n_classes = n_classes
        self.only_feature = only_feature
        self.inc = DoubleConv(n_channels, 16)
        self.down1 = Down(16, 32)
        self.down2 = Down(32, 64)
        self.up1 = Up(64, 32)
        self.up2 = Up(32, 16)
        if self.only_feature == False:
            self.outc = OutConv(16, n_classes)

    def forward(self, x, only_feature=False):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x = self.up1(x3, x2)
        x = self.up2(x, x1)
        if self.only_feature:
            return x
        else:
            return x, self.outc(x)


class ProtoLoss(nn.Module):
    def __init__(self, nav_t: float, beta: float, num_classes: int, device: torch.device, s_par: Optional[float] = 0.5, reduction: Optional[str] = 'mean'):
        super(ProtoLoss, self).__init__()
        self.nav_t = nav_t
        self.s_par = s_par
        self.beta = beta
        self.prop = (torch.ones((num_classes,1))*(1/num_classes)).to(device)
        self.eps = 1e-6

    def pairwise_cosine_dist(self, x, y):
        x = F.normalize(x, p=2, dim=1)
        y = F.normalize(y, p=2, dim=1)
        return 1 - torch.matmul(x, y.T)

    def get_pos_logits(self, sim_mat, prop):
        log_prior = torch.log(prop + self.eps)
        return sim_mat/self.nav_t + log_prior

    def update_prop(self, prop):
        return (1 - self.beta) * self.prop + self.beta * prop

    def forward(self, mu_s: torch.Tensor, f_t: torch.Tensor) -> torch.Tensor:
        # Update proportions
        sim_mat = torch.matmul(mu_s, f_t.T)
        old_logits = self.get_pos_logits(sim_mat.detach(), self.prop)
        s_dist_old = F.softmax(old_logits, dim=0)
        prop = s_dist_old.mean(1, keepdim=True)
        self.prop = self.update_prop(prop)

        # Calculate bi-directional transport loss
        new_logits = self.get_pos_logits(sim_mat, self.prop)
        s_dist = F.softmax(new_logits, dim=0)
        t_dist = F.softmax(sim_mat/self.nav_t, dim=1)
        cost_mat = self.pairwise_cosine_dist(mu_s, f_t)
        t2p_loss = (self.s_par*cost_mat*s_dist).sum(0).mean()
        p2t_loss = (((1-self.s_par)*cost_mat*t_dist).sum(1)*self.prop.squeeze(1)).sum()

        return t2p_loss, p2t_loss


SITE_INTENSITY = {'MR': [0.05, 0.55, 0.75, 0.75, 0.35], 'CT': [0.25, 0.65, 0.45, 0.45, 0.85]}


class MyDataset(Dataset):
    """Synthetic abdomen slices: background + spleen, right/left kidney, liver as blobs."""
    def __init__(self, site, n, seed):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(32.), torch.arange(32.), indexing="ij")
        centres = torch.tensor([[10., 24.], [20., 10.], [20., 22.], [10., 9.]])
        radii = torch.tensor([4., 3.5, 3.5, 6.])
        inten = torch.tensor(SITE_INTENSITY[site])
        self.items = []
        for i in range(n):
            seg = torch.zeros(32, 32, dtype=torch.long)
            for c in range(4):
                ctr = centres[c] + torch.randn(2, generator=g) * 1.5
                r = radii[c] * (0.8 + 0.4 * torch.rand(1, generator=g))
                seg[((yy - ctr[0]) ** 2 + (xx - ctr[1]) ** 2) < r ** 2] = c + 1
            img = inten[seg].unsqueeze(0).repeat(3, 1, 1) + 0.08 * torch.randn(3, 32, 32, generator=g)
            self.items.append((img, seg, f"{site}{i // 8}_{i % 8}"))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def mean_dice(pred, seg, num_classes):
    dices = []
    for c in range(1, num_classes):
        p, t = pred == c, seg == c
        dices.append((2 * (p & t).sum() / (p.sum() + t.sum()).clamp(min=1)).item())
    return float(np.mean(dices))


def train_source(opt):
    model = UNet(opt['input_dim'], opt['num_classes'] * opt['num_prototypes'], only_feature=False)
    loader = DataLoader(MyDataset('MR', 64, seed=1), batch_size=16, shuffle=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(10):
        for imgs, segs, _ in loader:
            _, pred = model(imgs)
            loss = F.cross_entropy(pred, segs)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.state_dict()


class PFA_Trainer():
    def __init__(self, opt):
        self.opt = opt

    def initialize(self, source_state):
        self.train_dataloader = DataLoader(MyDataset('CT', 96, seed=2), batch_size=self.opt['batch_size'], shuffle=True, drop_last=True)
        self.val_dataloader = DataLoader(MyDataset('CT', 32, seed=3), batch_size=self.opt['batch_size'], shuffle=False, drop_last=False)

        self.model = UNet(self.opt['input_dim'], self.opt['num_classes'] * self.opt['num_prototypes'], only_feature=False)
        self.model.load_state_dict(source_state)
        self.source_prototypes = self.model.outc.conv.weight.view((self.opt['num_classes']*self.opt['num_prototypes'],self.opt['output_dim']))
        self.model.outc.requires_grad = False
        self.total_epochs = self.opt['total_epochs']

        ## optimizers, schedulars
        self.optimizer, self.schedular = self.get_optimizers()
        self.grad_scaler = torch.amp.GradScaler("cpu", enabled=True)

        ## losses
        self.criterion_proto = ProtoLoss(self.opt['nav_t'],self.opt['beta'],self.opt['num_classes'],'cpu',self.opt['s_par'])
        self.set_seed(self.opt['random_seed'])
        self.start_epoch = 0
        self.initial_prototypes = self.model.outc.conv.weight.detach().clone()

    def set_seed(self, seed):
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)

    def get_optimizers(self):
        params = list(self.model.parameters())
        optimizer = torch.optim.Adam(params,lr=self.opt['lr'],betas=(0.9, 0.999), weight_decay=0.0005)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
        return optimizer, scheduler

    def train_one_step(self, data):
        # zero out previous grads
        self.optimizer.zero_grad()

        # get losses
        imgs = data[0]

        target_f,predict = self.model(imgs,only_feature=True)

        target_f = target_f.permute(0, 2, 3, 1).reshape(-1, target_f.shape[1])
        t2p_loss, p2t_loss = self.criterion_proto(self.source_prototypes,target_f)
        loss = t2p_loss + p2t_loss

        self.grad_scaler.scale(loss).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()

        adapt_losses = {}
        adapt_losses['t2p_loss'] = t2p_loss.detach()
        adapt_losses['p2t_loss'] = p2t_loss.detach()
        adapt_losses['total_loss'] = loss.detach()
        return predict, adapt_losses

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        dices = []
        for val_imgs, val_segs, _ in self.val_dataloader:
            _, predict = self.model(val_imgs)
            dices.append(mean_dice(predict.argmax(1), val_segs, self.opt['num_classes']))
        self.model.train()
        return float(np.mean(dices))

    def train(self):
        print(f"before adaptation: target dice {self.validate():.4f}")
        for epoch in range(self.start_epoch,self.total_epochs):
            train_losses = {}
            for it, (images,segs,_) in enumerate(self.train_dataloader):
                predicts, losses = self.train_one_step([images, segs])
                for k,v in losses.items():
                    train_losses[k] = v + train_losses.get(k,0)
            self.schedular.step()
            drift = (self.model.outc.conv.weight.detach() - self.initial_prototypes).norm() / self.initial_prototypes.norm()
            print(f"epoch {epoch}: t2p {train_losses['t2p_loss'].item()/(it+1):.4f} p2t {train_losses['p2t_loss'].item()/(it+1):.4f} "
                  f"target dice {self.validate():.4f} prototype change {drift.item():.4f}")


def main():
    opt = {'input_dim': 3, 'output_dim': 16, 'num_classes': 5, 'num_prototypes': 1, 'total_epochs': 5, 'batch_size': 16,
           'random_seed': 999, 'lr': 0.0001, 'nav_t': 0.1, 'beta': 0.001, 's_par': 0.5}
    torch.manual_seed(0)
    source_state = train_source(opt)
    trainer = PFA_Trainer(opt)
    trainer.initialize(source_state)
    trainer.train()


if __name__ == '__main__':
    main()
