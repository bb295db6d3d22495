# Source: hustzxd/EfficientPyTorch, examples/classifier_imagenet/main_sq.py (main_worker) + utils/wrapper/replace_conv.py + models/_modules/sq.py (Conv2dSQ) + examples/__init__.py (add_weight_decay), commit 087ce143de6b1fdb0bb1cddfbd6e4588a0b36c53
# Report: https://github.com/hustzxd/EfficientPyTorch/issues/1
# Sparse (pruned) fine-tuning: a trained CNN has every Conv2d except the first replaced by
# Conv2dSQ (magnitude pruning mask applied to the copied weight), then is fine-tuned with SGD
# (momentum, weight decay groups from add_weight_decay, step LR schedule) and validated every
# epoch. ImageNet / torchvision models are replaced by a small VGG-style CNN on synthetic 3x16x16
# images of 10 classes; the dense phase (ADMM in the original) is plain SGD training; only the
# pruning path of Conv2dSQ is used (nbits_a = nbits_w = -1).
import time
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)


class Args:
    lr = 0.05
    momentum = 0.9
    weight_decay = 1e-4
    dense_epochs = 4
    epochs = 4
    sparsity = 0.9
    batch_size = 64


def get_sparsity_mask(param, sparsity):
    """Keep the (1 - sparsity) largest-magnitude weights."""
    k = int(param.numel() * sparsity)
    threshold = param.detach().abs().flatten().kthvalue(k).values
    return (param.detach().abs() > threshold).float()


def sin_ins(iter, total_iter, s_exp, s_init=0.3, beta=0.5, INS=True):
    return s_exp


class Conv2dSQ(nn.Conv2d):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1,
                 padding=0, dilation=1, groups=1, bias=True, **kwargs_q):
        super(Conv2dSQ, self).__init__(
            in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size,
            stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias)
        self.kwargs_q = kwargs_q
        self.sparsity = kwargs_q['sparsity']
        self.total_iter = kwargs_q['total_iter']
        self.get_sparsity = partial(sin_ins, total_iter=self.total_iter, s_exp=self.sparsity, INS=False)
        self.register_buffer('init_state', torch.zeros(3))  # [sparsity, qa, qw]
        if self.sparsity <= 1e-5:
            self.register_buffer('mask', None)
        else:
            self.register_buffer('mask', torch.ones_like(self.weight))

    def forward(self, x):
        # 1. pruning weights
        if self.sparsity > 1e-5:
            if self.init_state[0] == 0:  # post-training sparsity
                self.mask.copy_(get_sparsity_mask(self.weight, self.sparsity))
                self.weight.data.mul_(self.mask)
                self.init_state[0] += 1
            w_s = self.weight * self.mask
        else:
            w_s = self.weight
        return F.conv2d(x, w_s, self.bias, self.stride, self.padding, self.dilation, self.groups)


is_first = True


def replace_conv(conv_ori, conv_name, **kwargs):
    global is_first
    if isinstance(conv_ori, nn.Conv2d):
        if is_first:
            is_first = False
            return conv_ori
        else:
            m = conv_ori
            has_bias = m.bias is not None
            my_m = globals()[conv_name](m.in_channels, m.out_channels, m.kernel_size, m.stride,
                                        m.padding, m.dilation, groups=m.groups, bias=has_bias,
                                        **kwargs)
            conv_st_dict = m.state_dict()
            W = conv_st_dict['weight']
            my_m.weight.data.copy_(W)
            if has_bias:
                bias = conv_st_dict['bias']
                my_m.bias.data.copy_(bias)
            my_m.to(m.weight.device)
            return my_m
    else:
        return conv_ori


def replace_conv_recursively(model, conv_name, **kwargs):
    for module_name in model._modules:
        model._modules[module_name] = replace_conv(model._modules[module_name], conv_name, **kwargs)
        if len(model._modules[module_name]._modules) > 0:
            replace_conv_recursively(model._modules[module_name], conv_name, **kwargs)
    return model


def add_weight_decay(model, weight_decay, skip_keys):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue  # frozen weights
        added = False
        for skip_key in skip_keys:
            if skip_key in name:
                no_decay.append(param)
                added = True
                break
        if not added:
            decay.append(param)
    return [{'params': no_decay, 'weight_decay': 0.}, {'params': decay, 'weight_decay': weight_decay}]


class VGGSmall(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(32 * 4 * 4, num_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def make_data(n, protos, gen):
    y = torch.randint(0, 10, (n,), generator=gen)
    x = protos[y] + 2.2 * torch.randn(n, 3, 16, 16, generator=gen)
    return x, y


def train(loader, model, criterion, optimizer):
    model.train()
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def validate(loader, model, criterion):
    model.eval()
    correct, n, total_loss = 0, 0, 0.0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            total_loss += criterion(out, y).item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            n += len(y)
    return 100.0 * correct / n, total_loss / n


def main():
    t0 = time.time()
    args = Args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    protos = torch.randn(10, 3, 16, 16, generator=gen)
    x_tr, y_tr = make_data(1280, protos, gen)
    x_va, y_va = make_data(512, protos, gen)
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_tr, y_tr),
                                               batch_size=args.batch_size, shuffle=True)
    val_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_va, y_va), batch_size=256)
    args.batch_num = len(train_loader)

    model = VGGSmall()

    # define loss function (criterion) and optimizer
    criterion = nn.CrossEntropyLoss()
    params = add_weight_decay(model, weight_decay=args.weight_decay, skip_keys=['expand_', 'scale', 'alpha'])
    optimizer = torch.optim.SGD(params, args.lr, momentum=args.momentum)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.1)

    # dense phase
    for epoch in range(args.dense_epochs):
        train(train_loader, model, criterion, optimizer)
        acc1, _ = validate(val_loader, model, criterion)
    print('dense model: acc1 %.2f' % acc1)

    # prune the model
    replace_conv_recursively(model, 'Conv2dSQ', nbits_a=-1, nbits_w=-1, sparsity=args.sparsity,
                             total_iter=args.batch_num * args.epochs, INS=False, beta=0.5)
    acc1, _ = validate(val_loader, model, criterion)
    print('after pruning to sparsity %.2f: acc1 %.2f' % (args.sparsity, acc1))
    for epoch in range(args.epochs):
        train(train_loader, model, criterion, optimizer)
        scheduler.step()
        acc1, val_loss = validate(val_loader, model, criterion)
        print('fine-tune epoch %d: val loss %.4f acc1 %.2f' % (epoch, val_loss, acc1))
    print('done in %.1fs' % (time.time() - t0))


if __name__ == '__main__':
    main()
