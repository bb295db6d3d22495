# Source: zllrunning/face-parsing.PyTorch, transform.py (HorizontalFlip, RandomScale, RandomCrop, ColorJitter, Compose), face_dataset.py (FaceMask), loss.py (OhemCELoss), optimizer.py (Optimizer), train.py (train), commit d2e684cf1588b46145635e8fe7bcc29544e5537e
# Report: https://github.com/zllrunning/face-parsing.PyTorch/pull/26
# Face parsing (CelebAMask-HQ, 19 classes: skin, left/right brows, eyes, ears, nose, mouth,
# hair, ...) with PIL-based joint image/label augmentation (colour jitter, horizontal flip,
# random scale, random crop), three OHEM cross-entropy heads and an SGD warm-up + poly
# optimizer. BiSeNet is replaced by a small two-path conv net with the same three outputs;
# CelebAMask-HQ by synthetic 32x32 cartoon faces; torchvision's ToTensor/Normalize by numpy.
import logging
import random
import time

import numpy as np
import PIL.ImageEnhance as ImageEnhance
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader, Dataset

logging.basicConfig(level=logging.INFO, format='%(message)s')
logger = logging.getLogger()
random.seed(0)
np.random.seed(0)
torch.manual_seed(0)
torch.set_num_threads(1)


# ---------------------------------------------------------------- transform.py
class RandomCrop(object):
    def __init__(self, size, *args, **kwargs):
        self.size = size

    def __call__(self, im_lb):
        im = im_lb['im']
        lb = im_lb['lb']
        assert im.size == lb.size
        W, H = self.size
        w, h = im.size

        if (W, H) == (w, h): return dict(im=im, lb=lb)
        if w < W or h < H:
            scale = float(W) / w if w < h else float(H) / h
            w, h = int(scale * w + 1), int(scale * h + 1)
            im = im.resize((w, h), Image.BILINEAR)
            lb = lb.resize((w, h), Image.NEAREST)
        sw, sh = random.random() * (w - W), random.random() * (h - H)
        crop = int(sw), int(sh), int(sw) + W, int(sh) + H
        return dict(
                im = im.crop(crop),
                lb = lb.crop(crop)
                    )


class HorizontalFlip(object):
    def __init__(self, p=0.5, *args, **kwargs):
        self.p = p

    def __call__(self, im_lb):
        if random.random() > self.p:
            return im_lb
        else:
            im = im_lb['im']
            lb = im_lb['lb']

            # atts = [1 'skin', 2 'l_brow', 3 'r_brow', 4 'l_eye', 5 'r_eye', 6 'eye_g', 7 'l_ear', 8 'r_ear', 9 'ear_r',
            #         10 'nose', 11 'mouth', 12 'u_lip', 13 'l_lip', 14 'neck', 15 'neck_l', 16 'cloth', 17 'hair', 18 'hat']

            flip_lb = np.array(lb)
            flip_lb[lb == 2] = 3
            flip_lb[lb == 3] = 2
            flip_lb[lb == 4] = 5
            flip_lb[lb == 5] = 4
            flip_lb[lb == 7] = 8
            flip_lb[lb == 8] = 7
            flip_lb = Image.fromarray(flip_lb)
            return dict(im = im.transpose(Image.FLIP_LEFT_RIGHT),
                        lb = flip_lb.transpose(Image.FLIP_LEFT_RIGHT),
                    )


class RandomScale(object):
    def __init__(self, scales=(1, ), *args, **kwargs):
        self.scales = scales

    def __call__(self, im_lb):
        im = im_lb['im']
        lb = im_lb['lb']
        W, H = im.size
        scale = random.choice(self.scales)
        w, h = int(W * scale), int(H * scale)
        return dict(im = im.resize((w, h), Image.BILINEAR),
                    lb = lb.resize((w, h), Image.NEAREST),
                )


class ColorJitter(object):
    def __init__(self, brightness=None, contrast=None, saturation=None, *args, **kwargs):
        if not brightness is None and brightness>0:
            self.brightness = [max(1-brightness, 0), 1+brightness]
        if not contrast is None and contrast>0:
            self.contrast = [max(1-contrast, 0), 1+contrast]
        if not saturation is None and saturation>0:
            self.saturation = [max(1-saturation, 0), 1+saturation]

    def __call__(self, im_lb):
        im = im_lb['im']
        lb = im_lb['lb']
        r_brightness = random.uniform(self.brightness[0], self.brightness[1])
        r_contrast = random.uniform(self.contrast[0], self.contrast[1])
        r_saturation = random.uniform(self.saturation[0], self.saturation[1])
        im = ImageEnhance.Brightness(im).enhance(r_brightness)
        im = ImageEnhance.Contrast(im).enhance(r_contrast)
        im = ImageEnhance.Color(im).enhance(r_saturation)
        return dict(im = im,
                    lb = lb,
                )


