# Source: vturrisi/solo-learn, solo/methods/base.py (BaseMethod, BaseMomentumMethod) + solo/methods/byol.py + solo/utils/momentum.py + solo/losses/byol.py, commit eb07a9c7c2872efb1ae83767f59a67fa616a7652
# Report: https://github.com/vturrisi/solo-learn/pull/247 ("fix momentum tau", commit cf70ac0)
import math
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


@torch.no_grad()
def initialize_momentum_params(online_net: nn.Module, momentum_net: nn.Module):
    params_online = online_net.parameters()
    params_momentum = momentum_net.parameters()
    for po, pm in zip(params_online, params_momentum):
        pm.data.copy_(po.data)
        pm.requires_grad = False


class MomentumUpdater:
    def __init__(self, base_tau: float = 0.996, final_tau: float = 1.0):
        super().__init__()

        assert 0 <= base_tau <= 1
        assert 0 <= final_tau <= 1 and base_tau <= final_tau

        self.base_tau = base_tau
        self.cur_tau = base_tau
        self.final_tau = final_tau

    @torch.no_grad()
    def update(self, online_net: nn.Module, momentum_net: nn.Module):
        for op, mp in zip(online_net.parameters(), momentum_net.parameters()):
            mp.data = self.cur_tau * mp.data + (1 - self.cur_tau) * op.data

    def update_tau(self, cur_step: int, max_steps: int):
        self.cur_tau = (
            self.final_tau
            - (self.final_tau - self.base_tau) * (math.cos(math.pi * cur_step / max_steps) + 1) / 2
        )


def byol_loss_func(p: torch.Tensor, z: torch.Tensor, simplified: bool = True) -> torch.Tensor:
    if simplified:
        return 2 - 2 * F.cosine_similarity(p, z.detach(), dim=-1).mean()

    p = F.normalize(p, dim=-1)
    z = F.normalize(z, dim=-1)

    return 2 - 2 * (p * z.detach()).sum(dim=1).mean()


def make_backbone(in_dim=32, features_dim=64):
    return nn.Sequential(nn.Linear(in_dim, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, features_dim))


class BYOL(nn.Module):
    def __init__(self, num_classes, max_epochs, num_training_steps, proj_output_dim=32, proj_hidden_dim=128,
                 pred_hidden_dim=64, base_tau_momentum=0.99, final_tau_momentum=1.0):
        super().__init__()
        self.features_dim = 64
        self.max_epochs = max_epochs
        self.num_training_steps = num_training_steps
        self.num_large_crops = 2
        self.num_crops = 2

        self.backbone = make_backbone(features_dim=self.features_dim)
        self.classifier = nn.Linear(self.features_dim, num_classes)
        self.momentum_backbone = make_backbone(features_dim=self.features_dim)
        initialize_momentum_params(self.backbone, self.momentum_backbone)
        self.momentum_updater = MomentumUpdater(base_tau_momentum, final_tau_momentum)

        # projector
        self.projector = nn.Sequential(
            nn.Linear(self.features_dim, proj_hidden_dim),
            nn.BatchNorm1d(proj_hidden_dim),
            nn.ReLU(),
            nn.Linear(proj_hidden_dim, proj_output_dim),
        )

        # momentum projector
        self.momentum_projector = nn.Sequential(
            nn.Linear(self.features_dim, proj_hidden_dim),
            nn.BatchNorm1d(proj_hidden_dim),
            nn.ReLU(),
            nn.Linear(proj_hidden_dim, proj_output_dim),
        )
        initialize_momentum_params(self.projector, self.momentum_projector)

        # predictor
        self.predictor = nn.Sequential(
            nn.Linear(proj_output_dim, pred_hidden_dim),
            nn.BatchNorm1d(pred_hidden_dim),
            nn.ReLU(),
            nn.Linear(pred_hidden_dim, proj_output_dim),
        )

    @property
    def learnable_params(self) -> List[dict]:
        return [
            {"name": "backbone", "params": self.backbone.parameters()},
            {"name": "classifier", "params": self.classifier.parameters(), "lr": 0.1, "weight_decay": 0},
            {"params": self.projector.parameters()},
            {"params": self.predictor.parameters()},
        ]

    @property
    def momentum_pairs(self) -> List[Tuple[Any, Any]]:
        return [(self.backbone, self.momentum_backbone), (self.projector, self.momentum_projector)]

    def on_train_start(self):
        self.last_step = 0

    def forward(self, X):
        feats = self.backbone(X)
        logits = self.classifier(feats.detach())
        z = self.projector(feats)
        p = self.predictor(z)
        return {"logits": logits, "feats": feats, "z": z, "p": p}

    @torch.no_grad()
    def momentum_forward(self, X):
        feats = self.momentum_backbone(X)
        z = self.momentum_projector(feats)
        return {"feats": feats, "z": z}

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        _, X, targets = batch
        outs = [self(x) for x in X]
        class_loss = sum(F.cross_entropy(o["logits"], targets) for o in outs) / self.num_large_crops
        Z = [o["z"] for o in outs]
        P = [o["p"] for o in outs]
        Z_momentum = [self.momentum_forward(x)["z"] for x in X[: self.num_large_crops]]

        # ------- negative consine similarity loss -------
        neg_cos_sim = 0
        for v1 in range(self.num_large_crops):
            for v2 in np.delete(range(self.num_crops), v1):
                neg_cos_sim += byol_loss_func(P[v2], Z_momentum[v1])

        # calculate std of features
        with torch.no_grad():
            z_std = F.normalize(torch.stack(Z[: self.num_large_crops]), dim=-1).std(dim=1).mean()

        self.metrics = {"train_neg_cos_sim": neg_cos_sim.item(), "train_z_std": z_std.item()}
        return neg_cos_sim + class_loss

    def on_train_batch_end(self, global_step: int):
        if global_step > self.last_step:
            # update momentum backbone and projector
            momentum_pairs = self.momentum_pairs
            for mp in momentum_pairs:
                self.momentum_updater.update(*mp)
            # log tau momentum
            self.metrics["tau"] = self.momentum_updater.cur_tau
            # update tau
            cur_step = global_step
            self.momentum_updater.update_tau(cur_step=cur_step, max_steps=self.num_training_steps)
        self.last_step = global_step


