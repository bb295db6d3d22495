# Source: Media-Smart/vedadet, vedadet/datasets/builder.py (build_dataloader, worker_init_fn), vedadet/assembler/trainval.py, vedacore/loopers (EpochBasedLooper), commit 867df87a13915c6d2d9dc77e62b94fbf6df8d3e2
# Report: https://github.com/Media-Smart/vedadet/pull/45
# vedadet's training data path: build_dataloader() with a GroupSampler shuffled by numpy in the
# main process and a worker_init_fn that seeds numpy/random in each DataLoader worker from the
# configured seed; the dataset pipeline draws its random flip, photometric distortion and crop
# from np.random. The detector (TinaFace) is replaced by a small CNN classifier on synthetic 40x40
# images, the looper by a plain epoch loop; the pipeline returns its img_meta as mmdet-style
# pipelines do.
import random
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler


def set_random_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class GroupSampler(Sampler):
    def __init__(self, dataset, samples_per_gpu=1):
        self.dataset, self.samples_per_gpu = dataset, samples_per_gpu
        self.num_samples = len(dataset) // samples_per_gpu * samples_per_gpu

    def __iter__(self):
        indices = np.arange(len(self.dataset))
        np.random.shuffle(indices)
        return iter(indices[:self.num_samples].tolist())

    def __len__(self):
        return self.num_samples


class AugmentedDataset(Dataset):
    def __init__(self, n, seed, size=40, crop=32):
        rng = np.random.RandomState(seed)
        self.labels = rng.randint(0, 4, size=n)
        self.images = rng.normal(0, 0.3, size=(n, 3, size, size)).astype(np.float32)
        for k, c in enumerate(self.labels):
            y0, x0 = 6 + 14 * (c // 2), 6 + 14 * (c % 2)
            self.images[k, :, y0:y0 + 12, x0:x0 + 12] += 1.0
        self.crop = crop

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        img = self.images[idx].copy()
        # RandomFlip
        flip = np.random.rand() < 0.5
        if flip:
            img = img[:, :, ::-1]
        # PhotoMetricDistortion (brightness)
        delta = np.random.uniform(-0.3, 0.3)
        img = img + delta
        # RandomCrop
        oy, ox = np.random.randint(0, img.shape[1] - self.crop + 1, size=2)
        img = np.ascontiguousarray(img[:, oy:oy + self.crop, ox:ox + self.crop])
        label = self.labels[idx] if not flip else self.labels[idx] ^ 1
        info = torch.utils.data.get_worker_info()
        img_meta = dict(flip=flip, brightness=round(float(delta), 6), crop=(int(oy), int(ox)),
                        worker=info.id if info is not None else -1)
        return torch.from_numpy(img), int(label), img_meta


def collate(batch, samples_per_gpu=1):
    imgs = torch.stack([b[0] for b in batch])
    labels = torch.tensor([b[1] for b in batch])
    return imgs, labels, [b[2] for b in batch]


def worker_init_fn(worker_id, num_workers, rank, seed):
    # The seed of each worker equals to
    # num_worker * rank + worker_id + user_seed
    worker_seed = num_workers * rank + worker_id + seed
    np.random.seed(worker_seed)
    random.seed(worker_seed)


def build_dataloader(dataset, samples_per_gpu, workers_per_gpu, num_gpus=1, shuffle=True, seed=None):
    rank, world_size = 0, 1
    sampler = GroupSampler(dataset, samples_per_gpu) if shuffle else None
    batch_size = num_gpus * samples_per_gpu
    num_workers = num_gpus * workers_per_gpu

    init_fn = partial(
        worker_init_fn, num_workers=num_workers, rank=rank,
        seed=seed) if seed is not None else None

    data_loader = DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=partial(collate, samples_per_gpu=samples_per_gpu),
        pin_memory=False,
        worker_init_fn=init_fn)
    return data_loader


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32, 4)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.conv2(x))
        return self.fc(F.adaptive_max_pool2d(x, 1).flatten(1))


def main():
    cfg = dict(seed=0, samples_per_gpu=16, workers_per_gpu=2, max_epochs=4)
    set_random_seed(cfg['seed'])
    dataset = AugmentedDataset(256, seed=1)
    train_dataloader = build_dataloader(dataset, cfg['samples_per_gpu'], cfg['workers_per_gpu'], seed=cfg['seed'])
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first_epoch_draws = None
    for epoch in range(cfg['max_epochs']):
        model.train()
        losses, draws, order = [], {}, []
        for imgs, labels, img_metas in train_dataloader:
            loss = F.cross_entropy(model(imgs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            for meta in img_metas:
                draws.setdefault(meta['worker'], []).append((meta['flip'], meta['brightness'], meta['crop']))
            order.extend(labels.tolist())
        if first_epoch_draws is None:
            first_epoch_draws = draws
        same = sum(a == b for w in draws for a, b in zip(draws[w], first_epoch_draws[w]))
        total = sum(len(v) for v in draws.values())
        print(f"epoch {epoch}: loss {np.mean(losses):.4f}, augmentation draws identical to epoch 0: "
              f"{same}/{total}, first draws of worker 0: {draws[0][:2]}")


if __name__ == "__main__":
    main()
