# Source: Tony-Y/pytorch_warmup, examples/emnist/main.py (Net, train, test, main), pytorch_warmup/base.py (BaseWarmup, LinearWarmup), pytorch_warmup/untuned.py, commit ed2b7bdfa43cd11b346fd4bfb2f5f7f055531bab
# Report: https://github.com/Tony-Y/pytorch_warmup/issues/12
# The pytorch_warmup EMNIST example: a small CNN, AdamW, CosineAnnealingLR over all steps with
# an untuned linear warmup applied through warmup_scheduler.dampening(), one scheduler step per
# batch, written with the per-batch order from the issue. The warmup classes are inlined
# (pytorch_warmup is not installed here); EMNIST is replaced by synthetic 28x28 images of 47
# classes; CSV history files are not written; 3 epochs, beta2 0.98 (a 100-step warmup).
import argparse
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim import Optimizer


class BaseWarmup(object):
    def __init__(self, optimizer, warmup_params, last_step=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError('{} is not an Optimizer'.format(type(optimizer).__name__))
        self.optimizer = optimizer
        self.warmup_params = warmup_params
        self.last_step = last_step
        self.lrs = [group['lr'] for group in self.optimizer.param_groups]
        self.dampen()

    def dampen(self, step=None):
        if step is None:
            step = self.last_step + 1
        self.last_step = step
        for group, params in zip(self.optimizer.param_groups, self.warmup_params):
            omega = self.warmup_factor(step, **params)
            group['lr'] *= omega

    @contextmanager
    def dampening(self):
        for group, lr in zip(self.optimizer.param_groups, self.lrs):
            group['lr'] = lr
        yield
        self.lrs = [group['lr'] for group in self.optimizer.param_groups]
        self.dampen()

    def warmup_factor(self, step, **params):
        raise NotImplementedError


class LinearWarmup(BaseWarmup):
    def __init__(self, optimizer, warmup_period, last_step=-1):
        warmup_params = [dict(warmup_period=x) for x in warmup_period]
        super(LinearWarmup, self).__init__(optimizer, warmup_params, last_step)

    def warmup_factor(self, step, warmup_period):
        return min(1.0, (step+1) / warmup_period)


class UntunedLinearWarmup(LinearWarmup):
    def __init__(self, optimizer, last_step=-1):
        def warmup_period_fn(beta2):
            return int(2.0 / (1.0-beta2))
        warmup_period = [warmup_period_fn(x['betas'][1]) for x in optimizer.param_groups]
        super(UntunedLinearWarmup, self).__init__(optimizer, warmup_period, last_step)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 20, 5, 1)
        self.conv2 = nn.Conv2d(20, 50, 5, 1)
        self.fc1 = nn.Linear(4*4*50, 500)
        self.fc2 = nn.Linear(500, 47)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(x, 2, 2)
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2, 2)
        x = x.view(-1, 4*4*50)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def train(args, model, device, train_loader, optimizer, lr_scheduler,
          warmup_scheduler, epoch, history):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        lr = optimizer.param_groups[0]['lr']
        data, target = data.to(device), target.to(device)
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()
        with warmup_scheduler.dampening():
            lr_scheduler.step()
        if (batch_idx+1) % args.log_interval == 0:
            loss = loss.item()
            step = warmup_scheduler.last_step
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f} LR: {:.6f}'.format(
                epoch, (batch_idx+1) * len(data), len(train_loader) * len(data),
                100. * (batch_idx+1) / len(train_loader), loss, lr))
            history.append((epoch, step, loss, lr))


def test(args, model, device, test_loader, epoch, evaluation):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)
    test_acc = 100. * correct / len(test_loader.dataset)
    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(test_loader.dataset), test_acc))
    evaluation.append((epoch, test_loss, test_acc))


def make_emnist_like(n_per_class, g, prototypes):
    y = torch.arange(47).repeat_interleave(n_per_class)
    x = prototypes[y] + 0.6 * torch.randn(len(y), 1, 28, 28, generator=g)
    return torch.utils.data.TensorDataset((x - 0.1751) / 0.3332, y)


def main():
    parser = argparse.ArgumentParser(description='PyTorch EMNIST Example')
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--test-batch-size', type=int, default=1000)
    parser.add_argument('--epochs', type=int, default=3)
    parser.add_argument('--lr', type=float, default=0.01)
    parser.add_argument('--lr-min', type=float, default=1e-5)
    parser.add_argument('--wd', type=float, default=0.01)
    parser.add_argument('--beta2', type=float, default=0.98)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--log-interval', type=int, default=10)
    args = parser.parse_args([])

    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    g = torch.Generator().manual_seed(args.seed)
    prototypes = F.avg_pool2d(torch.rand(47, 1, 28, 28, generator=g), 5, 1, 2) * 3
    train_loader = torch.utils.data.DataLoader(make_emnist_like(40, g, prototypes),
                                               batch_size=args.batch_size, shuffle=True, drop_last=True)
    test_loader = torch.utils.data.DataLoader(make_emnist_like(10, g, prototypes),
                                              batch_size=args.test_batch_size, shuffle=False)
    history, evaluation = [], []

    model = Net().to(device)

    optimizer = optim.AdamW(model.parameters(), lr=args.lr,
                            betas=(0.9, args.beta2),
                            weight_decay=args.wd)
    num_steps = len(train_loader) * args.epochs
    lr_scheduler = optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=num_steps, eta_min=args.lr_min)
    warmup_scheduler = UntunedLinearWarmup(optimizer)

    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, lr_scheduler,
              warmup_scheduler, epoch, history)
        test(args, model, device, test_loader, epoch, evaluation)


if __name__ == '__main__':
    main()
