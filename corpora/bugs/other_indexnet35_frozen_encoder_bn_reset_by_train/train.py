# Source: poppinace/indexnet_matting, scripts/hltrainval.py (train, validate, weighted_loss) and scripts/hlmobilenetv2.py (conv_bn, InvertedResidual, freeze_bn), commit 036c7da5b1ec2aaa29f60991e8f9ed0a267e624d
# Report: https://github.com/poppinace/indexnet_matting/issues/35
# IndexNet matting fine-tuning: an ImageNet-pretrained MobileNetV2 encoder (4-channel input: RGB +
# trimap) built with freeze_bn=True, a light decoder trained at 100x the encoder learning rate with
# Adam, the alpha + composition weighted_loss at batch size 2, and validation in eval mode after
# every epoch (MSE / SAD on the unknown region). The encoder is a 4-stage MobileNetV2 over 16x16
# crops, "pretrained" inside the script on a synthetic task; data are synthetic fg/bg composites.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(6)
np.random.seed(6)
torch.set_num_threads(1)

BATCH_SIZE = 2
LEARNING_RATE = 1e-3
MULT = 100
NUM_EPOCHS = 3
CROP = 16


def conv_bn(inp, oup, k=3, s=1, BatchNorm2d=nn.BatchNorm2d):
    return nn.Sequential(
        nn.Conv2d(inp, oup, k, s, padding=k // 2, bias=False),
        BatchNorm2d(oup),
        nn.ReLU6(inplace=True)
    )


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, dilation, expand_ratio, batch_norm=nn.BatchNorm2d):
        super(InvertedResidual, self).__init__()
        self.stride = stride
        hidden_dim = round(inp * expand_ratio)
        self.use_res_connect = self.stride == 1 and inp == oup
        self.conv = nn.Sequential(
            nn.Conv2d(inp, hidden_dim, 1, 1, 0, bias=False),
            batch_norm(hidden_dim),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden_dim, hidden_dim, 3, stride, dilation, dilation=dilation, groups=hidden_dim, bias=False),
            batch_norm(hidden_dim),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            batch_norm(oup),
        )

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class hlMobileNetV2(nn.Module):
    def __init__(self, freeze_bn=False):
        super(hlMobileNetV2, self).__init__()
        BatchNorm2d = nn.BatchNorm2d
        self.layer0 = conv_bn(4, 16, 3, 1, BatchNorm2d)
        self.layer1 = InvertedResidual(16, 16, 1, 1, 1, BatchNorm2d)
        self.layer2 = InvertedResidual(16, 24, 2, 1, 4, BatchNorm2d)
        self.layer3 = InvertedResidual(24, 32, 2, 1, 4, BatchNorm2d)

        # freeze encoder batch norm layers
        if freeze_bn:
            self.freeze_bn()

        self.dconv3 = conv_bn(32, 32, 1, 1, BatchNorm2d)
        self.dconv2 = conv_bn(24, 32, 1, 1, BatchNorm2d)
        self.dconv1 = conv_bn(16, 32, 1, 1, BatchNorm2d)
        self.pred = nn.Sequential(conv_bn(32, 32, 3, 1, BatchNorm2d), nn.Conv2d(32, 1, 3, 1, 1))
        self._initialize_weights()

    def encode(self, x):
        l0 = self.layer0(x)
        l1 = self.layer1(l0)
        l2 = self.layer2(l1)
        l3 = self.layer3(l2)
        return l1, l2, l3

    def forward(self, x):
        l1, l2, l3 = self.encode(x)
        l = self.dconv3(l3)
        l = F.interpolate(l, size=l2.size()[2:], mode='bilinear', align_corners=True) + self.dconv2(l2)
        l = F.interpolate(l, size=l1.size()[2:], mode='bilinear', align_corners=True) + self.dconv1(l1)
        l = self.pred(l)
        return torch.sigmoid(l)

    def freeze_bn(self):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()

    def _initialize_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
                if m.bias is not None:
                    m.bias.data.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()


def make_composites(n, rng):
    """fg/bg composites with a soft alpha disc; gt = [alpha, trimap mask, fg(3), bg(3), comp(3)]."""
    yy, xx = np.mgrid[0:CROP, 0:CROP].astype(np.float32)
    images, gts = [], []
    for _ in range(n):
        cx, cy, r = rng.uniform(5, 11), rng.uniform(5, 11), rng.uniform(3, 6)
        d = np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
        alpha = np.clip((r - d) / 2.0 + 0.5, 0, 1)
        fg = rng.uniform(0.2, 1.0, (3, 1, 1)) * np.ones((3, CROP, CROP)) + 0.1 * rng.standard_normal((3, CROP, CROP))
        bg = rng.uniform(0.0, 0.8, (3, 1, 1)) * np.ones((3, CROP, CROP)) + 0.3 * rng.standard_normal((3, CROP, CROP))
        comp = alpha * fg + (1 - alpha) * bg
        trimap = np.where(alpha >= 0.99, 1.0, np.where(alpha <= 0.01, 0.0, 0.5))
        unknown = (np.abs(d - r) < 3.0).astype(np.float32)
        trimap = np.where(unknown > 0, 0.5, trimap)
        images.append(np.concatenate([(comp - 0.45) / 0.25, trimap[None]], 0))
        gts.append(np.concatenate([alpha[None], unknown[None], fg, bg, comp], 0))
    return torch.tensor(np.array(images), dtype=torch.float32), torch.tensor(np.array(gts), dtype=torch.float32)


