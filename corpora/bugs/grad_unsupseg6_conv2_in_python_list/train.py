# Source: kanezaki/pytorch-unsupervised-segmentation, demo.py, commit 919f1d2f1617662a461bbb6ed952110c38e988f9
# Report: https://github.com/kanezaki/pytorch-unsupervised-segmentation/pull/6
# Unsupervised image segmentation by backpropagation (Kanezaki 2018): a small CNN predicts a
# label per pixel, the argmax labels are refined by majority vote inside superpixels and used
# as the cross-entropy target; iterate until few labels remain. The input image is a synthetic
# 48x48 picture of coloured regions with noise, SLIC (scikit-image) is replaced by a grid of
# 4x4 superpixels, OpenCV display / saving are removed, nChannel 100 -> 32, nConv 2 -> 3.
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable
import torch.nn.init

use_cuda = False

parser = argparse.ArgumentParser(description='PyTorch Unsupervised Segmentation')
parser.add_argument('--nChannel', metavar='N', default=32, type=int, help='number of channels')
parser.add_argument('--maxIter', metavar='T', default=150, type=int, help='number of maximum iterations')
parser.add_argument('--minLabels', metavar='minL', default=3, type=int, help='minimum number of labels')
parser.add_argument('--lr', metavar='LR', default=0.1, type=float, help='learning rate')
parser.add_argument('--nConv', metavar='M', default=3, type=int, help='number of convolutional layers')
args = parser.parse_args([])


# CNN model
class MyNet(nn.Module):
    def __init__(self, input_dim):
        super(MyNet, self).__init__()
        self.conv1 = nn.Conv2d(input_dim, args.nChannel, kernel_size=3, stride=1, padding=1)
        self.bn1 = nn.BatchNorm2d(args.nChannel)
        self.conv2 = []
        self.bn2 = []
        for i in range(args.nConv - 1):
            self.conv2.append(nn.Conv2d(args.nChannel, args.nChannel, kernel_size=3, stride=1, padding=1))
            self.bn2.append(nn.BatchNorm2d(args.nChannel))
        self.conv3 = nn.Conv2d(args.nChannel, args.nChannel, kernel_size=1, stride=1, padding=0)
        self.bn3 = nn.BatchNorm2d(args.nChannel)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.bn1(x)
        for i in range(args.nConv - 1):
            x = self.conv2[i](x)
            x = F.relu(x)
            x = self.bn2[i](x)
        x = self.conv3(x)
        x = self.bn3(x)
        return x


def make_image(rng, size=48):
    yy, xx = np.mgrid[0:size, 0:size]
    im = np.zeros((size, size, 3), dtype=np.float32)
    im[:] = (40, 120, 200)
    im[(yy - 14) ** 2 + (xx - 30) ** 2 < 100] = (220, 60, 50)
    im[yy > 0.6 * xx + 28] = (60, 180, 70)
    im[(abs(yy - 36) < 6) & (abs(xx - 12) < 9)] = (230, 220, 90)
    im += rng.normal(0, 12, size=im.shape)
    return np.clip(im, 0, 255).astype(np.uint8)


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    # load image
    im = make_image(rng)
    data = torch.from_numpy(np.array([im.transpose((2, 0, 1)).astype('float32') / 255.]))
    data = Variable(data)

    # superpixels (grid instead of slic)
    yy, xx = np.mgrid[0:im.shape[0], 0:im.shape[1]]
    labels = (yy // 4) * (im.shape[1] // 4) + (xx // 4)
    labels = labels.reshape(im.shape[0] * im.shape[1])
    u_labels = np.unique(labels)
    l_inds = []
    for i in range(len(u_labels)):
        l_inds.append(np.where(labels == u_labels[i])[0])

    # train
    model = MyNet(data.size(1))
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for batch_idx in range(args.maxIter):
        # forwarding
        optimizer.zero_grad()
        output = model(data)[0]
        output = output.permute(1, 2, 0).contiguous().view(-1, args.nChannel)
        ignore, target = torch.max(output, 1)
        im_target = target.data.cpu().numpy()
        nLabels = len(np.unique(im_target))

        # superpixel refinement
        for i in range(len(l_inds)):
            labels_per_sp = im_target[l_inds[i]]
            u_labels_per_sp = np.unique(labels_per_sp)
            hist = np.zeros(len(u_labels_per_sp))
            for j in range(len(hist)):
                hist[j] = len(np.where(labels_per_sp == u_labels_per_sp[j])[0])
            im_target[l_inds[i]] = u_labels_per_sp[np.argmax(hist)]
        target = torch.from_numpy(im_target)
        target = Variable(target)
        loss = loss_fn(output, target)
        loss.backward()
        optimizer.step()

        if batch_idx % 10 == 0:
            print(batch_idx, '/', args.maxIter, ':', nLabels, round(loss.item(), 4))
        if nLabels <= args.minLabels:
            print("nLabels", nLabels, "reached minLabels", args.minLabels, ".")
            break

    output = model(data)[0]
    output = output.permute(1, 2, 0).contiguous().view(-1, args.nChannel)
    ignore, target = torch.max(output, 1)
    print("final iteration", batch_idx, "labels", len(np.unique(target.numpy())), "loss", round(loss.item(), 4))


if __name__ == "__main__":
    main()
