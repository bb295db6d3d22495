# Source: dayu11/Differentially-Private-Deep-Learning, vision/DP-SGD/main.py + vision/DP-SGD/utils.py +
# vision/DP-SGD/models/resnet_cifar.py + vision/DP-SGD/rdp_accountant.py, commit 73555c8eb96eabfb441172525bd32c8d0a771d37
# https://github.com/dayu11/Differentially-Private-Deep-Learning
#
# DP-SGD as written in this repo: CrossEntropyLoss(reduction='sum') so per-sample gradients are not averaged,
# loss.backward() fills p.grad, then process_grad_batch() clips every per-sample gradient to norm `clip`,
# OVERWRITES p.grad with the mean of the clipped per-sample gradients and zeroes grad_batch in place, and Gaussian
# noise N(0, sigma*clip/batchsize) is added to p.grad.data before optimizer.step(); sigma comes from an RDP
# accountant for (eps, delta); the ResNet uses affine-free GroupNorm (no BatchNorm under DP) and a zero-padded
# identity shortcut; the reported step loss is divided by the batch size; weight decay 0; step LR decay.
# Adaptation: backpack (BatchGrad / extend) is not installed, so BatchGrad is replaced by batch_grad(): the same
# p.grad_batch tensors computed with torch.func.vmap(grad(functional_call)); CIFAR-10 is replaced by 2048 train /
# 512 test synthetic 3x16x16 images of 10 classes; resnet20 [3,3,3] -> [1,1,1]; batchsize 1000 -> 256,
# n_epoch 100 -> 5, lr 0.1 -> 0.5; cuda -> cpu; no checkpoint file; the accountant is copied (helpers unused by
# compute_rdp/get_privacy_spent dropped).
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from scipy import special
from torch.func import functional_call, grad, vmap


# --------------------------------------------------------------------------------------- rdp_accountant.py
def _log_add(logx, logy):
  a, b = min(logx, logy), max(logx, logy)
  if a == -np.inf:  # adding 0
    return b
  return math.log1p(math.exp(a - b)) + b  # log1p(x) = log(x + 1)


def _log_sub(logx, logy):
  if logx < logy:
    raise ValueError("The result of subtraction must be non-negative.")
  if logy == -np.inf:  # subtracting 0
    return logx
  if logx == logy:
    return -np.inf  # 0 is represented as -np.inf in the log space.
  try:
    return math.log(math.expm1(logx - logy)) + logy  # expm1(x) = exp(x) - 1
  except OverflowError:
    return logx


def _compute_log_a_int(q, sigma, alpha):
  log_a = -np.inf
  for i in range(alpha + 1):
    log_coef_i = (
        math.log(special.binom(alpha, i)) + i * math.log(q) +
        (alpha - i) * math.log(1 - q))
    s = log_coef_i + (i * i - i) / (2 * (sigma**2))
    log_a = _log_add(log_a, s)
  return float(log_a)


def _compute_log_a_frac(q, sigma, alpha):
  log_a0, log_a1 = -np.inf, -np.inf
  i = 0
  z0 = sigma**2 * math.log(1 / q - 1) + .5
  while True:  # do ... until loop
    coef = special.binom(alpha, i)
    log_coef = math.log(abs(coef))
    j = alpha - i
    log_t0 = log_coef + i * math.log(q) + j * math.log(1 - q)
    log_t1 = log_coef + j * math.log(q) + i * math.log(1 - q)
    log_e0 = math.log(.5) + _log_erfc((i - z0) / (math.sqrt(2) * sigma))
    log_e1 = math.log(.5) + _log_erfc((z0 - j) / (math.sqrt(2) * sigma))
    log_s0 = log_t0 + (i * i - i) / (2 * (sigma**2)) + log_e0
    log_s1 = log_t1 + (j * j - j) / (2 * (sigma**2)) + log_e1
    if coef > 0:
      log_a0 = _log_add(log_a0, log_s0)
      log_a1 = _log_add(log_a1, log_s1)
    else:
      log_a0 = _log_sub(log_a0, log_s0)
      log_a1 = _log_sub(log_a1, log_s1)
    i += 1
    if max(log_s0, log_s1) < -30:
      break
  return _log_add(log_a0, log_a1)


