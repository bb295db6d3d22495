# Source: kdexd/virtex, scripts/clf_linear.py (main), virtex/optim/lr_scheduler.py (LinearWarmupMultiStepLR), virtex/utils/metrics.py (TopkAccuracy), virtex/factories.py (OptimizerFactory), commit 45c34a9ce926ea0568e32d6fa8018620e933b4c3
# Report: https://github.com/kdexd/virtex/issues/16
# VirTex downstream linear classification (scripts/clf_linear.py): the visual backbone of a
# pretrained model is pulled out, a new fc layer is attached and re-initialised, every layer
# except fc is frozen (MODEL.VISUAL.FROZEN), and fc is trained with SGD + momentum under a
# warmup/multi-step LR schedule; every checkpoint_every iterations the validation set is scored
# (top-1) under torch.set_grad_enabled(False) / model.eval() and training resumes. The ResNet-50
# is a small conv/BatchNorm network "pretrained" here on a synthetic 10-class task; the
# downstream data are synthetic 3x16x16 images of 6 other classes; Apex AMP, DDP, tensorboard
# and checkpoint files are removed.
import bisect
import math

import numpy as np
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class Config:
    FROZEN = True
    FEATURE_SIZE = 64
    BATCH_SIZE = 16
    SGD_MOMENTUM = 0.9
    WEIGHT_DECAY = 0.0
    LR = 0.3
    WARMUP_STEPS = 0
    LR_GAMMA = 0.1
    LR_STEPS = [360, 480]
    NUM_ITERATIONS = 600
    CHECKPOINT_EVERY = 150
    LOG_EVERY = 50


class LinearWarmupMultiStepLR(LambdaLR):
    def __init__(self, optimizer, total_steps, warmup_steps, milestones, gamma=0.1, last_epoch=-1):
        self.wsteps = warmup_steps
        self.milestones = milestones
        self.gamma = gamma
        self.milestones_so_far = 0
        assert milestones == sorted(milestones), "milestones must be increasing"
        assert milestones[0] > warmup_steps, "first milestone must be after warmup"
        assert milestones[-1] < total_steps, "last milestone must be less than total steps"
        super().__init__(optimizer, self._lr_multiplier, last_epoch)

    def _lr_multiplier(self, step):
        if step < self.wsteps:
            multiplier = step / float(max(1, self.wsteps))
        else:
            multiplier = self.gamma ** bisect.bisect_right(self.milestones, step)
        return max(0, multiplier)


class TopkAccuracy(object):
    def __init__(self, top_k=1):
        self._top_k = top_k
        self.reset()

    def reset(self):
        self.num_total = 0.0
        self.num_correct = 0.0

    def __call__(self, predictions, ground_truth):
        top_k = predictions.max(-1)[1].unsqueeze(-1)
        correct = top_k.eq(ground_truth.unsqueeze(-1)).float()
        self.num_total += ground_truth.numel()
        self.num_correct += correct.sum()

    def get_metric(self, reset=False):
        accuracy = self.num_correct / self.num_total * 100
        if reset:
            self.reset()
        return accuracy


