"""timm's train_one_epoch: Mixup applied to the batch (in-place lam blend with the flipped batch,
smoothed one-hot targets mixed the same way), SoftTargetCrossEntropy, gradient accumulation with
need_update / `_loss /= accum_steps` (in place on the loss), the optimizer step and zero_grad only
on update steps, a ModelEmaV3-style EMA (a deep copy in eval() with requires_grad_(False), lerp_
under no_grad) updated after each optimizer update, and validate() on both model and EMA with
top-1 from topk.

Source: huggingface/pytorch-image-models, train.py (train_one_epoch, validate) and
timm/data/mixup.py, timm/loss/cross_entropy.py, timm/utils/model_ema.py,
commit aa4b5850c1543fa488abf260f18390eda46cf85d.
Reduced: a toy-width ResNet (_nets.py), 16x16 images, 5 classes, 4 batches with accum_steps 2.
"""

import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus._nets import resnet


class SoftTargetCrossEntropy(nn.Module):
    def forward(self, x, target):
        loss = torch.sum(-target * F.log_softmax(x, dim=-1), dim=-1)
        return loss.mean()


def one_hot(x, num_classes, on_value=1.0, off_value=0.0):
    x = x.long().view(-1, 1)
    return torch.full((x.size()[0], num_classes), off_value, device=x.device).scatter_(1, x, on_value)


def mixup_target(target, num_classes, lam=1.0, smoothing=0.0):
    off_value = smoothing / num_classes
    on_value = 1.0 - smoothing + off_value
    y1 = one_hot(target, num_classes, on_value=on_value, off_value=off_value)
    y2 = one_hot(target.flip(0), num_classes, on_value=on_value, off_value=off_value)
    return y1 * lam + y2 * (1.0 - lam)


class Mixup:
    def __init__(self, mixup_alpha=0.8, label_smoothing=0.1, num_classes=5):
        self.mixup_alpha, self.label_smoothing, self.num_classes = mixup_alpha, label_smoothing, num_classes

    def __call__(self, x, target):
        lam = float(np.random.beta(self.mixup_alpha, self.mixup_alpha))
        x_flipped = x.flip(0).mul_(1.0 - lam)
        x.mul_(lam).add_(x_flipped)
        return x, mixup_target(target, self.num_classes, lam, self.label_smoothing)


class ModelEmaV3(nn.Module):
    def __init__(self, model, decay=0.9999):
        super().__init__()
        self.module = copy.deepcopy(model)
        self.module.eval()
        self.module.requires_grad_(False)
        self.decay = decay

    @torch.no_grad()
    def update(self, model, step=None):
        ema_lerp_values, model_lerp_values = [], []
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema_v.is_floating_point():
                ema_lerp_values.append(ema_v)
                model_lerp_values.append(model_v)
            else:
                ema_v.copy_(model_v)
        torch._foreach_lerp_(ema_lerp_values, model_lerp_values, weight=1.0 - self.decay)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def build():
    np.random.seed(0)
    torch.manual_seed(0)
    loader = [(torch.randn(8, 3, 16, 16), torch.randint(0, 5, (8,))) for _ in range(4)]
    val_loader = [(torch.randn(8, 3, 16, 16), torch.randint(0, 5, (8,)))]
    model = resnet(num_classes=5)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    model_ema = ModelEmaV3(model, decay=0.998)
    mixup_fn = Mixup(num_classes=5)
    train_loss_fn, validate_loss_fn = SoftTargetCrossEntropy(), nn.CrossEntropyLoss()

    def train_one_epoch(epoch, accum_steps=2):
        model.train()
        last_accum_steps = len(loader) % accum_steps
        updates_per_epoch = (len(loader) + accum_steps - 1) // accum_steps
        num_updates = epoch * updates_per_epoch
        last_batch_idx = len(loader) - 1
        last_batch_idx_to_accum = len(loader) - last_accum_steps
        optimizer.zero_grad()
        for batch_idx, (input, target) in enumerate(loader):
            last_batch = batch_idx == last_batch_idx
            need_update = last_batch or (batch_idx + 1) % accum_steps == 0
            if batch_idx >= last_batch_idx_to_accum:
                accum_steps = last_accum_steps
            input, target = mixup_fn(input.clone(), target)

            def _forward():
                output = model(input)
                _loss = train_loss_fn(output, target)
                if accum_steps > 1:
                    _loss /= accum_steps
                return _loss

            def _backward(_loss):
                _loss.backward()
                if need_update:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()

            loss = _forward()
            _backward(loss)
            if not need_update:
                continue
            num_updates += 1
            optimizer.zero_grad()
            model_ema.update(model, step=num_updates)

    def validate(m):
        m.eval()
        top1 = 0.0
        with torch.no_grad():
            for input, target in val_loader:
                output = m(input)
                loss = validate_loss_fn(output, target)
                _, pred = output.topk(1, 1, True, True)
                top1 += pred.t().eq(target.reshape(1, -1)).float().sum().item()
        return top1, loss.item()

    def train():
        train_one_epoch(0)
        validate(model)
        validate(model_ema)

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
