# Source: ivadomed/ivadomed, ivadomed/main.py (cmd_train), ivadomed/models.py (Unet), ivadomed/losses.py, commit 034b7d4eb8bdd090a0c2d687ee0bad2a38f51ba4
# Report: https://github.com/ivadomed/ivadomed/pull/55
# ivadomed cmd_train: U-Net with sigmoid output, Adam with cosine annealing over num_epochs,
# dice loss, training loop and validation loop with dice score. The medicaltorch BIDS loaders
# are replaced by synthetic 2D slices with a bright ellipse as ground truth, the U-Net
# widths are reduced (8/16/32), tensorboard writing and FiLM / mixup branches are removed.
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.nn import Module
from torch.utils.data import DataLoader, TensorDataset


def dice_loss(input, target):
    # input = torch.sigmoid(input)
    smooth = 1.0

    iflat = input.view(-1)
    tflat = target.view(-1)
    intersection = (iflat * tflat).sum()

    return ((2.0 * intersection + smooth) / (iflat.sum() + tflat.sum() + smooth))


class DownConv(Module):
    def __init__(self, in_feat, out_feat, drop_rate=0.4, bn_momentum=0.1):
        super(DownConv, self).__init__()
        self.conv1 = nn.Conv2d(in_feat, out_feat, kernel_size=3, padding=1)
        self.conv1_bn = nn.BatchNorm2d(out_feat, momentum=bn_momentum)
        self.conv1_drop = nn.Dropout2d(drop_rate)

        self.conv2 = nn.Conv2d(out_feat, out_feat, kernel_size=3, padding=1)
        self.conv2_bn = nn.BatchNorm2d(out_feat, momentum=bn_momentum)
        self.conv2_drop = nn.Dropout2d(drop_rate)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = self.conv1_bn(x)
        x = self.conv1_drop(x)

        x = F.relu(self.conv2(x))
        x = self.conv2_bn(x)
        x = self.conv2_drop(x)
        return x


class UpConv(Module):
    def __init__(self, in_feat, out_feat, drop_rate=0.4, bn_momentum=0.1):
        super(UpConv, self).__init__()
        self.downconv = DownConv(in_feat, out_feat, drop_rate, bn_momentum)

    def forward(self, x, y):
        x = F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=True)
        x = torch.cat([x, y], dim=1)
        x = self.downconv(x)
        return x


class Unet(Module):
    """A reference U-Net model."""
    def __init__(self, drop_rate=0.4, bn_momentum=0.1):
        super(Unet, self).__init__()

        #Downsampling path
        self.conv1 = DownConv(1, 8, drop_rate, bn_momentum)
        self.mp1 = nn.MaxPool2d(2)

        self.conv2 = DownConv(8, 16, drop_rate, bn_momentum)
        self.mp2 = nn.MaxPool2d(2)

        self.conv3 = DownConv(16, 32, drop_rate, bn_momentum)
        self.mp3 = nn.MaxPool2d(2)

        # Bottom
        self.conv4 = DownConv(32, 32, drop_rate, bn_momentum)

        # Upsampling path
        self.up1 = UpConv(64, 32, drop_rate, bn_momentum)
        self.up2 = UpConv(48, 16, drop_rate, bn_momentum)
        self.up3 = UpConv(24, 8, drop_rate, bn_momentum)

        self.conv9 = nn.Conv2d(8, 1, kernel_size=3, padding=1)

    def forward(self, x):
        x1 = self.conv1(x)
        x2 = self.mp1(x1)

        x3 = self.conv2(x2)
        x4 = self.mp2(x3)

        x5 = self.conv3(x4)
        x6 = self.mp3(x5)

        # Bottom
        x7 = self.conv4(x6)

        # Up-sampling
        x8 = self.up1(x7, x5)
        x9 = self.up2(x8, x3)
        x10 = self.up3(x9, x1)

        x11 = self.conv9(x10)
        preds = torch.sigmoid(x11)

        return preds