class Compose(object):
    def __init__(self, do_list):
        self.do_list = do_list

    def __call__(self, im_lb):
        for comp in self.do_list:
            im_lb = comp(im_lb)
        return im_lb


# ---------------------------------------------------------------- synthetic CelebAMask-HQ
def make_face(rng, size=32):
    """A cartoon face; the person's left brow/eye/ear (labels 2, 4, 7) is on the image's right."""
    img = np.zeros((size, size, 3), np.float32) + rng.uniform(0.1, 0.9, 3)
    lb = np.zeros((size, size), np.uint8)
    yy, xx = np.mgrid[:size, :size]
    k = size / 48.
    cx, cy = size / 2 + rng.uniform(-2, 2), size / 2 + rng.uniform(-1.5, 1.5)
    skin = rng.uniform(0.5, 0.9, 3)
    hair = rng.uniform(0.0, 0.4, 3)
    face = ((xx - cx) / (13 * k)) ** 2 + ((yy - cy) / (16 * k)) ** 2 <= 1
    hair_m = (((xx - cx) / (15 * k)) ** 2 + ((yy - cy + 4 * k) / (18 * k)) ** 2 <= 1) & (yy < cy - 9 * k)
    img[hair_m] = hair; lb[hair_m] = 17
    img[face] = skin; lb[face] = 1
    for side, (brow, eye, ear) in ((+1, (2, 4, 7)), (-1, (3, 5, 8))):
        ex = cx + side * 6 * k
        ear_m = ((xx - (cx + side * 14 * k)) / 2) ** 2 + ((yy - cy) / (4 * k)) ** 2 <= 1
        img[ear_m] = skin * 0.9; lb[ear_m] = ear
        brow_m = (np.abs(xx - ex) <= 3 * k) & (np.abs(yy - (cy - 7 * k)) <= 0.6)
        img[brow_m] = hair; lb[brow_m] = brow
        eye_m = ((xx - ex) / 2) ** 2 + ((yy - (cy - 3 * k)) / 1.2) ** 2 <= 1
        img[eye_m] = (0.1, 0.1, 0.15); lb[eye_m] = eye
    nose_m = (np.abs(xx - cx) <= 1) & (yy >= cy - 2 * k) & (yy <= cy + 3 * k)
    img[nose_m] = skin * 0.75; lb[nose_m] = 10
    mouth_m = ((xx - cx) / (4.5 * k)) ** 2 + ((yy - (cy + 8 * k)) / 1.2) ** 2 <= 1
    img[mouth_m] = (0.7, 0.2, 0.25); lb[mouth_m] = 11
    img = np.clip(img + rng.normal(0, 0.03, img.shape), 0, 1)
    return Image.fromarray((img * 255).astype(np.uint8)), Image.fromarray(lb)


def to_tensor(img):
    x = np.asarray(img, np.float32) / 255.
    x = (x - np.array((0.485, 0.456, 0.406), np.float32)) / np.array((0.229, 0.224, 0.225), np.float32)
    return torch.from_numpy(x.transpose(2, 0, 1).copy())


# ---------------------------------------------------------------- face_dataset.py
class FaceMask(Dataset):
    def __init__(self, n, cropsize=(28, 28), mode='train', seed=0, *args, **kwargs):
        super(FaceMask, self).__init__(*args, **kwargs)
        assert mode in ('train', 'val', 'test')
        self.mode = mode
        self.ignore_lb = 255
        rng = np.random.RandomState(seed)
        self.imgs = [make_face(rng) for _ in range(n)]

        self.to_tensor = to_tensor
        self.trans_train = Compose([
            ColorJitter(
                brightness=0.5,
                contrast=0.5,
                saturation=0.5),
            HorizontalFlip(),
            RandomScale((0.75, 1.0, 1.25)),
            RandomCrop(cropsize)
            ])

    def __getitem__(self, idx):
        img, label = self.imgs[idx]
        if self.mode == 'train':
            im_lb = dict(im=img, lb=label)
            im_lb = self.trans_train(im_lb)
            img, label = im_lb['im'], im_lb['lb']
        img = self.to_tensor(img)
        label = np.array(label).astype(np.int64)[np.newaxis, :]
        return img, label

    def __len__(self):
        return len(self.imgs)


