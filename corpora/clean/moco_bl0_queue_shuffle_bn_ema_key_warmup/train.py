# Source: bl0/moco, train.py, moco/NCE/Contrast.py, moco/NCE/NCECriterion.py, moco/util.py, moco/lr_scheduler.py, moco/models/resnet.py, commit 6edee10d2ceb2e70da813f34a19a129c0d6e0204
# https://github.com/bl0/moco/blob/master/train.py
#
# MoCo pre-training: the key encoder model_ema is a momentum (EMA) copy of the query encoder that no optimizer
# holds and that runs under no_grad (its BatchNorm layers in train mode while the rest is in eval mode,
# set_bn_train); keys are shuffled before the key encoder and un-shuffled after it (ShuffleBN), with the shuffle
# drawn after torch.manual_seed(epoch) inside every step; the negatives are a queue of past keys kept in a buffer
# (MemoryMoCo.memory) that is overwritten in place under no_grad after the logits are built from a detached clone;
# the label of every row is 0 (the positive sits in column 0); the logits are divided by a temperature of 0.07;
# moment_update copies only parameters (BN running stats of model_ema stay its own); zero_grad is called twice;
# the lr is warmed up from base/100 over 5 epochs by a scheduler stepped per iteration, then cosine-annealed.
# Adaptation: single process (dist_collect = identity on one rank, the DistributedSampler replaced by a shuffling
# sampler); ImageNet replaced by 1024 synthetic 3x20x20 images of 8 classes (class pattern + the image's own pattern + colour cast + noise), two random
# crops + flips + brightness and colour jitter drawn from the dataset's own generator (as the loader workers' RNG would be);
# resnet50 -> a 2-stage ResNet of BasicBlocks (width 16, low_dim 32, l2norm head kept); nce_k 65536 -> 256 (below the 1024 images, as 65536 is below ImageNet's size),
# batch 128 -> 64, base lr 0.4 and alpha 0.99 from the repo's script, 200 -> 6 epochs (warmup 5 -> 2);
# apex, tensorboard, logger and checkpoints left out; a 5-nearest-neighbour probe on frozen backbone features is printed
# before and after training; cpu; seeds fixed.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import _LRScheduler, CosineAnnealingLR


# ---------------------------------------------------------------- moco/models/resnet.py (reduced)
def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class Normalize(nn.Module):
    def __init__(self, power=2):
        super(Normalize, self).__init__()
        self.power = power

    def forward(self, x):
        norm = x.pow(self.power).sum(1, keepdim=True).pow(1. / self.power)
        out = x.div(norm)
        return out


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            residual = self.downsample(x)
        out += residual
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, layers, low_dim=32, in_channel=3, width=1):
        self.inplanes = 16
        super(ResNet, self).__init__()
        self.base = int(16 * width)
        self.conv1 = nn.Conv2d(in_channel, 16, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, self.base, layers[0])
        self.layer2 = self._make_layer(block, self.base * 2, layers[1], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(self.base * 2 * block.expansion, low_dim)
        self.l2norm = Normalize(2)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x, layer=7):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        if layer == 6:
            return x
        x = self.fc(x)
        x = self.l2norm(x)
        return x


def resnet_small(**kwargs):
    return ResNet(BasicBlock, [1, 1], **kwargs)


# ---------------------------------------------------------------- moco/NCE
class MemoryMoCo(nn.Module):
    """Fixed-size queue with momentum encoder"""
    def __init__(self, feature_dim, queue_size, temperature=0.07):
        super(MemoryMoCo, self).__init__()
        self.queue_size = queue_size
        self.temperature = temperature
        self.index = 0

        # noinspection PyCallingNonCallable
        self.register_buffer('params', torch.tensor([-1]))
        stdv = 1. / math.sqrt(feature_dim / 3)
        memory = torch.rand(self.queue_size, feature_dim, requires_grad=False).mul_(2 * stdv).add_(-stdv)
        self.register_buffer('memory', memory)

    def forward(self, q, k, k_all):
        k = k.detach()

        l_pos = (q * k).sum(dim=-1, keepdim=True)  # shape: (batchSize, 1)
        # TODO: remove clone. need update memory in backwards
        l_neg = torch.mm(q, self.memory.clone().detach().t())
        out = torch.cat((l_pos, l_neg), dim=1)
        out = torch.div(out, self.temperature).contiguous()

        # update memory
        with torch.no_grad():
            all_size = k_all.shape[0]
            out_ids = torch.fmod(torch.arange(all_size, dtype=torch.long) + self.index, self.queue_size)
            self.memory.index_copy_(0, out_ids, k_all)
            self.index = (self.index + all_size) % self.queue_size

        return out


class NCESoftmaxLoss(nn.Module):
    """Softmax cross-entropy loss (a.k.a., info-NCE loss in CPC paper)"""
    def __init__(self):
        super(NCESoftmaxLoss, self).__init__()
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, x):
        label = torch.zeros([x.shape[0]]).long().to(x.device)
        return self.criterion(x, label)


