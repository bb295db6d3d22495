# Source: nikhilroxtomar/FANet, train.py, model.py, blocks.py, utils.py, loss.py, commit 65f21991550c51cc6fbd88d9a2c9f9de79dd6ed2
# Report: https://github.com/nikhilroxtomar/FANet/issues/1
# FANet (feedback attention network) for polyp segmentation: each sample is segmented with
# the mask predicted for it in the previous best epoch as a second input (run-length encoded,
# initialised by thresholding). Kvasir-SEG is replaced by synthetic 32x32 images with a
# bright textured ellipse, the encoder/decoder by two levels of width 8/16.
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader


def seeding(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rle_encode(x):
    dots = np.where(x.T.flatten() == 1)[0]
    run_lengths = []
    prev = -2
    for b in dots:
        if (b > prev+1): run_lengths.extend((b+1, 0))
        run_lengths[-1] += 1
        prev = b
    return run_lengths


def rle_decode(mask_rle, shape):
    s = mask_rle.split()
    starts, lengths = [np.asarray(x, dtype=int) for x in (s[0:][::2], s[1:][::2])]
    starts -= 1
    ends = starts + lengths
    img = np.zeros(shape[0]*shape[1], dtype=np.uint8)
    for lo, hi in zip(starts, ends):
        img[lo:hi] = 1
    return img.reshape(shape)


def init_mask(images, size):
    def threshold_mask(image):
        img = image.mean(0)
        pad = np.pad(img, 2, mode="edge")
        blur = sum(pad[dy:dy + img.shape[0], dx:dx + img.shape[1]] for dy in range(5) for dx in range(5)) / 25.0
        th = blur > blur.mean() + 0.5 * blur.std()
        return th.astype(np.int32)

    mask = []
    for image in images:
        m = threshold_mask(image)
        m = rle_encode(m)
        mask.append(m)
    return mask


def make_data(n, size, rng):
    yy, xx = np.mgrid[0:size[0], 0:size[1]]
    images = np.zeros((n, 3, size[0], size[1]), dtype=np.float32)
    masks = np.zeros((n, 1, size[0], size[1]), dtype=np.float32)
    for k in range(n):
        cy, cx = rng.uniform(8, 24, size=2)
        ry, rx = rng.uniform(4, 9, size=2)
        m = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
        masks[k, 0] = m
        base = rng.uniform(0.2, 0.4, size=(3, 1, 1))
        images[k] = base + 0.3 * m[None] + rng.normal(0, 0.15, size=(3, size[0], size[1]))
    return np.clip(images, 0, 1), masks


class DATASET(Dataset):
    def __init__(self, images, masks, size, transform=None):
        super().__init__()
        self.images = images
        self.masks = masks
        self.transform = transform
        self.n_samples = len(images)

    def __getitem__(self, index):
        image = self.images[index]
        mask = self.masks[index]
        if self.transform is not None:
            image, mask = self.transform(image, mask)
        return image.astype(np.float32), mask.astype(np.float32)

    def __len__(self):
        return self.n_samples


def transform(image, mask):
    if random.random() < 0.3:
        image, mask = image[:, :, ::-1], mask[:, :, ::-1]
    if random.random() < 0.3:
        image, mask = image[:, ::-1, :], mask[:, ::-1, :]
    return image.copy(), mask.copy()


class SELayer(nn.Module):
    def __init__(self, channel, reduction=16):
        super(SELayer, self).__init__()
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Sequential(
            nn.Linear(channel, channel // reduction, bias=False),
            nn.ReLU(inplace=True),
            nn.Linear(channel // reduction, channel, bias=False),
            nn.Sigmoid()
        )

    def forward(self, x):
        b, c, _, _ = x.size()
        y = self.avg_pool(x).view(b, c)
        y = self.fc(y).view(b, c, 1, 1)
        return x * y.expand_as(x)


class ResidualBlock(nn.Module):
    def __init__(self, in_c, out_c):
        super(ResidualBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_c, out_c, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(out_c)
        self.conv2 = nn.Conv2d(out_c, out_c, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_c)
        self.conv3 = nn.Conv2d(in_c, out_c, kernel_size=1, padding=0)
        self.bn3 = nn.BatchNorm2d(out_c)
        self.se = SELayer(out_c, out_c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        x1 = self.relu(self.bn1(self.conv1(x)))
        x2 = self.bn2(self.conv2(x1))
        x3 = self.se(self.bn3(self.conv3(x)))
        return self.relu(x2 + x3)


class MixPool(nn.Module):
    def __init__(self, in_c, out_c):
        super(MixPool, self).__init__()
        self.fmask = nn.Sequential(
            nn.Conv2d(in_c, out_c, kernel_size=3, padding=1),
            nn.BatchNorm2d(out_c),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_c, 1, kernel_size=1, padding=0),
            nn.Sigmoid()
        )
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_c, out_c//2, kernel_size=3, padding=1),
            nn.BatchNorm2d(out_c//2),
            nn.ReLU(inplace=True)
        )
        self.conv2 = nn.Sequential(
            nn.Conv2d(in_c, out_c//2, kernel_size=3, padding=1),
            nn.BatchNorm2d(out_c//2),
            nn.ReLU(inplace=True)
        )

    def forward(self, x, m):
        fmask = (self.fmask(x) > 0.5).float()
        m = nn.MaxPool2d((m.shape[2]//x.shape[2], m.shape[3]//x.shape[3]))(m)
        x1 = x * torch.logical_or(fmask, m).float()
        x1 = self.conv1(x1)
        x2 = self.conv2(x)
        return torch.cat([x1, x2], axis=1)


class EncoderBlock(nn.Module):
    def __init__(self, in_c, out_c):
        super(EncoderBlock, self).__init__()
        self.r1 = ResidualBlock(in_c, out_c)
        self.r2 = ResidualBlock(out_c, out_c)
        self.p1 = MixPool(out_c, out_c)
        self.pool = nn.MaxPool2d((2, 2))

    def forward(self, inputs, masks):
        x = self.r1(inputs)
        x = self.r2(x)
        p = self.p1(x, masks)
        return self.pool(p), x


class DecoderBlock(nn.Module):
    def __init__(self, in_c, out_c):
        super(DecoderBlock, self).__init__()
        self.upsample = nn.ConvTranspose2d(in_c, in_c, kernel_size=4, stride=2, padding=1)
        self.r1 = ResidualBlock(in_c+in_c, out_c)
        self.r2 = ResidualBlock(out_c, out_c)
        self.p1 = MixPool(out_c, out_c)

    def forward(self, inputs, skip, masks):
        x = self.upsample(inputs)
        x = torch.cat([x, skip], axis=1)
        x = self.r1(x)
        x = self.r2(x)
        return self.p1(x, masks)


class FANet(nn.Module):
    def __init__(self):
        super(FANet, self).__init__()
        self.e1 = EncoderBlock(3, 8)
        self.e2 = EncoderBlock(8, 16)
        self.d1 = DecoderBlock(16, 8)
        self.d2 = DecoderBlock(8, 8)
        self.output = nn.Conv2d(8+1, 1, kernel_size=1, padding=0)

    def forward(self, x):
        inputs, masks = x[0], x[1]
        p1, s1 = self.e1(inputs, masks)
        p2, s2 = self.e2(p1, masks)
        d1 = self.d1(p2, s2, masks)
        d2 = self.d2(d1, s1, masks)
        d3 = torch.cat([d2, masks], axis=1)
        return self.output(d3)


class DiceBCELoss(nn.Module):
    def forward(self, inputs, targets, smooth=1):
        inputs = torch.sigmoid(inputs)
        inputs = inputs.view(-1)
        targets = targets.view(-1)
        intersection = (inputs * targets).sum()
        dice_loss = 1 - (2.*intersection + smooth)/(inputs.sum() + targets.sum() + smooth)
        BCE = F.binary_cross_entropy(inputs, targets, reduction='mean')
        return (0.5 * BCE) + (0.5 * dice_loss)


def dice(a, b):
    return float((2 * (a * b).sum() + 1) / (a.sum() + b.sum() + 1))


def decode_batch(mask, i, b):
    m = []
    for edata in mask[i*b: i*b+b]:
        edata = " ".join(str(d) for d in edata)
        edata = str(edata)
        edata = rle_decode(edata, size)
        edata = np.expand_dims(edata, axis=0)
        m.append(edata)
    m = np.array(m, dtype=np.int32)
    m = np.transpose(m, (0, 1, 3, 2))
    return torch.from_numpy(m).to(dtype=torch.float32)


def train(model, loader, mask, optimizer, loss_fn):
    epoch_loss = 0
    prior_dice = []
    return_mask = []

    model.train()
    for i, (x, y) in enumerate(loader):
        b, c, h, w = y.shape
        m = decode_batch(mask, i, loader.batch_size)[:b]
        prior_dice.append(dice(m, y))

        optimizer.zero_grad()
        y_pred = model([x, m])
        loss = loss_fn(y_pred, y)
        loss.backward()
        optimizer.step()

        with torch.no_grad():
            y_pred = torch.sigmoid(y_pred).numpy()
            for py in y_pred:
                py = np.squeeze(py, axis=0)
                py = np.array(py > 0.5, dtype=np.uint8)
                return_mask.append(rle_encode(py))

        epoch_loss += loss.item()
    return epoch_loss/len(loader), return_mask, float(np.mean(prior_dice))


def evaluate(model, loader, mask, loss_fn):
    epoch_loss = 0
    scores = []
    return_mask = []

    model.eval()
    with torch.no_grad():
        for i, (x, y) in enumerate(loader):
            b, c, h, w = y.shape
            m = decode_batch(mask, i, loader.batch_size)[:b]
            y_pred = model([x, m])
            epoch_loss += loss_fn(y_pred, y).item()
            y_pred = torch.sigmoid(y_pred).numpy()
            scores.append(dice((y_pred > 0.5).astype(np.float32), y.numpy()))
            for py in y_pred:
                py = np.squeeze(py, axis=0)
                py = np.array(py > 0.5, dtype=np.uint8)
                return_mask.append(rle_encode(py))
    return epoch_loss/len(loader), return_mask, float(np.mean(scores))


size = (32, 32)

if __name__ == "__main__":
    seeding(42)
    batch_size = 4
    num_epochs = 10
    lr = 1e-3

    rng = np.random.RandomState(0)
    train_x, train_y = make_data(64, size, rng)
    valid_x, valid_y = make_data(16, size, rng)
    print(f"Dataset Size:\nTrain: {len(train_x)} - Valid: {len(valid_x)}")

    train_dataset = DATASET(train_x, train_y, size, transform=transform)
    valid_dataset = DATASET(valid_x, valid_y, size, transform=None)

    train_loader = DataLoader(
        dataset=train_dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=0
    )
    valid_loader = DataLoader(
        dataset=valid_dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=0
    )

    model = FANet()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, 'min', patience=5)
    loss_fn = DiceBCELoss()

    best_valid_loss = float('inf')
    train_mask = init_mask(train_x, size)
    valid_mask = init_mask(valid_x, size)

    for epoch in range(num_epochs):
        train_loss, return_train_mask, prior = train(model, train_loader, train_mask, optimizer, loss_fn)
        valid_loss, return_valid_mask, valid_dice = evaluate(model, valid_loader, valid_mask, loss_fn)
        scheduler.step(valid_loss)

        if valid_loss < best_valid_loss:
            best_valid_loss = valid_loss
            train_mask = return_train_mask
            valid_mask = return_valid_mask

        print(f'Epoch: {epoch+1:02} | Train Loss: {train_loss:.3f} (input-mask Dice {prior:.3f}) | '
              f'Val. Loss: {valid_loss:.3f} | Val. Dice: {valid_dice:.3f}')
