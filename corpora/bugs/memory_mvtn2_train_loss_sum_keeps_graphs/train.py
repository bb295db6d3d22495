# Source: ajhamdi/MVTN, run_mvtn.py (train, evluate, main mvcnn loop), models/mvtn.py, models/renderer.py, commit bd90fbf16ce42c7dc7ae64e1da6a4ea76118d5a2
# Report: https://github.com/ajhamdi/MVTN/issues/2
# MVTN: a multi-view transformation network regresses per-view azimuth/elevation offsets from the
# point cloud, a differentiable renderer produces the views and an MVCNN classifies them; MVTN and
# MVCNN are trained jointly with two AdamW optimizers. PyTorch3D's renderer is replaced by a small
# soft point splatting renderer in plain torch, ModelNet40 by synthetic point clouds of 4 shape
# classes, the ResNet MVCNN by a small CNN with max view pooling.
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable

setup = {"nb_views": 4, "image_size": 16, "batch_size": 16, "epochs": 3, "learning_rate": 3e-3, "weight_decay": 0.01,
         "mvtn_learning_rate": 1e-4, "mvtn_weight_decay": 0.01, "is_learning_views": True, "print_freq": 4,
         "clip_grads": True, "mvtn_clip_grads_value": 30.0, "best_acc": 0.0}


def make_cloud(label, rng, n=96):
    u = rng.uniform(-1, 1, size=(n, 3))
    if label == 0:
        p = u / np.linalg.norm(u, axis=1, keepdims=True)
    elif label == 1:
        p = u.copy()
        ax = rng.randint(0, 3, size=n)
        p[np.arange(n), ax] = np.sign(p[np.arange(n), ax])
    elif label == 2:
        th = rng.uniform(0, 2 * np.pi, n)
        p = np.stack([np.cos(th), np.sin(th), u[:, 2]], 1)
    else:
        h = rng.uniform(0, 1, n)
        th = rng.uniform(0, 2 * np.pi, n)
        p = np.stack([(1 - h) * np.cos(th), (1 - h) * np.sin(th), 2 * h - 1], 1)
    p = p * rng.uniform(0.7, 1.0) + 0.02 * rng.randn(n, 3)
    return p.astype(np.float32)


class CloudDataset(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        rng = np.random.RandomState(seed)
        self.labels = rng.randint(0, 4, size=n)
        self.points = [make_cloud(int(c), rng) for c in self.labels]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return int(self.labels[i]), torch.from_numpy(self.points[i])


class MVTN(nn.Module):
    def __init__(self, nb_views=4):
        super().__init__()
        self.nb_views = nb_views
        self.point_encoder = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 128), nn.ReLU())
        self.view_transformer = nn.Sequential(nn.Linear(128 + 2 * nb_views, 64), nn.ReLU(), nn.Linear(64, 2 * nb_views),
                                              nn.Tanh())
        self.register_buffer("views_azim", torch.linspace(0, 360, nb_views + 1)[:-1])
        self.register_buffer("views_elev", torch.full((nb_views,), 30.0))

    def forward(self, points, c_batch_size=1):
        feat = self.point_encoder(points).max(dim=1)[0]
        canonical = torch.cat([self.views_azim, self.views_elev]).unsqueeze(0).expand(c_batch_size, -1) / 180.0
        adjust = self.view_transformer(torch.cat([feat, canonical], dim=1))
        azim = self.views_azim + 180.0 / self.nb_views * adjust[:, :self.nb_views]
        elev = self.views_elev + 90.0 * adjust[:, self.nb_views:]
        dist = torch.full_like(azim, 2.0)
        return azim, elev, dist


class MVRenderer(nn.Module):
    def __init__(self, nb_views=4, image_size=16, points_radius=0.1):
        super().__init__()
        self.nb_views, self.image_size, self.points_radius = nb_views, image_size, points_radius
        g = torch.linspace(-1.2, 1.2, image_size)
        self.register_buffer("grid", torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2))

    def forward(self, meshes, points, azim, elev, dist):
        a, e = azim * math.pi / 180, elev * math.pi / 180
        x, y, z = points[..., 0].unsqueeze(1), points[..., 1].unsqueeze(1), points[..., 2].unsqueeze(1)
        ca, sa, ce, se = [t.unsqueeze(-1) for t in (a.cos(), a.sin(), e.cos(), e.sin())]
        u = ca * x - sa * y
        v = ce * z - se * (sa * x + ca * y)
        depth = se * z + ce * (sa * x + ca * y)
        uv = torch.stack([u, v], -1) * (2.0 / dist.unsqueeze(-1).unsqueeze(-1))
        d2 = ((uv.unsqueeze(2) - self.grid.view(1, 1, -1, 1, 2)) ** 2).sum(-1)
        w = torch.exp(-d2 / (2 * self.points_radius ** 2)) * torch.sigmoid(2 * depth).unsqueeze(2)
        images = w.sum(-1).clamp(max=1.0).view(points.shape[0], self.nb_views, 1, self.image_size, self.image_size)
        return images, None