def _compute_log_a(q, sigma, alpha):
  if float(alpha).is_integer():
    return _compute_log_a_int(q, sigma, int(alpha))
  else:
    return _compute_log_a_frac(q, sigma, alpha)


def _log_erfc(x):
  return math.log(2) + special.log_ndtr(-x * 2**.5)


def _compute_eps(orders, rdp, delta):
  orders_vec = np.atleast_1d(orders)
  rdp_vec = np.atleast_1d(rdp)
  eps = rdp_vec - math.log(delta) / (orders_vec - 1)
  idx_opt = np.nanargmin(eps)  # Ignore NaNs
  return eps[idx_opt], orders_vec[idx_opt]


def _compute_rdp(q, sigma, alpha):
  if q == 0:
    return 0
  if q == 1.:
    return alpha / (2 * sigma**2)
  if np.isinf(alpha):
    return np.inf
  return _compute_log_a(q, sigma, alpha) / (alpha - 1)


def compute_rdp(q, noise_multiplier, steps, orders):
  if np.isscalar(orders):
    rdp = _compute_rdp(q, noise_multiplier, orders)
  else:
    rdp = np.array([_compute_rdp(q, noise_multiplier, order)
                    for order in orders])
  return rdp * steps


def get_privacy_spent(orders, rdp, target_eps=None, target_delta=None):
  eps, opt_order = _compute_eps(orders, rdp, target_delta)
  return eps, target_delta, opt_order


# ------------------------------------------------------------------------------------------------ utils.py
def process_grad_batch(params, clipping=1):
    n = params[0].grad_batch.shape[0]
    grad_norm_list = torch.zeros(n)
    for p in params:
        flat_g = p.grad_batch.reshape(n, -1)
        current_norm_list = torch.norm(flat_g, dim=1)
        grad_norm_list += torch.square(current_norm_list)
    grad_norm_list = torch.sqrt(grad_norm_list)
    scaling = clipping/grad_norm_list
    scaling[scaling>1] = 1

    for p in params:
        p_dim = len(p.shape)
        scaling = scaling.view([n] + [1]*p_dim)
        p.grad_batch *= scaling
        p.grad = torch.mean(p.grad_batch, dim=0)
        p.grad_batch.mul_(0.)


def loop_for_sigma(q, T, eps, delta, cur_sigma, interval, rdp_orders=32, rgp=True):
    while True:
        orders = np.arange(2, rdp_orders, 0.1)
        steps = T
        if(rgp):
            rdp = compute_rdp(q, cur_sigma, steps, orders) * 2 ## when using residual gradients, the sensitivity is sqrt(2)
        else:
            rdp = compute_rdp(q, cur_sigma, steps, orders)
        cur_eps, _, opt_order = get_privacy_spent(orders, rdp, target_delta=delta)
        if(cur_eps<eps and cur_sigma>interval):
            cur_sigma -= interval
            previous_eps = cur_eps
        else:
            cur_sigma += interval
            break
    return cur_sigma, previous_eps


## interval: init search inerval
## rgp: use residual gradient perturbation or not
def get_sigma(q, T, eps, delta, init_sigma=10, interval=1., rgp=True):
    cur_sigma = init_sigma

    cur_sigma, _ = loop_for_sigma(q, T, eps, delta, cur_sigma, interval, rgp=rgp)
    interval /= 10
    cur_sigma, _ = loop_for_sigma(q, T, eps, delta, cur_sigma, interval, rgp=rgp)
    interval /= 10
    cur_sigma, previous_eps = loop_for_sigma(q, T, eps, delta, cur_sigma, interval, rgp=rgp)
    return cur_sigma, previous_eps


