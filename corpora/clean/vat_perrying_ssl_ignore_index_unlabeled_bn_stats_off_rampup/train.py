# Source: perrying/realistic-ssl-evaluation-pytorch, train.py, config.py, lib/algs/vat.py, lib/wrn.py, lib/transform.py, commit 446ada86776b0284d06fc42123a3522bb72c7ac4
# https://github.com/perrying/realistic-ssl-evaluation-pytorch/blob/master/train.py
#
# Semi-supervised training with virtual adversarial training (VAT): every batch is half labeled, half unlabeled; the
# unlabeled targets are -1 and the supervised loss is F.cross_entropy(..., reduction="none", ignore_index=-1).mean(),
# i.e. averaged over the whole batch (the unlabeled half contributes zeros); the VAT loss takes outputs.detach() as
# its target, finds the adversarial direction with torch.autograd.grad of a KL with respect to a random input
# perturbation d (requires_grad set on a non-parameter tensor), and turns BatchNorm statistic updates off during its
# extra forward passes (update_batch_stats(False) -> batch_norm with running stats None); the VAT weight is ramped up
# by exp(-5 (1 - t)^2) over the first 40% of training; the augmentation (random crop) runs inside model.forward
# when training, so each forward sees a different crop; the repo's BatchNorm2d subclass accepts momentum/eps
# arguments that it never passes on; the two loaders are zipped with samplers sized for the whole run; the lr is cut
# once by writing optimizer.param_groups[0]["lr"].
# Adaptation: SVHN (73257 images, 1000 labeled) replaced by synthetic 3x16x16 "digits" (10 classes, pattern + noise):
# 100 labeled, 3000 unlabeled, 200 validation and 500 test images, served by the dataset classes' interface
# (labels -1 for u_train); WRN-28-2 -> the same block structure with one residual per unit and width 1;
# iterations 500000 -> 80, warmup 200000 -> 32, lr decay 400000 -> 64 (the same fractions), validation at the
# end only; the experiment json is not written; test accuracy printed before training too; cpu; seeds fixed.
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader


# ---------------------------------------------------------------- lib/transform.py
class transform:
    def __init__(self, flip=True, r_crop=True, g_noise=True):
        self.flip = flip
        self.r_crop = r_crop
        self.g_noise = g_noise
        print("holizontal flip : {}, random crop : {}, gaussian noise : {}".format(
            self.flip, self.r_crop, self.g_noise
        ))

    def __call__(self, x):
        if self.flip and random.random() > 0.5:
            x = x.flip(-1)
        if self.r_crop:
            h, w = x.shape[-2:]
            x = F.pad(x, [2,2,2,2], mode="reflect")
            l, t = random.randint(0, 4), random.randint(0,4)
            x = x[:,:,t:t+h,l:l+w]
        if self.g_noise:
            n = torch.randn_like(x) * 0.15
            x = n + x
        return x


# ---------------------------------------------------------------- lib/wrn.py (one residual per unit)
def conv3x3(i_c, o_c, stride=1):
    return nn.Conv2d(i_c, o_c, 3, stride, 1, bias=False)

class BatchNorm2d(nn.BatchNorm2d):
    def __init__(self, channels, momentum=1e-3, eps=1e-3):
        super().__init__(channels)
        self.update_batch_stats = True

    def forward(self, x):
        if self.update_batch_stats:
            return super().forward(x)
        else:
            return nn.functional.batch_norm(
                x, None, None, self.weight, self.bias, True, self.momentum, self.eps
            )

def relu():
    return nn.LeakyReLU(0.1)

class residual(nn.Module):
    def __init__(self, input_channels, output_channels, stride=1, activate_before_residual=False):
        super().__init__()
        layer = []
        if activate_before_residual:
            self.pre_act = nn.Sequential(
                BatchNorm2d(input_channels),
                relu()
            )
        else:
            self.pre_act = nn.Identity()
            layer.append(BatchNorm2d(input_channels))
            layer.append(relu())
        layer.append(conv3x3(input_channels, output_channels, stride))
        layer.append(BatchNorm2d(output_channels))
        layer.append(relu())
        layer.append(conv3x3(output_channels, output_channels))

        if stride >= 2 or input_channels != output_channels:
            self.identity = nn.Conv2d(input_channels, output_channels, 1, stride, bias=False)
        else:
            self.identity = nn.Identity()

        self.layer = nn.Sequential(*layer)

    def forward(self, x):
        x = self.pre_act(x)
        return self.identity(x) + self.layer(x)

