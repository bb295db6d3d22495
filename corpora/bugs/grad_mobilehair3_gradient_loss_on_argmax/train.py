# Source: wonbeomjang/mobile-hair-segmentation-pytorch, loss/loss.py (ImageGradientLoss, iou_loss), src/train.py (Trainer), model/model.py (MobileHairNet), util/util.py, commit 0b1457ae00231de4221706fcfbb33b4206f6816e
# Report: https://github.com/wonbeomjang/mobile-hair-segmentation-pytorch/issues/3
# MobileHairNet trainer: a depthwise-separable encoder/decoder with a softmax output, trained
# with cross entropy on the hair mask plus an image-gradient loss that aligns the edges of the
# predicted mask with the edges of the gray image, Adadelta with a LambdaLR decay, and IoU
# reported every few steps. The hair dataset is replaced by synthetic 32x32 images (a textured
# dark "hair" region on a lighter background), the network width nf=32 by nf=4; sample images
# and checkpoints are not written.
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.loss import _WeightedLoss
from torch.optim.adadelta import Adadelta


class ImageGradientLoss(_WeightedLoss):
    def __init__(self, size_average=None, reduce=None, reduction='mean'):
        super(ImageGradientLoss, self).__init__(size_average, reduce, reduction)
        self.device = torch.device("cpu")

    def forward(self, pred, gray_image):
        size = pred.size()
        pred = pred.argmax(1).view(size[0], 1, size[2], size[3]).float()
        gradient_tensor_x = torch.Tensor([[1.0, 0.0, -1.0],
                                          [2.0, 0.0, -2.0],
                                          [1.0, 0.0, -1.0]]).to(self.device).view((1, 1, 3, 3))

        gradient_tensor_y = torch.Tensor([[1.0, 2.0, 1.0],
                                          [0.0, 0.0, 0.0],
                                          [-1.0, -2.0, -1.0]]).to(self.device).view((1, 1, 3, 3))

        I_x = F.conv2d(gray_image, gradient_tensor_x)
        G_x = F.conv2d(pred, gradient_tensor_x)

        I_y = F.conv2d(gray_image, gradient_tensor_y)
        G_y = F.conv2d(pred, gradient_tensor_y)

        G = torch.sqrt(torch.pow(G_x, 2) + torch.pow(G_y, 2))

        gradient = 1 - torch.pow(I_x * G_x + I_y * G_y, 2)

        image_gradient_loss = torch.sum(torch.mul(G, gradient)) / torch.sum(G)

        image_gradient_loss = image_gradient_loss if image_gradient_loss > 0 else 0

        return image_gradient_loss


def iou_loss(pred, mask):
    pred = torch.argmax(pred, 1).long()
    mask = torch.squeeze(mask).long()
    Union = torch.where(pred > mask, pred, mask)
    Overlep = torch.mul(pred, mask)
    loss = torch.div(torch.sum(Overlep).float(), torch.sum(Union).float())
    return loss


class _Layer_Depwise_Encode(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=3, reserve=False):
        self.stride = int(out_channels/in_channels)
        if reserve == True:
            self.stride = 1
        super(_Layer_Depwise_Encode, self).__init__()
        self.layer = nn.Sequential(
            nn.Conv2d(in_channels=in_channels, out_channels=in_channels, kernel_size=kernel_size, stride=1, padding=1, groups=in_channels),
            nn.BatchNorm2d(in_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(in_channels=in_channels, out_channels=out_channels, kernel_size=1, stride=self.stride),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True)
        )

    def forward(self, x):
        return self.layer(x)


class _Layer_Depwise_Decode(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size=3,  stride=1):
        super(_Layer_Depwise_Decode, self).__init__()
        self.layer = nn.Sequential(
            nn.Conv2d(in_channels=in_channel, out_channels=in_channel, kernel_size=kernel_size, stride=stride, padding=1, groups=in_channel),
            nn.Conv2d(in_channels=in_channel, out_channels=out_channel, kernel_size=1, stride=stride),
            nn.ReLU(inplace=True)
        )

    def forward(self, x):
        return self.layer(x)


