# Source: lhoyer/DAFormer, configs/_base_/datasets/uda_gta_to_cityscapes_512x512.py, mmseg/datasets/pipelines/transforms.py (RandomCrop), mmseg/datasets/uda_dataset.py, mmseg/models/uda/dacs.py, commit 21c5499f0ee1ea0ecd991003ba4598782d42ec04
# Report: https://github.com/lhoyer/DAFormer/issues/6
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

NUM_CLASSES = 4  # sky, building, road, car
crop_size = (32, 32)

# ---------------------------------------------------------------- config (as in the repo's base config)
gta_train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='Collect', keys=['img', 'gt_semantic_seg']),
]
cityscapes_train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='Collect', keys=['img', 'gt_semantic_seg']),
]


# ---------------------------------------------------------------- pipelines (mmseg)
class LoadImageFromFile:
    def __call__(self, results):
        results['img'] = results['img_info']['img'].copy()
        results['img_shape'] = results['img'].shape
        return results


class LoadAnnotations:
    def __call__(self, results):
        results['gt_semantic_seg'] = results['ann_info']['seg_map'].copy()
        results['seg_fields'] = ['gt_semantic_seg']
        return results


class RandomCrop(object):
    """Random crop the image & seg.

    Args:
        crop_size (tuple): Expected size after cropping, (h, w).
        cat_max_ratio (float): The maximum ratio that single category could
            occupy.
    """

    def __init__(self, crop_size, cat_max_ratio=1., ignore_index=255):
        assert crop_size[0] > 0 and crop_size[1] > 0
        self.crop_size = crop_size
        self.cat_max_ratio = cat_max_ratio
        self.ignore_index = ignore_index

    def get_crop_bbox(self, img):
        """Randomly get a crop bounding box."""
        margin_h = max(img.shape[0] - self.crop_size[0], 0)
        margin_w = max(img.shape[1] - self.crop_size[1], 0)
        offset_h = np.random.randint(0, margin_h + 1)
        offset_w = np.random.randint(0, margin_w + 1)
        crop_y1, crop_y2 = offset_h, offset_h + self.crop_size[0]
        crop_x1, crop_x2 = offset_w, offset_w + self.crop_size[1]
        return crop_y1, crop_y2, crop_x1, crop_x2

    def crop(self, img, crop_bbox):
        crop_y1, crop_y2, crop_x1, crop_x2 = crop_bbox
        img = img[crop_y1:crop_y2, crop_x1:crop_x2, ...]
        return img

    def __call__(self, results):
        img = results['img']
        crop_bbox = self.get_crop_bbox(img)
        if self.cat_max_ratio < 1.:
            # Repeat 10 times
            for _ in range(10):
                seg_temp = self.crop(results['gt_semantic_seg'], crop_bbox)
                labels, cnt = np.unique(seg_temp, return_counts=True)
                cnt = cnt[labels != self.ignore_index]
                if len(cnt) > 1 and np.max(cnt) / np.sum(
                        cnt) < self.cat_max_ratio:
                    break
                crop_bbox = self.get_crop_bbox(img)
        img = self.crop(img, crop_bbox)
        results['img'] = img
        results['img_shape'] = img.shape
        for key in results.get('seg_fields', []):
            results[key] = self.crop(results[key], crop_bbox)
        return results


class RandomFlip:
    def __init__(self, prob=None):
        self.prob = prob

    def __call__(self, results):
        if np.random.rand() < self.prob:
            results['img'] = results['img'][:, ::-1].copy()
            for key in results.get('seg_fields', []):
                results[key] = results[key][:, ::-1].copy()
        return results


class Collect:
    def __init__(self, keys):
        self.keys = keys

    def __call__(self, results):
        data = {'img_metas': {'img_shape': results['img_shape']}}
        data['img'] = torch.from_numpy(np.ascontiguousarray(results['img'].transpose(2, 0, 1))).float()
        data['gt_semantic_seg'] = torch.from_numpy(np.ascontiguousarray(results['gt_semantic_seg'])).long()[None]
        return data


PIPELINES = dict(LoadImageFromFile=LoadImageFromFile, LoadAnnotations=LoadAnnotations, RandomCrop=RandomCrop,
                 RandomFlip=RandomFlip, Collect=Collect)


class Compose:
    def __init__(self, transforms):
        self.transforms = []
        for t in transforms:
            t = dict(t)
            self.transforms.append(PIPELINES[t.pop('type')](**t))

    def __call__(self, data):
        for t in self.transforms:
            data = t(data)
        return data


# ---------------------------------------------------------------- datasets
def make_street_scenes(n, rng, domain):
    # 64x128 scenes: sky on top, buildings, road at the bottom, a few cars; the target domain
    # has another colour palette and more sky/road (as Cityscapes vs GTA)
    imgs, segs = [], []
    for _ in range(n):
        seg = np.zeros((64, 128), np.int64)
        horizon = rng.randint(18, 28) if domain == 'source' else rng.randint(26, 34)
        road = rng.randint(40, 48) if domain == 'source' else rng.randint(44, 52)
        seg[horizon:road] = 1
        seg[road:] = 2
        for _ in range(rng.randint(1, 4)):
            x = rng.randint(0, 110)
            seg[road - 6:road + 4, x:x + 16] = 3
        palette = np.array([[0.5, 0.7, 1.0], [0.6, 0.5, 0.4], [0.3, 0.3, 0.3], [0.9, 0.1, 0.1]])
        if domain == 'target':
            palette = palette[:, ::-1] * 0.8 + 0.1
        img = palette[seg] + rng.normal(0, 0.25, (64, 128, 3))
        imgs.append(img.astype(np.float32))
        segs.append(seg)
    return imgs, segs