class WRN(nn.Module):
    """ WRN28-width with leaky relu (negative slope is 0.1)"""
    def __init__(self, width, num_classes, transform_fn=None):
        super().__init__()

        self.init_conv = conv3x3(3, 16)

        filters = [16, 16*width, 32*width, 64*width]

        unit1 = [residual(filters[0], filters[1], activate_before_residual=True)] + \
            [residual(filters[1], filters[1]) for _ in range(1, 2)]
        self.unit1 = nn.Sequential(*unit1)

        unit2 = [residual(filters[1], filters[2], 2)] + \
            [residual(filters[2], filters[2]) for _ in range(1, 2)]
        self.unit2 = nn.Sequential(*unit2)

        unit3 = [residual(filters[2], filters[3], 2)] + \
            [residual(filters[3], filters[3]) for _ in range(1, 2)]
        self.unit3 = nn.Sequential(*unit3)

        self.unit4 = nn.Sequential(*[BatchNorm2d(filters[3]), relu(), nn.AdaptiveAvgPool2d(1)])

        self.output = nn.Linear(filters[3], num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")    
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.constant_(m.bias, 0)

        self.transform_fn = transform_fn

    def forward(self, x, return_feature=False):
        if self.training and self.transform_fn is not None:
            x = self.transform_fn(x)
        x = self.init_conv(x)
        x = self.unit1(x)
        x = self.unit2(x)
        x = self.unit3(x)
        f = self.unit4(x)
        c = self.output(f.squeeze())
        if return_feature:
            return [c, f]
        else:
            return c

    def update_batch_stats(self, flag):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.update_batch_stats = flag


# ---------------------------------------------------------------- lib/algs/vat.py
class VAT(nn.Module):
    def __init__(self, eps=1.0, xi=1e-6, n_iteration=1):
        super().__init__()
        self.eps = eps
        self.xi = xi
        self.n_iteration = n_iteration

    def kld(self, q_logit, p_logit):
        q = q_logit.softmax(1)
        qlogp = (q * self.__logsoftmax(p_logit)).sum(1)
        qlogq = (q * self.__logsoftmax(q_logit)).sum(1)
        return qlogq - qlogp

    def normalize(self, v):
        v = v / (1e-12 + self.__reduce_max(v.abs(), range(1, len(v.shape))))
        v = v / (1e-6 + v.pow(2).sum((1,2,3),keepdim=True)).sqrt()
        return v

    def forward(self, x, y, model, mask):
        model.update_batch_stats(False)
        d = torch.randn_like(x)
        d = self.normalize(d)
        for _ in range(self.n_iteration):
            d.requires_grad = True
            x_hat = x + self.xi * d
            y_hat = model(x_hat)
            kld = self.kld(y.detach(), y_hat).mean()
            d = torch.autograd.grad(kld, d)[0]
            d = self.normalize(d).detach()
        x_hat = x + self.eps * d
        y_hat = model(x_hat)
        # NOTE:
        # Original implimentation of VAT defines KL(P(y|x)||P(x|x+r_adv)) as loss function
        # However, Avital Oliver's implimentation use KL(P(y|x+r_adv)||P(y|x)) as loss function of VAT
        # see issue https://github.com/brain-research/realistic-ssl-evaluation/issues/27
        loss = (self.kld(y_hat, y.detach()) * mask).mean()
        model.update_batch_stats(True)
        return loss

    def __reduce_max(self, v, idx_list):
        for i in idx_list:
            v = v.max(i, keepdim=True)[0]
        return v

    def __logsoftmax(self,x):
        xdev = x - x.max(1, keepdim=True)[0]
        lsm = xdev - xdev.exp().sum(1, keepdim=True).log()
        return lsm

# ---------------------------------------------------------------- config.py (reduced) and lib/datasets stand-in
class SyntheticSVHN:
    """Same interface as lib/datasets/svhn.SVHN(root, split): (image, label) pairs, label -1 in u_train."""
    SIZES = {"l_train": 100, "u_train": 3000, "val": 200, "test": 500}

    def __init__(self, root, split):
        protos = np.random.RandomState(5).randn(10, 3, 4, 4).astype(np.float32)
        rng = np.random.RandomState({"l_train": 1, "u_train": 2, "val": 3, "test": 4}[split])
        n = self.SIZES[split]
        labels = np.arange(n) % 10 if split == "l_train" else rng.randint(0, 10, n)
        up = np.repeat(np.repeat(protos[labels], 4, axis=2), 4, axis=3)
        self.dataset = {"images": (up + 2.0 * rng.randn(n, 3, 16, 16)).astype(np.float32),
                        "labels": labels if split != "u_train" else -np.ones(n, dtype=np.int64)}

    def __getitem__(self, idx):
        return self.dataset["images"][idx], self.dataset["labels"][idx]

    def __len__(self):
        return len(self.dataset["images"])


config = {
    "shared": {"iteration": 80, "warmup": 32, "lr_decay_iter": 64, "lr_decay_factor": 0.2, "batch_size": 100},
    "svhn": {"transform": [False, True, False], "dataset": SyntheticSVHN, "num_classes": 10},
    "VAT": {"xi": 1e-6, "eps": {"cifar10": 6, "svhn": 1}, "consis_coef": 0.3, "lr": 3e-3},
}


class RandomSampler(torch.utils.data.Sampler):
    """ sampling without replacement """
    def __init__(self, num_data, num_sample):
        iterations = num_sample // num_data + 1
        self.indices = torch.cat([torch.randperm(num_data) for _ in range(iterations)]).tolist()[:num_sample]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


def accuracy(model, loader, n, device):
    with torch.no_grad():
        model.eval()
        sum_acc = 0.
        for input, target in loader:
            input, target = input.to(device).float(), target.to(device).long()
            pred_label = model(input).max(1)[1]
            sum_acc += (pred_label == target).float().sum()
        model.train()
    return sum_acc / float(n)


# ---------------------------------------------------------------- train.py
def main():
    class args:
        alg, em, validation, dataset, root = "VAT", 0, 25000, "svhn", "data"
    device = "cpu"

    dataset_cfg = config[args.dataset]
    transform_fn = transform(*dataset_cfg["transform"])  # transform function (flip, crop, noise)

    l_train_dataset = dataset_cfg["dataset"](args.root, "l_train")
    u_train_dataset = dataset_cfg["dataset"](args.root, "u_train")
    val_dataset = dataset_cfg["dataset"](args.root, "val")
    test_dataset = dataset_cfg["dataset"](args.root, "test")

    shared_cfg = config["shared"]
    # batch size = 0.5 x batch size
    l_loader = DataLoader(
        l_train_dataset, shared_cfg["batch_size"]//2, drop_last=True,
        sampler=RandomSampler(len(l_train_dataset), shared_cfg["iteration"] * shared_cfg["batch_size"]//2)
    )
    u_loader = DataLoader(
        u_train_dataset, shared_cfg["batch_size"]//2, drop_last=True,
        sampler=RandomSampler(len(u_train_dataset), shared_cfg["iteration"] * shared_cfg["batch_size"]//2)
    )

    val_loader = DataLoader(val_dataset, 128, shuffle=False, drop_last=False)
    test_loader = DataLoader(test_dataset, 128, shuffle=False, drop_last=False)

    alg_cfg = config[args.alg]

    model = WRN(1, dataset_cfg["num_classes"], transform_fn).to(device)
    optimizer = optim.Adam(model.parameters(), lr=alg_cfg["lr"])

    ssl_obj = VAT(alg_cfg["eps"][args.dataset], alg_cfg["xi"], 1)

    first = accuracy(model, test_loader, len(test_dataset), device)
    print("test accuracy before training : {:.4f}".format(first))

    iteration = 0
    maximum_val_acc = 0
    s = time.time()
    for l_data, u_data in zip(l_loader, u_loader):
        iteration += 1
        l_input, target = l_data
        l_input, target = l_input.to(device).float(), target.to(device).long()

        u_input, dummy_target = u_data
        u_input, dummy_target = u_input.to(device).float(), dummy_target.to(device).long()

        target = torch.cat([target, dummy_target], 0)
        unlabeled_mask = (target == -1).float()

        inputs = torch.cat([l_input, u_input], 0)
        outputs = model(inputs)

        # ramp up exp(-5(1 - t)^2)
        coef = alg_cfg["consis_coef"] * math.exp(-5 * (1 - min(iteration/shared_cfg["warmup"], 1))**2)
        ssl_loss = ssl_obj(inputs, outputs.detach(), model, unlabeled_mask) * coef

        # supervised loss
        cls_loss = F.cross_entropy(outputs, target, reduction="none", ignore_index=-1).mean()

        loss = cls_loss + ssl_loss

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        # display
        if iteration == 1 or (iteration % 20) == 0:
            wasted_time = time.time() - s
            print("iteration [{}/{}] cls loss : {:.6e}, SSL loss : {:.6e}, coef : {:.5e}, lr : {}".format(
                iteration, shared_cfg["iteration"], cls_loss.item(), ssl_loss.item(), coef, optimizer.param_groups[0]["lr"]))
            s = time.time()

        # validation
        if (iteration % args.validation) == 0 or iteration == shared_cfg["iteration"]:
            acc = accuracy(model, val_loader, len(val_dataset), device)
            print("varidation accuracy : {}".format(acc))
            if maximum_val_acc < acc:
                maximum_val_acc = acc
                test_acc = accuracy(model, test_loader, len(test_dataset), device)
                print("test accuracy : {}".format(test_acc))
        # lr decay
        if iteration == shared_cfg["lr_decay_iter"]:
            optimizer.param_groups[0]["lr"] *= shared_cfg["lr_decay_factor"]

    print("test acc : {}".format(test_acc))
    print("[summary] test accuracy first={:.4f} last={:.4f} increased={}".format(first, test_acc, test_acc > first))


if __name__ == "__main__":
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    main()