class MobileHairNet(nn.Module):
    def __init__(self, nf=32, kernel_size=3, initialize=True):
        super(MobileHairNet, self).__init__()
        self.nf = nf
        self.encode_layer1 = nn.Sequential(
            nn.Conv2d(in_channels=3, out_channels=nf, kernel_size=kernel_size, stride=2, padding=1),
            _Layer_Depwise_Encode(nf, 2 * nf, reserve=True)
        )
        self.encode_layer2 = nn.Sequential(
            _Layer_Depwise_Encode(2 * nf, 4 * nf),
            _Layer_Depwise_Encode(4 * nf, 4 * nf),
        )
        self.encode_layer3 = nn.Sequential(
            _Layer_Depwise_Encode(4 * nf, 8 * nf),
            _Layer_Depwise_Encode(8 * nf, 8 * nf)
        )
        self.encode_layer4 = nn.Sequential(
            _Layer_Depwise_Encode(8 * nf, 16 * nf),
            _Layer_Depwise_Encode(16 * nf, 16 * nf),
            _Layer_Depwise_Encode(16 * nf, 16 * nf),
        )
        self.encode_layer5 = nn.Sequential(
            _Layer_Depwise_Encode(16 * nf, 32 * nf),
            _Layer_Depwise_Encode(32 * nf, 32 * nf)
        )
        self.decode_layer1 = nn.Upsample(scale_factor=2)
        self.decode_layer2 = nn.Sequential(
            nn.Conv2d(in_channels=32*nf, out_channels=2*nf, kernel_size=1),
            _Layer_Depwise_Decode(in_channel=2*nf, out_channel=2*nf, kernel_size=kernel_size),
            nn.Upsample(scale_factor=2)
        )
        self.decode_layer3 = nn.Sequential(
            _Layer_Depwise_Decode(in_channel=2*nf, out_channel=2*nf, kernel_size=kernel_size),
            nn.Upsample(scale_factor=2)
        )
        self.decode_layer4 = nn.Sequential(
            _Layer_Depwise_Decode(in_channel=2*nf, out_channel=2*nf, kernel_size=kernel_size),
            nn.Upsample(scale_factor=2)
        )
        self.decode_layer5 = nn.Sequential(
            _Layer_Depwise_Decode(in_channel=2*nf, out_channel=2*nf, kernel_size=kernel_size),
            nn.Upsample(scale_factor=2),
            _Layer_Depwise_Decode(in_channel=2*nf, out_channel=2*nf, kernel_size=kernel_size),
            nn.Conv2d(in_channels=2*nf, out_channels=2, kernel_size=kernel_size, padding=1)
        )
        self.encode_to_decoder4 = nn.Conv2d(in_channels=16 * self.nf, out_channels=32 * self.nf, kernel_size=1)
        self.encode_to_decoder3 = nn.Conv2d(in_channels=8 * self.nf, out_channels=2 * self.nf, kernel_size=1)
        self.encode_to_decoder2 = nn.Conv2d(in_channels=4 * self.nf, out_channels=2 * self.nf, kernel_size=1)
        self.encode_to_decoder1 = nn.Conv2d(in_channels=2 * self.nf, out_channels=2 * self.nf, kernel_size=1)

        self.soft_max = nn.Softmax(dim=1)

        if initialize:
            self._init_weight()

    def forward(self, x):
        encode_layer1 = self.encode_layer1(x)
        encode_layer2 = self.encode_layer2(encode_layer1)
        encode_layer3 = self.encode_layer3(encode_layer2)
        encode_layer4 = self.encode_layer4(encode_layer3)
        encode_layer5 = self.encode_layer5(encode_layer4)

        encode_layer4 = self.encode_to_decoder4(encode_layer4)
        encode_layer3 = self.encode_to_decoder3(encode_layer3)
        encode_layer2 = self.encode_to_decoder2(encode_layer2)
        encode_layer1 = self.encode_to_decoder1(encode_layer1)

        decode_layer1 = self.decode_layer1(encode_layer5) + encode_layer4
        decode_layer2 = self.decode_layer2(decode_layer1) + encode_layer3
        decode_layer3 = self.decode_layer3(decode_layer2) + encode_layer2
        decode_layer4 = self.decode_layer4(decode_layer3) + encode_layer1
        decode_layer5 = self.decode_layer5(decode_layer4)

        out = self.soft_max(decode_layer5)
        return out

    def _init_weight(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out')
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)


class LambdaLR:
    def __init__(self, n_epoch, offset, total_batch_size, decay_batch_size):
        self.n_epoch = n_epoch
        self.offset = offset
        self.total_batch_size = total_batch_size
        self.decay_batch_size = decay_batch_size

    def step(self, epoch):
        factor = pow(0.1, int(((self.offset + epoch) * self.total_batch_size) / self.decay_batch_size))
        return factor