# ---------------------------------------------------------------- loss.py
class OhemCELoss(nn.Module):
    def __init__(self, thresh, n_min, ignore_lb=255, *args, **kwargs):
        super(OhemCELoss, self).__init__()
        self.thresh = -torch.log(torch.tensor(thresh, dtype=torch.float))
        self.n_min = n_min
        self.ignore_lb = ignore_lb
        self.criteria = nn.CrossEntropyLoss(ignore_index=ignore_lb, reduction='none')

    def forward(self, logits, labels):
        N, C, H, W = logits.size()
        loss = self.criteria(logits, labels).view(-1)
        loss, _ = torch.sort(loss, descending=True)
        if loss[self.n_min] > self.thresh:
            loss = loss[loss>self.thresh]
        else:
            loss = loss[:self.n_min]
        return torch.mean(loss)


# ---------------------------------------------------------------- model.py (reduced BiSeNet)
class ConvBNReLU(nn.Module):
    def __init__(self, in_chan, out_chan, ks=3, stride=1, padding=1):
        super(ConvBNReLU, self).__init__()
        self.conv = nn.Conv2d(in_chan, out_chan, kernel_size=ks, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_chan)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class BiSeNetOutput(nn.Module):
    def __init__(self, in_chan, mid_chan, n_classes):
        super(BiSeNetOutput, self).__init__()
        self.conv = ConvBNReLU(in_chan, mid_chan)
        self.conv_out = nn.Conv2d(mid_chan, n_classes, kernel_size=1, bias=False)

    def forward(self, x):
        return self.conv_out(self.conv(x))


class BiSeNet(nn.Module):
    def __init__(self, n_classes):
        super(BiSeNet, self).__init__()
        self.sp = nn.Sequential(ConvBNReLU(3, 12), ConvBNReLU(12, 12, stride=2))       # 1/2
        self.cp8 = nn.Sequential(ConvBNReLU(12, 24, stride=2), ConvBNReLU(24, 24))     # 1/4
        self.cp16 = nn.Sequential(ConvBNReLU(24, 32, stride=2), ConvBNReLU(32, 32))    # 1/8
        self.cp32 = nn.Sequential(ConvBNReLU(32, 48, stride=2), ConvBNReLU(48, 48))    # 1/16
        self.ffm = ConvBNReLU(12 + 24 + 32 + 48, 48, ks=1, padding=0)
        self.conv_out = BiSeNetOutput(48, 32, n_classes)
        self.conv_out16 = BiSeNetOutput(32, 24, n_classes)
        self.conv_out32 = BiSeNetOutput(48, 24, n_classes)

    def forward(self, x):
        H, W = x.size()[2:]
        sp = self.sp(x)
        f8 = self.cp8(sp)
        f16 = self.cp16(f8)
        f32 = self.cp32(f16)
        size = sp.size()[2:]
        fuse = torch.cat([sp, F.interpolate(f8, size, mode='nearest'), F.interpolate(f16, size, mode='nearest'),
                          F.interpolate(f32, size, mode='nearest')], dim=1)
        feat_out = self.conv_out(self.ffm(fuse))
        feat_out16 = self.conv_out16(f16)
        feat_out32 = self.conv_out32(f32)
        feat_out = F.interpolate(feat_out, (H, W), mode='bilinear', align_corners=True)
        feat_out16 = F.interpolate(feat_out16, (H, W), mode='bilinear', align_corners=True)
        feat_out32 = F.interpolate(feat_out32, (H, W), mode='bilinear', align_corners=True)
        return feat_out, feat_out16, feat_out32

    def get_params(self):
        wd_params, nowd_params, lr_mul_wd_params, lr_mul_nowd_params = [], [], [], []
        for name, child in self.named_children():
            child_wd_params, child_nowd_params = [], []
            for p in child.parameters():
                (child_wd_params if p.dim() == 4 else child_nowd_params).append(p)
            if 'out' in name:
                lr_mul_wd_params += child_wd_params
                lr_mul_nowd_params += child_nowd_params
            else:
                wd_params += child_wd_params
                nowd_params += child_nowd_params
        return wd_params, nowd_params, lr_mul_wd_params, lr_mul_nowd_params