class CustomDataset(Dataset):
    def __init__(self, imgs, segs, pipeline):
        self.imgs, self.segs = imgs, segs
        self.pipeline = Compose(pipeline)

    def __len__(self):
        return len(self.imgs)

    def __getitem__(self, idx):
        results = dict(img_info=dict(img=self.imgs[idx]), ann_info=dict(seg_map=self.segs[idx]))
        return self.pipeline(results)


class UDADataset(object):
    def __init__(self, source, target):
        self.source = source
        self.target = target

    def __getitem__(self, idx):
        s1 = self.source[idx // len(self.target)]
        s2 = self.target[idx % len(self.target)]
        return {
            **s1, 'target_img_metas': s2['img_metas'],
            'target_img': s2['img']
        }

    def __len__(self):
        return len(self.source) * len(self.target)


# ---------------------------------------------------------------- model and DACS self-training
class SegNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
                                  nn.ReLU(), nn.Conv2d(32, 32, 3, padding=2, dilation=2), nn.ReLU())
        self.head = nn.Conv2d(32, NUM_CLASSES, 1)

    def forward(self, x):
        return self.head(self.body(x))


class DACS:
    def __init__(self, model, alpha=0.99, pseudo_threshold=0.968):
        self.model = model
        self.ema_model = copy.deepcopy(model)
        for p in self.ema_model.parameters():
            p.requires_grad_(False)
        self.alpha = alpha
        self.pseudo_threshold = pseudo_threshold
        self.local_iter = 0

    def _update_ema(self, iter):
        alpha_teacher = min(1 - 1 / (iter + 1), self.alpha)
        for ema_param, param in zip(self.ema_model.parameters(), self.model.parameters()):
            ema_param.data.mul_(alpha_teacher).add_(param.data, alpha=1 - alpha_teacher)

    def train_step(self, data_batch, optimizer):
        img, gt_semantic_seg, target_img = data_batch['img'], data_batch['gt_semantic_seg'], data_batch['target_img']
        if self.local_iter > 0:
            self._update_ema(self.local_iter)
        optimizer.zero_grad()
        src_loss = F.cross_entropy(self.model(img), gt_semantic_seg[:, 0], ignore_index=255)
        with torch.no_grad():
            ema_softmax = torch.softmax(self.ema_model(target_img), dim=1)
            pseudo_prob, pseudo_label = torch.max(ema_softmax, dim=1)
            ps_large_p = pseudo_prob.ge(self.pseudo_threshold).long() == 1
            pseudo_weight = torch.sum(ps_large_p).item() / ps_large_p.numel()
        trg_loss = (F.cross_entropy(self.model(target_img), pseudo_label, reduction='none') * pseudo_weight).mean()
        (src_loss + trg_loss).backward()
        optimizer.step()
        self.local_iter += 1
        return src_loss.item(), trg_loss.item()


def miou(model, imgs, segs):
    model.eval()
    with torch.no_grad():
        x = torch.from_numpy(np.stack(imgs).transpose(0, 3, 1, 2)).float()
        pred = model(x).argmax(1).numpy()
    model.train()
    gt = np.stack(segs)
    ious = [((pred == c) & (gt == c)).sum() / max(((pred == c) | (gt == c)).sum(), 1) for c in range(NUM_CLASSES)]
    return float(np.mean(ious))


def dominant_share(seg):
    _, cnt = np.unique(seg, return_counts=True)
    return cnt.max() / cnt.sum()


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    src_imgs, src_segs = make_street_scenes(40, rng, 'source')
    trg_imgs, trg_segs = make_street_scenes(40, rng, 'target')
    val_imgs, val_segs = make_street_scenes(20, rng, 'target')

    source = CustomDataset(src_imgs, src_segs, gta_train_pipeline)
    target = CustomDataset(trg_imgs, trg_segs, cityscapes_train_pipeline)
    train_set = UDADataset(source, target)
    loader = DataLoader(train_set, batch_size=8, shuffle=True, num_workers=0)

    # what the target crops look like, measured with the target labels the method is not supposed to have
    shares = [dominant_share(target[i % len(target)]['gt_semantic_seg'].numpy()) for i in range(400)]
    print(f"target training crops: {np.mean(np.array(shares) > 0.75):.3f} have one class over 75% of the pixels "
          f"(mean largest-class share {np.mean(shares):.3f})")

    model = SegNet()
    uda = DACS(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for it, batch in enumerate(loader):
        src_loss, trg_loss = uda.train_step(batch, optimizer)
        if (it + 1) % 25 == 0:
            print(f"iter {it + 1}: source loss {src_loss:.3f} target pseudo-label loss {trg_loss:.3f} "
                  f"target val mIoU {miou(uda.ema_model, val_imgs, val_segs):.3f}")
        if it + 1 == 100:
            break


if __name__ == '__main__':
    main()