# ---------------------------------------------------------------- moco/util.py
class AverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def dist_collect(x):
    """ collect all tensor from all GPUs (one process here: world size 1) """
    x = x.contiguous()
    out_list = [x.clone()]
    return torch.cat(out_list, dim=0)


class DistributedShufle:
    @staticmethod
    def forward_shuffle(x, epoch):
        x_all = dist_collect(x)
        forward_inds, backward_inds = DistributedShufle.get_shuffle_ids(x_all.shape[0], epoch)
        forward_inds_local = DistributedShufle.get_local_id(forward_inds)
        return x_all[forward_inds_local], backward_inds

    @staticmethod
    def backward_shuffle(x, backward_inds, return_local=True):
        x_all = dist_collect(x)
        if return_local:
            backward_inds_local = DistributedShufle.get_local_id(backward_inds)
            return x_all[backward_inds], x_all[backward_inds_local]
        else:
            return x_all[backward_inds]

    @staticmethod
    def get_local_id(ids):
        return ids.chunk(1)[0]

    @staticmethod
    def get_shuffle_ids(bsz, epoch):
        """generate shuffle ids for ShuffleBN"""
        torch.manual_seed(epoch)
        # global forward shuffle id  for all process
        forward_inds = torch.randperm(bsz).long()

        # global backward shuffle id
        backward_inds = torch.zeros(forward_inds.shape[0]).long()
        value = torch.arange(bsz).long()
        backward_inds.index_copy_(0, forward_inds, value)

        return forward_inds, backward_inds


def set_bn_train(model):
    def set_bn_train_helper(m):
        classname = m.__class__.__name__
        if classname.find('BatchNorm') != -1:
            m.train()

    model.eval()
    model.apply(set_bn_train_helper)


def moment_update(model, model_ema, m):
    """ model_ema = m * model_ema + (1 - m) model """
    for p1, p2 in zip(model.parameters(), model_ema.parameters()):
        p2.data.mul_(m).add_(p1.detach().data, alpha=1 - m)


# ---------------------------------------------------------------- moco/lr_scheduler.py
class GradualWarmupScheduler(_LRScheduler):
    def __init__(self, optimizer, multiplier, warmup_epoch, after_scheduler, last_epoch=-1):
        self.multiplier = multiplier
        if self.multiplier <= 1.:
            raise ValueError('multiplier should be greater than 1.')
        self.warmup_epoch = warmup_epoch
        self.after_scheduler = after_scheduler
        self.finished = False
        super().__init__(optimizer, last_epoch=last_epoch)

    def get_lr(self):
        if self.last_epoch > self.warmup_epoch:
            return self.after_scheduler.get_lr()
        else:
            return [base_lr / self.multiplier * ((self.multiplier - 1.) * self.last_epoch / self.warmup_epoch + 1.)
                    for base_lr in self.base_lrs]

    def step(self, epoch=None):
        if epoch is None:
            epoch = self.last_epoch + 1
        self.last_epoch = epoch
        if epoch > self.warmup_epoch:
            self.after_scheduler.step(epoch - self.warmup_epoch)
        else:
            super(GradualWarmupScheduler, self).step(epoch)


def get_scheduler(optimizer, n_iter_per_epoch, args):
    scheduler = CosineAnnealingLR(
        optimizer=optimizer,
        eta_min=0.000001,
        T_max=(args.epochs - args.warmup_epoch) * n_iter_per_epoch)
    scheduler = GradualWarmupScheduler(
        optimizer,
        multiplier=args.warmup_multiplier,
        after_scheduler=scheduler,
        warmup_epoch=args.warmup_epoch * n_iter_per_epoch)
    return scheduler


# ---------------------------------------------------------------- data (stand-in for ImageFolderInstance, two_crop=True)
class SyntheticInstance(torch.utils.data.Dataset):
    def __init__(self, n=1024, n_classes=8, seed=0):
        rng = np.random.RandomState(seed)
        def up(a):  # 4x4 -> 20x20 blocks, mirror-symmetric (a horizontal flip keeps an image's identity)
            a = (a + a[..., ::-1]) / 2
            return np.repeat(np.repeat(a, 5, axis=-2), 5, axis=-1)
        protos = up(rng.randn(n_classes, 3, 4, 4).astype(np.float32))  # class patterns
        self.targets = rng.randint(0, n_classes, n)
        own = up(1.0 * rng.randn(n, 3, 4, 4).astype(np.float32))  # each image's own coarse pattern
        offsets = 0.5 * rng.randn(n, 3, 1, 1).astype(np.float32)  # per-image colour cast (a nuisance)
        self.images = torch.from_numpy(protos[self.targets] + own + offsets + 0.2 * rng.randn(n, 3, 20, 20).astype(np.float32))
        self.gen = torch.Generator().manual_seed(seed + 1)

    def transform(self, image):
        i, j = torch.randint(1, 4, (2,), generator=self.gen).tolist()
        img = image[:, i:i + 16, j:j + 16]
        if torch.rand(1, generator=self.gen).item() < 0.5:
            img = img.flip(2)
        img = img * (0.6 + 0.8 * torch.rand(1, generator=self.gen)) + 0.5 * torch.randn(3, 1, 1, generator=self.gen)
        img = img + 0.3 * torch.randn(img.shape, generator=self.gen)
        return img

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        image, target = self.images[index], int(self.targets[index])
        img = self.transform(image)
        img2 = self.transform(image)
        img = torch.cat([img, img2], dim=0)
        return img, target