def conv_bn(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class SmallResNet(nn.Module):
    """torchvision-like CNN: conv stem, three stages, global pool, `fc`."""

    def __init__(self, width=64):
        super().__init__()
        self.stem = conv_bn(3, 16, 1)
        self.layer1 = conv_bn(16, 32, 2)
        self.layer2 = conv_bn(32, 48, 2)
        self.layer3 = conv_bn(48, width, 1)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Identity()

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make_images(protos, n, gen, gain=1.0, offset=0.0, noise=0.9):
    labels = torch.randint(0, protos.size(0), (n,), generator=gen)
    shift = torch.randint(-2, 3, (n, 2), generator=gen)
    images = torch.empty(n, 3, 16, 16)
    for i in range(n):
        images[i] = torch.roll(protos[labels[i]], shifts=(int(shift[i, 0]), int(shift[i, 1])), dims=(1, 2))
    images = gain * images + offset + noise * torch.randn(images.shape, generator=gen)
    return images, labels


def pretrain(model, gen):
    """Stand-in for the pretrained VirTex checkpoint (visual.cnn weights and BN statistics)."""
    protos = torch.randn(10, 3, 16, 16, generator=gen)
    x, y = make_images(protos, 3000, gen)
    head = nn.Linear(64, 10)
    opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=3e-3)
    model.train()
    for it in range(300):
        idx = torch.randint(0, x.size(0), (64,), generator=gen)
        loss = nn.functional.cross_entropy(head(model(x[idx])), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def cycle(dataloader):
    while True:
        for images, labels in dataloader:
            yield {"image": images, "label": labels}


def main():
    gen = torch.Generator().manual_seed(1)
    pretrained_cnn = pretrain(SmallResNet(), gen)
    bn_reference = {n: b.clone() for n, b in pretrained_cnn.named_buffers() if "running_mean" in n}

    down_protos = torch.randn(6, 3, 16, 16, generator=gen)
    train_x, train_y = make_images(down_protos, 1200, gen)
    val_x, val_y = make_images(down_protos, 1200, gen)
    train_dataloader = DataLoader(TensorDataset(train_x, train_y), batch_size=Config.BATCH_SIZE, shuffle=True, drop_last=False)
    val_dataloader = DataLoader(TensorDataset(val_x, val_y), batch_size=Config.BATCH_SIZE, shuffle=False)

    model = pretrained_cnn
    model.fc = nn.Linear(Config.FEATURE_SIZE, 6)

    # Re-initialize the FC layer.
    torch.nn.init.normal_(model.fc.weight.data, mean=0.0, std=0.01)
    torch.nn.init.constant_(model.fc.bias.data, 0.0)

    # Freeze all layers except FC as per config param.
    if Config.FROZEN:
        for name, param in model.named_parameters():
            if "fc" not in name:
                param.requires_grad = False

    criterion = nn.CrossEntropyLoss()
    top1 = TopkAccuracy(top_k=1)

    param_groups = [{"params": [p], "lr": Config.LR, "weight_decay": Config.WEIGHT_DECAY} for _, p in model.named_parameters()]
    optimizer = torch.optim.SGD(param_groups, momentum=Config.SGD_MOMENTUM)
    scheduler = LinearWarmupMultiStepLR(optimizer, Config.NUM_ITERATIONS, Config.WARMUP_STEPS, Config.LR_STEPS, Config.LR_GAMMA)

    train_dataloader_iter = cycle(train_dataloader)

    for iteration in range(1, Config.NUM_ITERATIONS + 1):
        optimizer.zero_grad()
        batch = next(train_dataloader_iter)

        logits = model(batch["image"])
        loss = criterion(logits, batch["label"])
        loss.backward()

        optimizer.step()
        scheduler.step(iteration)

        if iteration % Config.LOG_EVERY == 0:
            print(f"Iter: {iteration} | Loss: {loss:.3f} | lr {optimizer.param_groups[-1]['lr']:.4f}")

        if iteration % Config.CHECKPOINT_EVERY == 0:
            torch.set_grad_enabled(False)
            model.eval()

            total_val_loss = torch.tensor(0.0)
            for val_iteration, (images, labels) in enumerate(val_dataloader, start=1):
                logits = model(images)
                loss = criterion(logits, labels)
                top1(logits, labels)
                total_val_loss += loss
            total_val_loss = total_val_loss / val_iteration
            acc = top1.get_metric(reset=True)

            torch.set_grad_enabled(True)
            model.train()

            drift = max((b - bn_reference[n]).abs().max().item() for n, b in model.named_buffers() if n in bn_reference)
            print(f"Iter: {iteration} | Top-1 accuracy: {acc:.2f} | val loss {total_val_loss:.4f} | "
                  f"backbone BN running_mean drift from pretrained {drift:.4f}")


if __name__ == "__main__":
    main()