def adjust_learning_rate(optimizer, init_lr, epoch, all_epoch):
    """decrease the learning rate at 100 and 150 epoch"""
    decay = 1.0
    if(epoch<all_epoch*0.5):
        decay = 1.
    elif(epoch<all_epoch*0.75):
        decay = 10.
    else:
        decay = 100.

    for param_group in optimizer.param_groups:
        param_group['lr'] = init_lr / decay
    return init_lr / decay


# -------------------------------------------------------------------------------- models/resnet_cifar.py
def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


gn_groups = 4


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()

        self.conv1 = conv3x3(inplanes, planes, stride)
        self.gn1 = nn.GroupNorm(gn_groups, planes, affine=False)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.gn2 = nn.GroupNorm(gn_groups, planes, affine=False)

        self.downsample = downsample

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.gn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.gn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)
            identity = torch.cat((identity, torch.zeros_like(identity)), 1)

        out += identity
        out = self.relu(out)

        return out


class ResNet(nn.Module):

    def __init__(self, block, layers, num_classes=10):
        super(ResNet, self).__init__()

        self.num_layers = sum(layers)
        self.inplanes = 16
        self.conv1 = conv3x3(3, 16)
        self.gn1 = nn.GroupNorm(gn_groups, 16, affine=False)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, 16, layers[0])
        self.layer2 = self._make_layer(block, 32, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 64, layers[2], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(64, num_classes)

        # standard initialization
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.GroupNorm):
                try:
                    m.weight.data.fill_(1)
                    m.bias.data.zero_()
                except:
                    pass

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1:
            downsample = nn.Sequential(
                nn.AvgPool2d(1, stride=stride),
                nn.GroupNorm(gn_groups, self.inplanes, affine=False),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes
        for _ in range(1, blocks):
            layers.append(block(planes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.gn1(x)
        x = self.relu(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)

        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)

        return x


def resnet8():
    return ResNet(BasicBlock, [1, 1, 1])


# ---------------------------------------------------------------------------- backpack BatchGrad stand-in
def batch_grad(net, loss_func, inputs, targets):
    """Sets p.grad_batch (per-sample gradients of the summed loss), as backpack's BatchGrad extension does."""
    params = {k: v.detach() for k, v in net.named_parameters()}

    def sample_loss(p, x, y):
        out = functional_call(net, p, (x.unsqueeze(0),))
        return loss_func(out, y.unsqueeze(0))

    grads = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, inputs, targets)
    for name, p in net.named_parameters():
        p.grad_batch = grads[name]


# ------------------------------------------------------------------------------------------------- data
def get_data_loader(batchsize, n_train=2048, n_test=512, seed=0):
    """CIFAR-10 stand-in: 10 classes of smooth colour prototypes with noise and random shifts."""
    g = torch.Generator().manual_seed(seed)
    protos = nn.functional.interpolate(torch.randn(10, 3, 4, 4, generator=g), size=16, mode='bilinear',
                                       align_corners=False)

    def make(n):
        y = torch.randint(0, 10, (n,), generator=g)
        x = protos[y] + 0.9 * torch.randn(n, 3, 16, 16, generator=g)
        return torch.utils.data.TensorDataset(x, y)

    trainset, testset = make(n_train), make(n_test)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=batchsize, shuffle=True, num_workers=0)
    testloader = torch.utils.data.DataLoader(testset, batch_size=batchsize, shuffle=False, num_workers=0)
    return trainloader, testloader, len(trainset), len(testset)


# ------------------------------------------------------------------------------------------------- main.py
class args:
    dataset = 'cifar10'
    seed = 2
    weight_decay = 0.
    batchsize = 256
    n_epoch = 5
    lr = 0.5
    momentum = 0.9
    private = True
    clip = 5.
    eps = 8.
    delta = 1e-5


