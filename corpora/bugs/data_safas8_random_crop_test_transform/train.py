# Source: sunyiyou/SAFAS, train.py (main: transforms, training loop, test phase), utils/performance.py (performances_val), datasets/supcon_dataset.py (FaceDataset), commit 72436d496d40c826dc1dc3b5e3c3bb2d6e1deb44
# Report: https://github.com/sunyiyou/SAFAS/issues/8
# SAFAS face anti-spoofing: a CNN scores live vs spoof faces, trained with BCE on two
# augmented views per image (SGD + StepLR); every eval_preq epochs the test protocol is
# scored with AUC / HTER and the best epoch is kept. The ResNet is reduced to a small
# CNN, the OULU/CASIA/MSU/Idiap face crops are synthetic 36x36 images (spoof = a printed
# photo: a bright frame at the border and faint moire stripes), the SupCon term, weight
# alignment, checkpoint files and score files are dropped. torchvision is not available, so
# the few transforms used are written out below with torchvision's semantics.
import math
import os
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.metrics import roc_curve, auc
from torch.utils.data import DataLoader, Dataset


class _Compose:
    def __init__(self, ts):
        self.ts = ts

    def __call__(self, x):
        for t in self.ts:
            x = t(x)
        return x


class _RandomResizedCrop:
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3. / 4., 4. / 3.)):
        self.size, self.scale, self.ratio = size, scale, ratio

    def __call__(self, img):
        h, w = img.shape[:2]
        area = h * w * float(torch.empty(1).uniform_(self.scale[0], self.scale[1]))
        ar = math.exp(float(torch.empty(1).uniform_(math.log(self.ratio[0]), math.log(self.ratio[1]))))
        cw = min(w, int(round(math.sqrt(area * ar))))
        ch = min(h, int(round(math.sqrt(area / ar))))
        i = int(torch.randint(0, h - ch + 1, (1,)))
        j = int(torch.randint(0, w - cw + 1, (1,)))
        crop = torch.from_numpy(np.ascontiguousarray(img[i:i + ch, j:j + cw])).permute(2, 0, 1)[None]
        return F.interpolate(crop, size=(self.size, self.size), mode='bilinear', align_corners=False)[0].permute(1, 2, 0).numpy()


class _Resize:
    def __init__(self, size):
        self.size = size

    def __call__(self, img):
        t = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)[None]
        return F.interpolate(t, size=(self.size, self.size), mode='bilinear', align_corners=False)[0].permute(1, 2, 0).numpy()


class _RandomHorizontalFlip:
    def __call__(self, img):
        return img[:, ::-1] if float(torch.rand(1)) < 0.5 else img


class _ToTensor:
    def __call__(self, img):
        return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float()


class _Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = torch.tensor(mean).view(3, 1, 1), torch.tensor(std).view(3, 1, 1)

    def __call__(self, x):
        return (x - self.mean) / self.std


transforms = types.SimpleNamespace(Compose=_Compose, RandomResizedCrop=_RandomResizedCrop, Resize=_Resize,
                                   RandomHorizontalFlip=_RandomHorizontalFlip, ToTensor=_ToTensor, Normalize=_Normalize)


class FaceDataset(Dataset):
    def __init__(self, images, labels, UUID, split='train', transform=None):
        self.images, self.labels, self.UUID = images, labels, UUID
        self.split = split
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        image_x = self.images[idx]
        if self.split == 'train':
            image_x_view1 = self.transform(image_x)
            image_x_view2 = self.transform(image_x)
        else:
            image_x_view1 = self.transform(image_x)
            image_x_view2 = image_x_view1
        sample = {"image_x_v1": image_x_view1, "image_x_v2": image_x_view2,
                  "label": self.labels[idx], "UUID": self.UUID}
        return sample


def make_faces(n, rng):
    yy, xx = np.mgrid[0:36, 0:36]
    imgs = np.zeros((n, 36, 36, 3), dtype=np.float32)
    labels = np.zeros(n, dtype=np.int64)
    for k in range(n):
        live = k % 2
        face = np.exp(-(((yy - 18) / rng.uniform(9, 12)) ** 2 + ((xx - 18) / rng.uniform(7, 10)) ** 2))
        img = 0.3 + 0.4 * face[..., None] * rng.uniform(0.6, 1.0, size=3) + rng.normal(0, 0.08, size=(36, 36, 3))
        if not live:
            side = rng.integers(4)
            b = 2
            sl = [(slice(0, b), slice(None)), (slice(-b, None), slice(None)), (slice(None), slice(0, b)), (slice(None), slice(-b, None))][side]
            img[sl] += 0.35
            img += 0.02 * np.sin(xx * 2.1 + yy * 0.7)[..., None]
        imgs[k] = np.clip(img, 0, 1)
        labels[k] = live
    return imgs, labels


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveMaxPool2d(1), nn.Flatten())
        self.fc = nn.Linear(32, 1)

    def forward(self, x, out_type='all', scale=1.0):
        penul_feat = self.features(x)
        logit = self.fc(penul_feat) * scale
        if out_type == 'feat':
            return penul_feat, scale
        return penul_feat, penul_feat, logit