def pretrain_encoder(net, rng):
    """Stand-in for the ImageNet weights: train the encoder on a 4-way texture task (sets BN stats)."""
    head = nn.Linear(32, 4)
    opt = torch.optim.Adam(list(net.parameters()) + list(head.parameters()), lr=3e-3)
    net.train()
    for _ in range(150):
        y = torch.as_tensor(rng.integers(0, 4, 32))
        x = torch.randn(32, 4, CROP, CROP) * (0.5 + y.float().view(-1, 1, 1, 1)) + y.float().view(-1, 1, 1, 1)
        loss = F.cross_entropy(head(net.encode(x)[2].mean((2, 3))), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


# implementation of the composition loss and alpha loss
def weighted_loss(pd, gt, wl=0.5, epsilon=1e-6):
    bs, _, h, w = pd.size()
    mask = gt[:, 1, :, :].view(bs, 1, h, w)
    alpha_gt = gt[:, 0, :, :].view(bs, 1, h, w)
    diff_alpha = (pd - alpha_gt) * mask
    loss_alpha = torch.sqrt(diff_alpha * diff_alpha + epsilon ** 2)
    loss_alpha = loss_alpha.sum(dim=2).sum(dim=2) / mask.sum(dim=2).sum(dim=2)
    loss_alpha = loss_alpha.sum() / bs

    fg = gt[:, 2:5, :, :]
    bg = gt[:, 5:8, :, :]
    c_p = pd * fg + (1 - pd) * bg
    c_g = gt[:, 8:11, :, :]
    diff_color = (c_p - c_g) * mask
    loss_composition = torch.sqrt(diff_color * diff_color + epsilon ** 2)
    loss_composition = loss_composition.sum(dim=2).sum(dim=2) / mask.sum(dim=2).sum(dim=2)
    loss_composition = loss_composition.sum() / bs

    return wl * loss_alpha + (1 - wl) * loss_composition


def train(net, train_loader, optimizer, epoch):
    # switch to train mode
    net.train()

    running_loss = 0.0
    for i, (inputs, targets) in enumerate(train_loader):
        # forward
        outputs = net(inputs)
        # zero the parameter gradients
        optimizer.zero_grad()
        # compute loss
        loss = weighted_loss(outputs, targets)
        # backward + optimize
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    print('epoch: %d, train loss: %.5f' % (epoch, running_loss / (i + 1)))


def validate(net, val_data, epoch, pretrained_bn):
    # switch to eval mode
    net.eval()
    images, gts = val_data
    with torch.no_grad():
        alpha = net(images)
    mask = gts[:, 1:2]
    err = (alpha - gts[:, 0:1]) * mask
    sad = err.abs().sum((1, 2, 3)).mean().item()
    mse = (err.pow(2).sum((1, 2, 3)) / mask.sum((1, 2, 3))).mean().item()
    drift = max((m.running_mean - pretrained_bn[name]).abs().max().item()
                for name, m in net.named_modules() if name in pretrained_bn)
    print('epoch: %d, test: SAD: %.3f, MSE: %.5f, encoder BN running_mean drift: %.4f' % (epoch, sad, mse, drift))


def main():
    rng = np.random.default_rng(6)
    net = hlMobileNetV2(freeze_bn=False)
    pretrain_encoder(net, rng)
    pretrained = net.state_dict()

    net = hlMobileNetV2(freeze_bn=True)
    net.load_state_dict(pretrained)
    pretrained_bn = {name: m.running_mean.clone() for name, m in net.named_modules()
                     if isinstance(m, nn.BatchNorm2d) and name.startswith('layer')}

    train_images, train_gts = make_composites(240, rng)
    val_data = make_composites(120, rng)
    g = torch.Generator()
    g.manual_seed(6)
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train_images, train_gts),
                                               batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)

    # filter parameters
    pretrained_params = []
    learning_params = []
    for p in net.named_parameters():
        if 'dconv' in p[0] or 'pred' in p[0] or 'index' in p[0]:
            learning_params.append(p[1])
        else:
            pretrained_params.append(p[1])

    # define optimizer
    optimizer = torch.optim.Adam(
        [
            {'params': learning_params},
            {'params': pretrained_params, 'lr': LEARNING_RATE / MULT},
        ],
        lr=LEARNING_RATE
    )

    validate(net, val_data, 0, pretrained_bn)
    for epoch in range(1, NUM_EPOCHS + 1):
        train(net, train_loader, optimizer, epoch)
        validate(net, val_data, epoch, pretrained_bn)


if __name__ == '__main__':
    main()