class AverageMeter(object):
    """Computes and stores the average and current value"""
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def make_hair_dataset(n, size=32, seed=0):
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    images, grays, masks = [], [], []
    for _ in range(n):
        cy, cx = rng.uniform(8, 16), rng.uniform(10, 22)
        ry, rx = rng.uniform(6, 12), rng.uniform(7, 12)
        r = np.sqrt(((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2)
        mask = (r <= 1.0).astype(np.float32)
        alpha = 1.0 / (1.0 + np.exp((r - 1.0) / 0.12))
        streaks = 0.08 * np.sin(xx * rng.uniform(1.5, 2.5) + rng.uniform(0, 6))
        bg = rng.uniform(0.55, 0.85, size=3)[:, None, None] + 0.05 * rng.randn(3, size, size)
        hair = rng.uniform(0.1, 0.3) + streaks + 0.05 * rng.randn(size, size)
        img = np.clip(bg * (1 - alpha) + hair * alpha, 0, 1).astype(np.float32)
        gray = (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None].astype(np.float32)
        images.append((img - 0.5) / 0.5)
        grays.append(gray)
        masks.append(mask[None])
    return (torch.tensor(np.array(images)), torch.tensor(np.array(grays)), torch.tensor(np.array(masks)))


class Trainer:
    def __init__(self, config, dataloader):
        self.batch_size = config.batch_size
        self.lr = config.lr
        self.epoch = config.epoch
        self.num_epoch = config.num_epoch
        self.device = torch.device("cpu")
        self.data_loader = dataloader
        self.image_len = len(dataloader)
        self.num_classes = config.num_classes
        self.eps = config.eps
        self.rho = config.rho
        self.decay = config.decay
        self.gradient_loss_weight = config.gradient_loss_weight
        self.decay_batch_size = config.decay_batch_size

        self.net = MobileHairNet(nf=config.nf).to(self.device)
        self.optimizer = Adadelta(self.net.parameters(), lr=self.lr, eps=self.eps, rho=self.rho, weight_decay=self.decay)
        self.lr_scheduler_discriminator = torch.optim.lr_scheduler.LambdaLR(self.optimizer, LambdaLR(self.num_epoch,
                                                                                                     self.epoch,
                                                                                                     len(self.data_loader),
                                                                                                     self.decay_batch_size).step)

    def train(self):
        bce_losses = AverageMeter()
        image_gradient_losses = AverageMeter()
        image_gradient_criterion = ImageGradientLoss().to(self.device)
        bce_criterion = nn.CrossEntropyLoss().to(self.device)

        for epoch in range(self.epoch, self.num_epoch):
            bce_losses.reset()
            image_gradient_losses.reset()
            ious = []
            for step, (image, gray_image, mask) in enumerate(self.data_loader):
                image = image.to(self.device)
                mask = mask.to(self.device)
                gray_image = gray_image.to(self.device)

                pred = self.net(image)

                pred_flat = pred.permute(0, 2, 3, 1).contiguous().view(-1, self.num_classes)
                mask_flat = mask.squeeze(1).view(-1).long()

                image_gradient_loss = image_gradient_criterion(pred, gray_image)
                bce_loss = bce_criterion(pred_flat, mask_flat)

                loss = bce_loss + self.gradient_loss_weight * image_gradient_loss

                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()

                bce_losses.update(bce_loss.item(), self.batch_size)
                image_gradient_losses.update(self.gradient_loss_weight * float(image_gradient_loss), self.batch_size)
                ious.append(iou_loss(pred, mask).item())

            print(f"Epoch: [{epoch}/{self.num_epoch}] | Bce Loss: {bce_losses.avg:.4f} | "
                  f"Image Gradient Loss: {image_gradient_losses.avg:.4f} | IOU: {np.mean(ious):.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser()
    parser.add_argument('--num_classes', type=int, default=2)
    parser.add_argument('--batch_size', type=int, default=8)
    parser.add_argument('--decay_batch_size', type=int, default=5000)
    parser.add_argument('--epoch', type=int, default=0)
    parser.add_argument('--num_epoch', type=int, default=8)
    parser.add_argument('--lr', type=float, default=1)
    parser.add_argument('--rho', type=float, default=0.95)
    parser.add_argument('--eps', type=float, default=1e-7)
    parser.add_argument('--decay', type=float, default=2e-5)
    parser.add_argument('--nf', type=int, default=4)
    parser.add_argument('--gradient_loss_weight', type=float, default=0.5)
    config = parser.parse_args()

    images, grays, masks = make_hair_dataset(64)
    dataset = torch.utils.data.TensorDataset(images, grays, masks)
    data_loader = torch.utils.data.DataLoader(dataset, batch_size=config.batch_size, shuffle=True)
    trainer = Trainer(config, data_loader)
    trainer.train()