def performances_val(lines, fpr_rate=0.05):
    val_scores, val_labels = [], []
    for line in lines:
        tokens = line.split()
        val_scores.append(float(tokens[0]))
        val_labels.append(float(tokens[1]))
    fpr, tpr, threshold = roc_curve(val_labels, val_scores, pos_label=1, drop_intermediate=False)
    auc_test = auc(fpr, tpr)
    right_index = np.argmin(np.abs(tpr + fpr - 1.0))
    FRR = 1 - tpr
    HTER = (fpr + FRR) / 2.0
    return HTER[right_index], auc_test


def test_phase(model, test_loader, args):
    model.eval()
    with torch.no_grad():
        scores_list = []
        for i, sample_batched in enumerate(test_loader):
            image_x, live_label = sample_batched["image_x_v1"], sample_batched["label"]
            _, penul_feat, logit = model(image_x, out_type='all', scale=args.scale)
            for i in range(len(logit)):
                scores_list.append("{} {}\n".format(logit.squeeze()[i].item(), live_label[i].item()))
    return performances_val(scores_list)


def main(args):
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    normalizer = transforms.Normalize(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])

    train_transform_list = [
        transforms.RandomResizedCrop(32, scale=(args.train_scale_min, 1.), ratio=(1., 1.)),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        normalizer
    ]
    train_transform = transforms.Compose(train_transform_list)

    test_transform = transforms.Compose([
        transforms.RandomResizedCrop(32, scale=(args.test_scale, args.test_scale), ratio=(1., 1.)),
        transforms.ToTensor(),
        normalizer
    ])

    tr_x, tr_y = make_faces(256, rng)
    te_x, te_y = make_faces(200, rng)
    train_set = FaceDataset(tr_x, tr_y, 0, split='train', transform=train_transform)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=0)
    test_set = FaceDataset(te_x, te_y, 1, split='test', transform=test_transform)
    test_loader = DataLoader(test_set, batch_size=args.batch_size, shuffle=False, num_workers=0)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.base_lr, momentum=args.momentum, weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.step_size, gamma=args.gamma)
    ce_loss = nn.BCELoss()
    eva = {"best_epoch": -1, "best_HTER": 100, "best_auc": -100}

    for epoch in range(args.num_epochs):
        model.train()
        loss_sum, n = 0.0, 0
        for i, sample_batched in enumerate(train_loader):
            image_x_v1, image_x_v2, label = sample_batched["image_x_v1"], sample_batched["image_x_v2"], sample_batched["label"]
            image_x = torch.cat([image_x_v1, image_x_v2])
            feat, scale = model(image_x, out_type='feat', scale=args.scale)
            label2 = torch.cat([label, label])
            logit = model.fc(feat) * scale
            cls_loss = ce_loss(torch.sigmoid(logit.squeeze(1)), label2.float())
            model.zero_grad()
            cls_loss.backward()
            optimizer.step()
            loss_sum += cls_loss.item() * len(label2)
            n += len(label2)
        lr = optimizer.param_groups[0]['lr']
        scheduler.step()

        if epoch % args.eval_preq == args.eval_preq - 1:
            HTER, auc_test = test_phase(model, test_loader, args)
            HTER_again, auc_again = test_phase(model, test_loader, args)
            print("epoch:{:d}, Train: lr={:f}, Loss={:.4f} | test: HTER={:.4f}, AUC={:.4f} | same weights scored again: HTER={:.4f}, AUC={:.4f}".format(
                epoch + 1, lr, loss_sum / n, HTER, auc_test, HTER_again, auc_again))
            if auc_test - HTER >= eva["best_auc"] - eva["best_HTER"]:
                eva["best_auc"] = auc_test
                eva["best_HTER"] = HTER
                eva["best_epoch"] = epoch + 1
    print("[Best result] epoch:{}, HTER={:.4f}, AUC={:.4f}".format(eva["best_epoch"], eva["best_HTER"], eva["best_auc"]))


if __name__ == "__main__":
    args = types.SimpleNamespace(seed=0, batch_size=32, base_lr=0.01, momentum=0.9, weight_decay=5e-4, step_size=4, gamma=0.5,
                                 num_epochs=8, eval_preq=1, scale=1.0, train_scale_min=0.2, test_scale=0.9)
    main(args)
