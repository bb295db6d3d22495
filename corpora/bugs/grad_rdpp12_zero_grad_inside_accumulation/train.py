# Source: tientrandinh/Revisiting-Reverse-Distillation, main.py + utils/utils_train.py, commit 10202ef9c680550741613f8fad1c2bf33a9d9ff2
# Report: https://github.com/tientrandinh/Revisiting-Reverse-Distillation/issues/12
# RD++ training loop (frozen encoder, projection layers, bottleneck bn + decoder, two Adam
# optimizers, gradient accumulation over 2 batches). The wide-ResNet50 encoder/decoder are
# reduced to small conv stacks with the same three-scale feature layout, MVTec images to
# synthetic 32x32 textures with a noised copy; the Sinkhorn term of Revisit_RDLoss is dropped
# (geomloss is not available), its reconstruct and contrast terms are kept.
import random
from argparse import Namespace

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


def setup_seed(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


class ProjLayer(nn.Module):
    '''
    inputs: features of encoder block
    outputs: projected features
    '''
    def __init__(self, in_c, out_c):
        super(ProjLayer, self).__init__()
        self.proj = nn.Sequential(nn.Conv2d(in_c, in_c//2, kernel_size=3, stride=1, padding=1),
                                  nn.InstanceNorm2d(in_c//2),
                                  torch.nn.LeakyReLU(),
                                  nn.Conv2d(in_c//2, out_c, kernel_size=3, stride=1, padding=1),
                                  nn.InstanceNorm2d(out_c),
                                  torch.nn.LeakyReLU(),
                                  )
    def forward(self, x):
        return self.proj(x)

class MultiProjectionLayer(nn.Module):
    def __init__(self, base = 64):
        super(MultiProjectionLayer, self).__init__()
        self.proj_a = ProjLayer(base * 4, base * 4)
        self.proj_b = ProjLayer(base * 8, base * 8)
        self.proj_c = ProjLayer(base * 16, base * 16)
    def forward(self, features, features_noise = False):
        if features_noise is not False:
            return ([self.proj_a(features_noise[0]),self.proj_b(features_noise[1]),self.proj_c(features_noise[2])], \
                  [self.proj_a(features[0]),self.proj_b(features[1]),self.proj_c(features[2])])
        else:
            return [self.proj_a(features[0]),self.proj_b(features[1]),self.proj_c(features[2])]

def loss_fucntion(a, b):
    cos_loss = torch.nn.CosineSimilarity()
    loss = 0
    for item in range(len(a)):
        loss += torch.mean(1-cos_loss(a[item].view(a[item].shape[0],-1),
                                      b[item].view(b[item].shape[0],-1)))
    return loss

class CosineReconstruct(nn.Module):
    def __init__(self):
        super(CosineReconstruct, self).__init__()
    def forward(self, x, y):
        return torch.mean(1 - torch.nn.CosineSimilarity()(x, y))

class Revisit_RDLoss(nn.Module):
    def __init__(self, consistent_shuffle = True):
        super(Revisit_RDLoss, self).__init__()
        self.reconstruct = CosineReconstruct()
        self.contrast = torch.nn.CosineEmbeddingLoss(margin = -0.5)
    def forward(self, noised_feature, projected_noised_feature, projected_normal_feature):
        current_batchsize = projected_normal_feature[0].shape[0]
        target = torch.ones(current_batchsize)
        normal_proj1, normal_proj2, normal_proj3 = projected_normal_feature
        abnormal_proj1, abnormal_proj2, abnormal_proj3 = projected_noised_feature
        noised_feature1, noised_feature2, noised_feature3 = noised_feature
        loss_reconstruct = self.reconstruct(abnormal_proj1, normal_proj1)+ \
                   self.reconstruct(abnormal_proj2, normal_proj2)+ \
                   self.reconstruct(abnormal_proj3, normal_proj3)
        loss_contrast = self.contrast(noised_feature1.view(noised_feature1.shape[0], -1), normal_proj1.view(normal_proj1.shape[0], -1), target = target) +\
                           self.contrast(noised_feature2.view(noised_feature2.shape[0], -1), normal_proj2.view(normal_proj2.shape[0], -1), target = target) +\
                           self.contrast(noised_feature3.view(noised_feature3.shape[0], -1), normal_proj3.view(normal_proj3.shape[0], -1), target = target)
        return (0.01 * loss_reconstruct + 0.1 * loss_contrast)/0.11


class Encoder(nn.Module):
    def __init__(self, base):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(3, base * 4, 3, 2, 1), nn.BatchNorm2d(base * 4), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(base * 4, base * 8, 3, 2, 1), nn.BatchNorm2d(base * 8), nn.ReLU())
        self.layer3 = nn.Sequential(nn.Conv2d(base * 8, base * 16, 3, 2, 1), nn.BatchNorm2d(base * 16), nn.ReLU())

    def forward(self, x):
        f1 = self.layer1(x)
        f2 = self.layer2(f1)
        return [f1, f2, self.layer3(f2)]


class BN_layer(nn.Module):
    def __init__(self, base):
        super().__init__()
        self.conv1 = nn.Conv2d(base * 4, base * 16, 4, 4)
        self.conv2 = nn.Conv2d(base * 8, base * 16, 2, 2)
        self.fuse = nn.Sequential(nn.Conv2d(base * 48, base * 16, 3, 2, 1), nn.BatchNorm2d(base * 16), nn.ReLU())

    def forward(self, x):
        return self.fuse(torch.cat([self.conv1(x[0]), self.conv2(x[1]), x[2]], 1))


class Decoder(nn.Module):
    def __init__(self, base):
        super().__init__()
        self.up3 = nn.Sequential(nn.ConvTranspose2d(base * 16, base * 16, 2, 2), nn.BatchNorm2d(base * 16), nn.ReLU())
        self.up2 = nn.Sequential(nn.ConvTranspose2d(base * 16, base * 8, 2, 2), nn.BatchNorm2d(base * 8), nn.ReLU())
        self.up1 = nn.Sequential(nn.ConvTranspose2d(base * 8, base * 4, 2, 2), nn.BatchNorm2d(base * 4), nn.ReLU())

    def forward(self, x):
        d3 = self.up3(x)
        d2 = self.up2(d3)
        return [self.up1(d2), d2, d3]


def make_textures(n, g):
    base = torch.sin(torch.linspace(0, 12, 32))[None, :] * torch.cos(torch.linspace(0, 8, 32))[:, None]
    img = base.expand(n, 3, 32, 32) + 0.3 * torch.randn(n, 3, 32, 32, generator=g)
    img_noise = img + 0.8 * torch.randn(n, 3, 32, 32, generator=g) * (torch.rand(n, 1, 32, 32, generator=g) > 0.9)
    return img, img_noise


def train(_class_, pars):
    print(_class_)
    device = 'cpu'
    g = torch.Generator().manual_seed(0)
    img_all, noise_all = make_textures(96, g)
    train_data = torch.utils.data.TensorDataset(img_all, noise_all, torch.zeros(96))
    train_dataloader = torch.utils.data.DataLoader(train_data, batch_size=pars.batch_size, shuffle=True)

    encoder, bn = Encoder(base=4), BN_layer(base=4)
    encoder = encoder.to(device)
    bn = bn.to(device)
    encoder.eval()

    decoder = Decoder(base=4)
    decoder = decoder.to(device)

    proj_layer =  MultiProjectionLayer(base=4).to(device)
    proj_loss = Revisit_RDLoss()
    optimizer_proj = torch.optim.Adam(list(proj_layer.parameters()), lr=pars.proj_lr, betas=(0.5,0.999))
    optimizer_distill = torch.optim.Adam(list(decoder.parameters())+list(bn.parameters()), lr=pars.distill_lr, betas=(0.5,0.999))

    num_epoch = 10
    print(f'with class {_class_}, Training with {num_epoch} Epoch')

    for epoch in range(1,num_epoch+1):
        bn.train()
        proj_layer.train()
        decoder.train()
        loss_proj_running = 0
        loss_distill_running = 0
        total_loss_running = 0

        ## gradient acc
        accumulation_steps = 2

        for i, (img,img_noise,_) in enumerate(train_dataloader):
            img = img.to(device)
            img_noise = img_noise.to(device)
            inputs = encoder(img)
            inputs_noise = encoder(img_noise)

            (feature_space_noise, feature_space) = proj_layer(inputs, features_noise = inputs_noise)

            L_proj = proj_loss(inputs_noise, feature_space_noise, feature_space)

            outputs = decoder(bn(feature_space))#bn(inputs))
            L_distill = loss_fucntion(inputs, outputs)
            loss = L_distill + pars.weight_proj * L_proj
            optimizer_proj.zero_grad()
            optimizer_distill.zero_grad()
            loss.backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer_proj.step()
                optimizer_distill.step()

            total_loss_running += loss.detach().cpu().item()
            loss_proj_running += L_proj.detach().cpu().item()
            loss_distill_running += L_distill.detach().cpu().item()

        print(f"epoch {epoch}: total loss {total_loss_running:.4f} distill {loss_distill_running:.4f} "
              f"proj {loss_proj_running:.4f}")


if __name__ == '__main__':
    setup_seed(111)
    pars = Namespace(batch_size=8, proj_lr=0.001, distill_lr=0.005, weight_proj=0.2)
    train("carpet", pars)