class Args:
    batch_size = 64
    base_learning_rate = 0.4
    momentum = 0.9
    weight_decay = 1e-4
    alpha = 0.99
    nce_k = 256
    nce_t = 0.07
    epochs = 8
    warmup_epoch = 2
    warmup_multiplier = 100
    print_freq = 4


def probe(model, dataset):
    """5-nearest-neighbour accuracy of frozen, normalised backbone features (centre crops), half fit / half test"""
    model.eval()
    with torch.no_grad():
        feats = F.normalize(model(dataset.images[:, :, 2:18, 2:18], layer=6), dim=1)
    y = torch.as_tensor(dataset.targets)
    half = len(y) // 2
    nn_idx = (feats[half:] @ feats[:half].t()).topk(5, dim=1).indices
    pred = torch.mode(y[:half][nn_idx], dim=1).values
    return (pred == y[half:]).float().mean().item()


def train_moco(epoch, train_loader, model, model_ema, contrast, criterion, optimizer, scheduler, args):
    """
    one epoch training for moco
    """
    model.train()
    set_bn_train(model_ema)

    loss_meter = AverageMeter()
    prob_meter = AverageMeter()

    for idx, (inputs, _,) in enumerate(train_loader):
        bsz = inputs.size(0)

        # forward
        x1, x2 = torch.split(inputs, [3, 3], dim=1)
        x1.contiguous()
        x2.contiguous()

        feat_q = model(x1)
        with torch.no_grad():
            x2_shuffled, backward_inds = DistributedShufle.forward_shuffle(x2, epoch)
            feat_k = model_ema(x2_shuffled)
            feat_k_all, feat_k = DistributedShufle.backward_shuffle(feat_k, backward_inds, return_local=True)

        out = contrast(feat_q, feat_k, feat_k_all)
        loss = criterion(out)
        prob = F.softmax(out, dim=1)[:, 0].mean()

        # backward
        optimizer.zero_grad()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()

        moment_update(model, model_ema, args.alpha)

        # update meters
        loss_meter.update(loss.item(), bsz)
        prob_meter.update(prob.item(), bsz)

        if idx % args.print_freq == 0:
            print(f'Train: [{epoch}][{idx}/{len(train_loader)}]\t'
                  f'loss {loss_meter.val:.3f} ({loss_meter.avg:.3f})\t'
                  f'prob {prob_meter.val:.3f} ({prob_meter.avg:.3f})\t'
                  f'lr {optimizer.param_groups[0]["lr"]:.4f}')

    return loss_meter.avg, prob_meter.avg


def main(args):
    dataset = SyntheticInstance()
    train_loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True)

    model, model_ema = resnet_small(), resnet_small()
    # copy weights from `model' to `model_ema'
    moment_update(model, model_ema, 0)

    contrast = MemoryMoCo(32, args.nce_k, args.nce_t)
    criterion = NCESoftmaxLoss()
    optimizer = torch.optim.SGD(model.parameters(),
                                lr=args.batch_size * 1 / 256 * args.base_learning_rate,
                                momentum=args.momentum,
                                weight_decay=args.weight_decay)
    scheduler = get_scheduler(optimizer, len(train_loader), args)

    acc0 = probe(model, dataset)
    print(f'before training: probe accuracy {acc0:.3f}')
    history = []
    for epoch in range(1, args.epochs + 1):
        loss, prob = train_moco(epoch, train_loader, model, model_ema, contrast, criterion, optimizer, scheduler, args)
        history.append((loss, prob))
        print('epoch {}, loss {:.3f}, prob {:.3f}'.format(epoch, loss, prob))
    acc1 = probe(model, dataset)
    print(f'after training: probe accuracy {acc1:.3f}')
    print('[summary] probe accuracy first={:.3f} last={:.3f} increased={}'.format(acc0, acc1, acc1 > acc0))
    print('[summary] positive prob epoch1={:.3f} last={:.3f}'.format(history[0][1], history[-1][1]))


if __name__ == '__main__':
    torch.manual_seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    main(Args())