class TwoViewDataset(Dataset):
    """Synthetic 'images' as 32-d vectors from 5 classes; each access returns two noisy augmented views."""

    def __init__(self, n=640, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.protos = torch.randn(5, 32, generator=g) * 2
        self.targets = torch.randint(0, 5, (n,), generator=g)
        self.data = self.protos[self.targets] + torch.randn(n, 32, generator=g)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        x = self.data[i]
        views = [x * (0.8 + 0.4 * torch.rand(1)) + 0.3 * torch.randn(32) for _ in range(2)]
        return i, views, self.targets[i]


@torch.no_grad()
def knn_acc(backbone, train_ds, val_ds):
    backbone.eval()
    tr = F.normalize(backbone(train_ds.data), dim=-1)
    va = F.normalize(backbone(val_ds.data), dim=-1)
    pred = train_ds.targets[(va @ tr.T).topk(5, dim=1).indices].mode(dim=1).values
    backbone.train()
    return (pred == val_ds.targets).float().mean().item()


def main():
    torch.manual_seed(5)
    train_ds, val_ds = TwoViewDataset(640, 0), TwoViewDataset(320, 1)
    val_ds.protos = train_ds.protos
    val_ds.data = train_ds.protos[val_ds.targets] + torch.randn(320, 32, generator=torch.Generator().manual_seed(9))
    loader = DataLoader(train_ds, batch_size=64, shuffle=True, drop_last=True)
    max_epochs = 8
    model = BYOL(num_classes=5, max_epochs=max_epochs, num_training_steps=len(loader))
    optimizer = torch.optim.SGD(model.learnable_params, lr=0.1, momentum=0.9, weight_decay=1e-5)
    model.on_train_start()
    global_step = 0
    for epoch in range(max_epochs):
        taus = []
        for batch_idx, batch in enumerate(loader):
            loss = model.training_step(batch, batch_idx)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            global_step += 1
            model.on_train_batch_end(global_step)
            taus.append(model.momentum_updater.cur_tau)
        print("epoch {} train_neg_cos_sim {:.4f} tau min {:.4f} max {:.4f} end {:.4f} momentum kNN acc {:.4f}".format(
            epoch, model.metrics["train_neg_cos_sim"], min(taus), max(taus), taus[-1],
            knn_acc(model.momentum_backbone, train_ds, val_ds)))


if __name__ == "__main__":
    main()
