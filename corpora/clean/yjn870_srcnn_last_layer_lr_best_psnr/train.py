# Source: yjn870/SRCNN-pytorch, train.py + models.py + utils.py, commit 064dbaac09859f5fa1b35608ab90145e2d60828b
# https://github.com/yjn870/SRCNN-pytorch
#
# SRCNN x3 on the Y channel: Adam with three parameter groups where conv3 (the reconstruction layer) gets
# lr * 0.1, MSE on 33x33 patches, eval PSNR on whole images with batch_size 1 under no_grad and clamp(0, 1),
# best weights kept as a deepcopy of state_dict; ReLU(inplace=True) shared by conv1 and conv2.
# Adaptation: the prepared h5 files (T91 / Set5) are replaced by synthetic smooth "images" (random
# Gaussian blobs and sinusoids in [0, 1]); the low-resolution input is made as in prepare.py (downscale
# by 3, bicubic upscale back) with F.interpolate instead of PIL; TrainDataset -> 33x33 patches (stride 14),
# EvalDataset -> four 48x48 images; num_epochs 400 -> 4; run with the script's --lr at 1e-3 (default 1e-4)
# so that a 4-epoch run moves; tqdm bar -> one print per epoch; no files written (torch.save removed).
import argparse
import copy

import torch
from torch import nn
import torch.nn.functional as F
import torch.optim as optim
import torch.backends.cudnn as cudnn
from torch.utils.data import TensorDataset
from torch.utils.data.dataloader import DataLoader


class SRCNN(nn.Module):
    def __init__(self, num_channels=1):
        super(SRCNN, self).__init__()
        self.conv1 = nn.Conv2d(num_channels, 64, kernel_size=9, padding=9 // 2)
        self.conv2 = nn.Conv2d(64, 32, kernel_size=5, padding=5 // 2)
        self.conv3 = nn.Conv2d(32, num_channels, kernel_size=5, padding=5 // 2)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.conv3(x)
        return x


def calc_psnr(img1, img2):
    return 10. * torch.log10(1. / torch.mean((img1 - img2) ** 2))


class AverageMeter(object):
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


def synthetic_images(n, size, g):
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing='ij')
    imgs = []
    for _ in range(n):
        img = torch.zeros(size, size)
        for _ in range(6):
            cy, cx, s, a = torch.rand(4, generator=g).tolist()
            img += (a - 0.3) * torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (0.01 + 0.05 * s))
        f1, f2, ph = (torch.rand(3, generator=g) * torch.tensor([20., 20., 6.28])).tolist()
        img += 0.15 * torch.sin(f1 * xx + f2 * yy + ph)
        img = (img - img.min()) / (img.max() - img.min() + 1e-8)
        imgs.append(img)
    return torch.stack(imgs).unsqueeze(1)


def degrade(hr, scale):
    # prepare.py: hr.resize(//scale, BICUBIC).resize(*scale, BICUBIC)
    lr = F.interpolate(hr, scale_factor=1 / scale, mode='bicubic', align_corners=False)
    return F.interpolate(lr, size=hr.shape[-2:], mode='bicubic', align_corners=False).clamp(0, 1)


def TrainDataset(scale, patch_size=33, stride=14):
    g = torch.Generator().manual_seed(1)
    hr = synthetic_images(30, 72, g)
    lr = degrade(hr, scale)
    lr_patches, hr_patches = [], []
    for i in range(0, 72 - patch_size + 1, stride):
        for j in range(0, 72 - patch_size + 1, stride):
            lr_patches.append(lr[:, :, i:i + patch_size, j:j + patch_size])
            hr_patches.append(hr[:, :, i:i + patch_size, j:j + patch_size])
    return TensorDataset(torch.cat(lr_patches), torch.cat(hr_patches))


def EvalDataset(scale):
    g = torch.Generator().manual_seed(2)
    hr = synthetic_images(4, 48, g)
    return TensorDataset(degrade(hr, scale), hr)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--scale', type=int, default=3)
    parser.add_argument('--lr', type=float, default=1e-4)
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--num-epochs', type=int, default=400)
    parser.add_argument('--num-workers', type=int, default=8)
    parser.add_argument('--seed', type=int, default=123)
    args = parser.parse_args(['--lr', '1e-3', '--num-epochs', '4', '--num-workers', '0'])

    cudnn.benchmark = True
    device = torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')

    torch.manual_seed(args.seed)

    model = SRCNN().to(device)
    criterion = nn.MSELoss()
    optimizer = optim.Adam([
        {'params': model.conv1.parameters()},
        {'params': model.conv2.parameters()},
        {'params': model.conv3.parameters(), 'lr': args.lr * 0.1}
    ], lr=args.lr)

    train_dataset = TrainDataset(args.scale)
    train_dataloader = DataLoader(dataset=train_dataset,
                                  batch_size=args.batch_size,
                                  shuffle=True,
                                  num_workers=args.num_workers,
                                  pin_memory=False,
                                  drop_last=True)
    eval_dataset = EvalDataset(args.scale)
    eval_dataloader = DataLoader(dataset=eval_dataset, batch_size=1)

    best_weights = copy.deepcopy(model.state_dict())
    best_epoch = 0
    best_psnr = 0.0

    for epoch in range(args.num_epochs):
        model.train()
        epoch_losses = AverageMeter()

        for data in train_dataloader:
            inputs, labels = data

            inputs = inputs.to(device)
            labels = labels.to(device)

            preds = model(inputs)

            loss = criterion(preds, labels)

            epoch_losses.update(loss.item(), len(inputs))

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        print('epoch: {}/{} loss={:.6f}'.format(epoch, args.num_epochs - 1, epoch_losses.avg))

        model.eval()
        epoch_psnr = AverageMeter()

        for data in eval_dataloader:
            inputs, labels = data

            inputs = inputs.to(device)
            labels = labels.to(device)

            with torch.no_grad():
                preds = model(inputs).clamp(0.0, 1.0)

            epoch_psnr.update(calc_psnr(preds, labels), len(inputs))

        print('eval psnr: {:.2f}'.format(epoch_psnr.avg))

        if epoch_psnr.avg > best_psnr:
            best_epoch = epoch
            best_psnr = epoch_psnr.avg
            best_weights = copy.deepcopy(model.state_dict())

    print('best epoch: {}, psnr: {:.2f}'.format(best_epoch, best_psnr))
    bicubic = AverageMeter()
    for inputs, labels in eval_dataloader:
        bicubic.update(calc_psnr(inputs, labels), len(inputs))
    print('bicubic psnr: {:.2f}'.format(bicubic.avg))


if __name__ == '__main__':
    main()