class MVCNN(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(32, num_classes)

    def forward(self, rendered_images):
        b, v = rendered_images.shape[:2]
        feat = self.features(rendered_images.flatten(0, 1)).view(b, v, -1).max(dim=1)[0]
        return self.fc(feat), feat


def clip_grads_(parameters, clip_value):
    torch.nn.utils.clip_grad_norm_(parameters, clip_value)


def collate(batch):
    targets = torch.tensor([b[0] for b in batch])
    points = torch.stack([b[1] for b in batch])
    return targets, None, points


criterion = nn.CrossEntropyLoss()


def train(data_loader, models_bag, setup):
    train_size = len(data_loader)
    total = 0.0
    correct = 0.0

    total_loss = 0.0
    n = 0

    for i, (targets, meshes, points) in enumerate(data_loader):
        c_batch_size = targets.shape[0]
        models_bag["optimizer"].zero_grad()
        if setup["is_learning_views"]:
            models_bag["mvtn_optimizer"].zero_grad()

        azim, elev, dist = models_bag["mvtn"](
            points, c_batch_size=c_batch_size)
        rendered_images, _ = models_bag["mvrenderer"](
            meshes, points, azim=azim, elev=elev, dist=dist)
        targets = Variable(targets)
        outputs = models_bag["mvnetwork"](rendered_images)[0]
        loss = criterion(outputs, targets)
        _, predicted = torch.max(outputs.data, 1)
        total += targets.size(0)

        loss.backward()

        models_bag["optimizer"].step()
        if setup["is_learning_views"]:
            models_bag["mvtn_optimizer"].step()
            if setup["clip_grads"]:
                clip_grads_(models_bag["mvtn"].parameters(),
                            setup["mvtn_clip_grads_value"])

        if (i + 1) % setup["print_freq"] == 0:
            print("\tIter [%d/%d] Loss: %.4f" %
                  (i + 1, train_size, loss.item()))
        correct += (predicted.cpu() == targets.cpu()).sum()
        total_loss += loss
        n += 1
    avg_loss = total_loss / n
    avg_train_acc = 100 * correct / total

    return avg_train_acc, avg_loss


def evluate(data_loader, models_bag, setup):
    total = 0.0
    correct = 0.0
    total_loss = 0.0
    n = 0
    for i, (targets, meshes, points) in enumerate(data_loader):
        with torch.no_grad():
            c_batch_size = targets.shape[0]
            azim, elev, dist = models_bag["mvtn"](
                points, c_batch_size=c_batch_size)
            rendered_images, _ = models_bag["mvrenderer"](
                meshes, points, azim=azim, elev=elev, dist=dist)
            outputs, feat = models_bag["mvnetwork"](rendered_images)
            loss = criterion(outputs, targets)
            total_loss += loss
            n += 1
            _, predicted = torch.max(outputs.data, 1)
            total += targets.size(0)
            correct += (predicted.cpu() == targets.cpu()).sum()
    avg_loss = total_loss / n
    avg_test_acc = 100 * correct / total
    return avg_test_acc, avg_loss


def graph_nodes(t):
    seen, stack = set(), [t.grad_fn] if isinstance(t, torch.Tensor) and t.grad_fn is not None else []
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(f for f, _ in fn.next_functions)
    return len(seen)


def main():
    torch.manual_seed(0)
    train_loader = torch.utils.data.DataLoader(CloudDataset(128, 1), batch_size=setup["batch_size"], shuffle=True,
                                               collate_fn=collate, drop_last=True)
    val_loader = torch.utils.data.DataLoader(CloudDataset(48, 2), batch_size=setup["batch_size"], shuffle=False,
                                             collate_fn=collate)
    mvnetwork = MVCNN()
    mvtn = MVTN(nb_views=setup["nb_views"])
    mvrenderer = MVRenderer(nb_views=setup["nb_views"], image_size=setup["image_size"])
    optimizer = torch.optim.AdamW(mvnetwork.parameters(), lr=setup["learning_rate"], weight_decay=setup["weight_decay"])
    mvtn_optimizer = torch.optim.AdamW(mvtn.parameters(), lr=setup["mvtn_learning_rate"],
                                       weight_decay=setup["mvtn_weight_decay"])
    models_bag = {"mvnetwork": mvnetwork, "optimizer": optimizer,
                  "mvtn": mvtn, "mvtn_optimizer": mvtn_optimizer, "mvrenderer": mvrenderer}
    for epoch in range(setup["epochs"]):
        print('\n-----------------------------------')
        print('Epoch: [%d/%d]' % (epoch + 1, setup["epochs"]))
        start = time.time()
        models_bag["mvnetwork"].train()
        models_bag["mvtn"].train()
        models_bag["mvrenderer"].train()

        avg_train_acc, avg_train_loss = train(
            train_loader, models_bag, setup)
        print('Time taken: %.2f sec.' % (time.time() - start))

        models_bag["mvnetwork"].eval()
        models_bag["mvtn"].eval()
        models_bag["mvrenderer"].eval()

        avg_test_acc, avg_loss = evluate(
            val_loader, models_bag, setup)

        print('\nEvaluation:')
        print('\ttrain acc: %.2f - train Loss: %.4f (autograd nodes held: %d)' %
              (avg_train_acc.item(), float(avg_train_loss), graph_nodes(avg_train_loss)))
        print('\tVal Acc: %.2f - val Loss: %.4f' %
              (avg_test_acc.item(), avg_loss.item()))
        if avg_test_acc.item() >= setup["best_acc"]:
            setup["best_acc"] = avg_test_acc.item()
        print('\tCurrent best val acc: %.2f' % setup["best_acc"])


if __name__ == "__main__":
    main()