def make_slices(n, rng):
    yy, xx = np.mgrid[0:32, 0:32]
    imgs = np.zeros((n, 1, 32, 32), dtype=np.float32)
    gts = np.zeros((n, 1, 32, 32), dtype=np.float32)
    for k in range(n):
        cy, cx = rng.uniform(10, 22, size=2)
        ry, rx = rng.uniform(3, 7, size=2)
        mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
        gts[k, 0] = mask
        imgs[k, 0] = 0.6 * mask + rng.normal(0, 0.3, size=(32, 32))
    return torch.from_numpy(imgs), torch.from_numpy(gts)


def threshold_predictions(predictions, thr=0.5):
    thresholded_preds = predictions[:]
    low_values_indices = thresholded_preds < thr
    thresholded_preds[low_values_indices] = 0
    low_values_indices = thresholded_preds >= thr
    thresholded_preds[low_values_indices] = 1
    return thresholded_preds


def cmd_train(context):
    torch.manual_seed(context["seed"])
    rng = np.random.RandomState(context["seed"])
    train_loader = DataLoader(TensorDataset(*make_slices(160, rng)), batch_size=context["batch_size"],
                              shuffle=True)
    val_loader = DataLoader(TensorDataset(*make_slices(48, rng)), batch_size=context["batch_size"],
                            shuffle=False)

    # Traditional U-Net model
    model = Unet(drop_rate=context["dropout_rate"],
                 bn_momentum=context["batch_norm_momentum"])

    num_epochs = context["num_epochs"]
    initial_lr = context["initial_lr"]

    # Using Adam with cosine annealing learning rate
    optimizer = optim.Adam(model.parameters(), lr=initial_lr)
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, num_epochs)

    # Training loop -----------------------------------------------------------
    best_validation_loss = float("inf")
    for epoch in range(1, num_epochs+1):
        start_time = time.time()

        lr = scheduler.get_last_lr()[0]
        lrs = []

        model.train()
        train_loss_total = 0.0
        num_steps = 0
        for i, (input_samples, gt_samples) in enumerate(train_loader):
            var_input = input_samples
            var_gt = gt_samples

            preds = model(var_input)

            loss = - dice_loss(preds, var_gt)
            train_loss_total += loss.item()

            optimizer.zero_grad()
            loss.backward()

            optimizer.step()
            scheduler.step()
            num_steps += 1
            lrs.append(optimizer.param_groups[0]["lr"])

        train_loss_total_avg = train_loss_total / num_steps

        print(f"Epoch {epoch} training loss: {train_loss_total_avg:.4f}. lr at start {lr:.2e}, "
              f"during epoch min {min(lrs):.2e} max {max(lrs):.2e}")

        # Validation loop -----------------------------------------------------
        model.eval()
        val_loss_total = 0.0
        dice_scores = []
        num_steps = 0
        for i, (input_samples, gt_samples) in enumerate(val_loader):
            with torch.no_grad():
                preds = model(input_samples)
                loss = - dice_loss(preds, gt_samples)
                val_loss_total += loss.item()

            preds_npy = threshold_predictions(preds.numpy().copy())
            gt_npy = gt_samples.numpy()
            inter = (preds_npy * gt_npy).sum()
            dice_scores.append(2.0 * inter / (preds_npy.sum() + gt_npy.sum() + 1e-8))
            num_steps += 1

        val_loss_total_avg = val_loss_total / num_steps
        print(f"\tValidation loss: {val_loss_total_avg:.4f}. Dice score: {np.mean(dice_scores):.4f}. "
              f"({time.time() - start_time:.1f}s)")
        if val_loss_total_avg < best_validation_loss:
            best_validation_loss = val_loss_total_avg


def main():
    context = {"seed": 0, "batch_size": 16, "dropout_rate": 0.3, "batch_norm_momentum": 0.1,
               "num_epochs": 8, "initial_lr": 0.01}
    cmd_train(context)


if __name__ == "__main__":
    main()