# ---------------------------------------------------------------- optimizer.py
class Optimizer(object):
    def __init__(self, model, lr0, momentum, wd, warmup_steps, warmup_start_lr, max_iter, power, *args, **kwargs):
        self.warmup_steps = warmup_steps
        self.warmup_start_lr = warmup_start_lr
        self.lr0 = lr0
        self.lr = self.lr0
        self.max_iter = float(max_iter)
        self.power = power
        self.it = 0
        wd_params, nowd_params, lr_mul_wd_params, lr_mul_nowd_params = model.get_params()
        param_list = [
                {'params': wd_params},
                {'params': nowd_params, 'weight_decay': 0},
                {'params': lr_mul_wd_params, 'lr_mul': True},
                {'params': lr_mul_nowd_params, 'weight_decay': 0, 'lr_mul': True}]
        self.optim = torch.optim.SGD(param_list, lr=lr0, momentum=momentum, weight_decay=wd)
        self.warmup_factor = (self.lr0/self.warmup_start_lr)**(1./self.warmup_steps)

    def get_lr(self):
        if self.it <= self.warmup_steps:
            lr = self.warmup_start_lr*(self.warmup_factor**self.it)
        else:
            factor = (1-(self.it-self.warmup_steps)/(self.max_iter-self.warmup_steps))**self.power
            lr = self.lr0 * factor
        return lr

    def step(self):
        self.lr = self.get_lr()
        for pg in self.optim.param_groups:
            if pg.get('lr_mul', False):
                pg['lr'] = self.lr * 10
            else:
                pg['lr'] = self.lr
        self.it += 1
        self.optim.step()

    def zero_grad(self):
        self.optim.zero_grad()


# ---------------------------------------------------------------- evaluation on un-augmented faces
NAMES = {1: 'skin', 2: 'l_brow', 3: 'r_brow', 4: 'l_eye', 5: 'r_eye', 7: 'l_ear', 8: 'r_ear', 10: 'nose',
         11: 'mouth', 17: 'hair'}


@torch.no_grad()
def evaluate(net, ds):
    net.eval()
    inter, union = np.zeros(19), np.zeros(19)
    for img, lb in DataLoader(ds, batch_size=32):
        pred = net(img)[0].argmax(1).numpy()
        lb = lb[:, 0].numpy()
        for c in NAMES:
            inter[c] += np.sum((pred == c) & (lb == c))
            union[c] += np.sum((pred == c) | (lb == c))
    net.train()
    iou = {NAMES[c]: inter[c] / max(union[c], 1) for c in NAMES}
    return iou


# ---------------------------------------------------------------- train.py
def train():
    n_classes = 19
    n_img_per_gpu = 8
    cropsize = [28, 28]

    ds = FaceMask(256, cropsize=cropsize, mode='train', seed=0)
    dl = DataLoader(ds, batch_size=n_img_per_gpu, shuffle=True, num_workers=0, drop_last=True)
    ds_test = FaceMask(64, mode='test', seed=1)

    ignore_idx = -100
    net = BiSeNet(n_classes=n_classes)
    net.train()
    score_thres = 0.7
    n_min = n_img_per_gpu * cropsize[0] * cropsize[1]//16
    LossP = OhemCELoss(thresh=score_thres, n_min=n_min, ignore_lb=ignore_idx)
    Loss2 = OhemCELoss(thresh=score_thres, n_min=n_min, ignore_lb=ignore_idx)
    Loss3 = OhemCELoss(thresh=score_thres, n_min=n_min, ignore_lb=ignore_idx)

    momentum = 0.9
    weight_decay = 5e-4
    lr_start = 1e-2
    max_iter = 300
    power = 0.9
    warmup_steps = 20
    warmup_start_lr = 1e-5
    optim = Optimizer(model=net, lr0=lr_start, momentum=momentum, wd=weight_decay, warmup_steps=warmup_steps,
                      warmup_start_lr=warmup_start_lr, max_iter=max_iter, power=power)

    msg_iter = 150
    loss_avg = []
    diter = iter(dl)
    epoch = 0
    for it in range(max_iter):
        try:
            im, lb = next(diter)
            if not im.size()[0] == n_img_per_gpu:
                raise StopIteration
        except StopIteration:
            epoch += 1
            diter = iter(dl)
            im, lb = next(diter)
        lb = torch.squeeze(lb, 1)

        optim.zero_grad()
        out, out16, out32 = net(im)
        lossp = LossP(out, lb)
        loss2 = Loss2(out16, lb)
        loss3 = Loss3(out32, lb)
        loss = lossp + loss2 + loss3
        loss.backward()
        optim.step()

        loss_avg.append(loss.item())
        if (it+1) % msg_iter == 0:
            loss_avg = sum(loss_avg) / len(loss_avg)
            iou = evaluate(net, ds_test)
            logger.info('it: {}/{}, lr: {:.4f}, loss: {:.4f}, test mIoU {:.3f}'.format(
                it + 1, max_iter, optim.lr, loss_avg, np.mean(list(iou.values()))))
            loss_avg = []
    iou = evaluate(net, ds_test)
    logger.info('test IoU ' + ' '.join('{} {:.3f}'.format(k, v) for k, v in iou.items()))
    logger.info('test mIoU {:.3f}'.format(np.mean(list(iou.values()))))


if __name__ == "__main__":
    t0 = time.time()
    train()
    logger.info('done in {:.1f}s'.format(time.time() - t0))
