# Source: FlyreelAI/sesemi, sesemi/learners.py (Classifier: _copy_and_detach, _ema_update, training_step, training_step_end, validation_step), commit 8ce2bbfed160b28d11efa462784c28a75615047b
# Report: https://github.com/FlyreelAI/sesemi/issues/36
# SESEMI supervised classifier with an EMA copy of backbone and head, updated after every
# training step and evaluated next to the regular model every epoch. The Lightning module is
# driven by a plain loop (training_step -> training_step_end -> optimizer step), the
# torchvision / timm backbone is a small conv net with BatchNorm, the image folders are
# synthetic 32x32 RGB images in [0, 1] (un-normalised ToTensor output) with 4 classes.
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Backbone(nn.Module):
    def __init__(self, out_features=64):
        super().__init__()
        self.out_features = out_features
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, x):
        return self.net(x)


class LinearHead(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x)


class Classifier(nn.Module):
    def __init__(self, num_classes, ema_decay=0.99):
        super().__init__()
        self.shared_backbones = nn.ModuleDict()
        self.shared_heads = nn.ModuleDict()
        self.shared_backbones["backbone"] = Backbone()
        self.shared_heads["supervised"] = LinearHead(self.backbone.out_features, num_classes)
        self.ema_decay = ema_decay
        self.global_step = 0
        if self.ema_decay is not None:
            assert (
                0.0 <= self.ema_decay <= 1.0
            ), "EMA decay value should be between [0, 1]. Default 0.999."
            self.shared_backbones["backbone_ema"] = self._copy_and_detach(self.backbone)
            self.shared_heads["supervised_ema"] = self._copy_and_detach(self.head)

    def _copy_and_detach(self, module):
        """Detaches a new module from the computational graph after copying."""
        new_module = copy.deepcopy(module)
        for param in new_module.parameters():
            param.detach_()
        return new_module

    @property
    def backbone(self):
        return self.shared_backbones["backbone"]

    @property
    def backbone_ema(self):
        return self.shared_backbones["backbone_ema"]

    @property
    def head(self):
        return self.shared_heads["supervised"]

    @property
    def head_ema(self):
        return self.shared_heads["supervised_ema"]

    def forward(self, x):
        features = self.backbone(x)
        logits = self.head(features)
        return logits

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.SGD(params, lr=0.02, momentum=0.9, nesterov=True, weight_decay=5e-4)

    def training_step(self, batch, batch_index):
        inputs_t, targets_t = batch
        features_t = self.backbone(inputs_t)
        outputs_t = self.head(features_t)
        supervised_loss = F.cross_entropy(outputs_t, targets_t)
        return {"supervised_loss": supervised_loss, "probs": F.softmax(outputs_t, dim=-1), "targets": targets_t}

    def _ema_update(self, ema_module, module, step, decay):
        """Computes in-place the EMA parameters from the original parameters."""
        # Use the true average until the exponential average is more correct.
        decay = min(1.0 - 1.0 / (step + 1.0), decay)
        for ema_param, param in zip(ema_module.parameters(), module.parameters()):
            ema_param.data.mul_(decay).add_(param.data, alpha=(1.0 - decay))

    def training_step_end(self, outputs):
        loss = outputs["supervised_loss"]
        if self.ema_decay is not None:
            self._ema_update(
                self.backbone_ema, self.backbone, self.global_step, self.ema_decay
            )
            self._ema_update(self.head_ema, self.head, self.global_step, self.ema_decay)
        return loss

    def compute_validation_outputs(self, inputs, targets, backbone, head):
        outputs_t = head(backbone(inputs))
        probs_t = torch.softmax(outputs_t, dim=-1)
        loss_t = F.cross_entropy(outputs_t, targets, reduction="none")
        return probs_t, loss_t

    def validation_step(self, batch, batch_index):
        inputs_t, targets_t = batch
        regular_outputs = self.compute_validation_outputs(inputs_t, targets_t, self.backbone, self.head)
        ema_outputs = self.compute_validation_outputs(inputs_t, targets_t, self.backbone_ema, self.head_ema)
        return targets_t, regular_outputs, ema_outputs


def make_images(n, g):
    # each class has its own colour balance and stripe orientation; pixel values in [0, 1]
    y = torch.randint(0, 4, (n,), generator=g)
    xs = torch.linspace(0, 6.28, 32)
    stripes = torch.stack([torch.sin(3 * xs)[None, :].expand(32, 32), torch.sin(3 * xs)[:, None].expand(32, 32),
                           torch.sin(3 * (xs[None, :] + xs[:, None]) / 1.4), torch.sin(5 * xs)[None, :].expand(32, 32)])
    colour = torch.tensor([[0.8, 0.4, 0.3], [0.3, 0.7, 0.4], [0.4, 0.4, 0.8], [0.6, 0.6, 0.6]])
    x = 0.3 + 0.35 * stripes[y][:, None] * colour[y][:, :, None, None] + 0.1 * torch.rand(n, 3, 32, 32, generator=g)
    return x.clamp(0, 1), y


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x_train, y_train = make_images(512, g)
    x_val, y_val = make_images(256, g)
    train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True)
    val_loader = DataLoader(TensorDataset(x_val, y_val), batch_size=128)

    model = Classifier(num_classes=4, ema_decay=0.95)
    optimizer = model.configure_optimizers()
    for epoch in range(6):
        model.train()
        for batch_index, batch in enumerate(train_loader):
            outputs = model.training_step(batch, batch_index)
            loss = model.training_step_end(outputs)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model.global_step += 1

        model.eval()
        correct, ema_correct, n = 0, 0, 0
        with torch.no_grad():
            for batch_index, batch in enumerate(val_loader):
                targets_t, (probs_t, loss_t), (ema_probs_t, ema_loss_t) = model.validation_step(batch, batch_index)
                correct += (probs_t.argmax(1) == targets_t).sum().item()
                ema_correct += (ema_probs_t.argmax(1) == targets_t).sum().item()
                n += len(targets_t)
        print(f"epoch {epoch}: train loss {loss.item():.4f} val/top1 {correct / n:.4f} val_ema/top1 {ema_correct / n:.4f}")


if __name__ == "__main__":
    main()