def main():
    batch_size = args.batchsize
    if(args.seed != -1):
        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        random.seed(args.seed)

    print('==> Preparing data..')
    trainloader, testloader, n_training, n_test = get_data_loader(batch_size)
    print('# of training examples: ', n_training, '# of testing examples: ', n_test)

    print('\n==> Computing noise scale for privacy budget (%.1f, %f)-DP'%(args.eps, args.delta))
    sampling_prob=args.batchsize/n_training
    steps = int(args.n_epoch/sampling_prob)
    sigma, eps = get_sigma(sampling_prob, steps, args.eps, args.delta, rgp=False)
    noise_multiplier = sigma
    print('noise scale: ', noise_multiplier, 'privacy guarantee: ', eps)

    net = resnet8()

    if(args.private):
        loss_func = nn.CrossEntropyLoss(reduction='sum')
    else:
        loss_func = nn.CrossEntropyLoss(reduction='mean')

    optimizer = optim.SGD(
            net.parameters(),
            lr=args.lr,
            momentum=args.momentum,
            weight_decay=args.weight_decay)

    def train(epoch):
        print('\nEpoch: %d' % epoch)
        net.train()
        train_loss = 0
        correct = 0
        total = 0
        t0 = time.time()
        steps = n_training//args.batchsize

        loader = iter(trainloader)

        for batch_idx in range(steps):
            inputs, targets = next(loader)

            if(args.private):
                optimizer.zero_grad()
                outputs = net(inputs)
                loss = loss_func(outputs, targets)
                loss.backward()
                batch_grad(net, loss_func, inputs, targets)
                process_grad_batch(list(net.parameters()), args.clip) # clip gradients and sum clipped gradients
                ## add noise to gradient
                for p in net.parameters():
                    grad_noise = torch.normal(0, noise_multiplier*args.clip/args.batchsize, size=p.grad.shape, device=p.grad.device)
                    p.grad.data += grad_noise
            else:
                optimizer.zero_grad()
                outputs = net(inputs)
                loss = loss_func(outputs, targets)
                loss.backward()
            optimizer.step()
            step_loss = loss.item()
            if(args.private):
                step_loss /= inputs.shape[0]
            train_loss += step_loss
            _, predicted = torch.max(outputs.data, 1)
            total += targets.size(0)
            correct += predicted.eq(targets.data).float().cpu().sum()
            acc = 100.*float(correct)/float(total)
        t1 = time.time()
        print('Train loss:%.5f'%(train_loss/(batch_idx+1)), 'time: %d s'%(t1-t0), 'train acc:', acc, end=' ')
        return (train_loss/batch_idx, acc)

    def test(epoch):
        net.eval()
        test_loss = 0
        correct = 0
        total = 0
        with torch.no_grad():
            for batch_idx, (inputs, targets) in enumerate(testloader):
                outputs = net(inputs)
                loss = loss_func(outputs, targets)
                step_loss = loss.item()
                if(args.private):
                    step_loss /= inputs.shape[0]

                test_loss += step_loss
                _, predicted = torch.max(outputs.data, 1)
                total += targets.size(0)
                correct_idx = predicted.eq(targets.data).cpu()
                correct += correct_idx.sum()

            acc = 100.*float(correct)/float(total)
            print('test loss:%.5f'%(test_loss/(batch_idx+1)), 'test acc:', acc)
        return (test_loss/batch_idx, acc)

    print('\n==> Strat training')
    accs = []
    for epoch in range(0, args.n_epoch):
        lr = adjust_learning_rate(optimizer, args.lr, epoch, all_epoch=args.n_epoch)
        train_loss, train_acc = train(epoch)
        test_loss, test_acc = test(epoch)
        accs.append(test_acc)
    print(f"[summary] test acc first={accs[0]:.2f} last={accs[-1]:.2f} increased={accs[-1] > accs[0]}")


if __name__ == '__main__':
    main()
