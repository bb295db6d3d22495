# Source: skhu101/GM-NAS, WS-GM/nasbench201/train_search.py, commit a69837daca5b845a4d42e5fb2a76e90b929db3b9
# Report: https://github.com/skhu101/GM-NAS/issues/4
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Args:
    batch_size = 64
    learning_rate = 0.025
    learning_rate_min = 0.001
    momentum = 0.9
    weight_decay = 3e-4
    grad_clip = 5
    arch_learning_rate = 3e-4
    arch_weight_decay = 1e-3
    train_portion = 0.5
    warmup_epoch = 2
    epochs = 8
    report_freq = 10


args = Args()
SEARCH_SPACE = ['none', 'skip_connect', 'nor_conv_1x1', 'nor_conv_3x3', 'avg_pool_3x3']


class AvgrageMeter(object):
    def __init__(self):
        self.avg, self.sum, self.cnt = 0, 0, 0

    def update(self, val, n=1):
        self.sum += val * n
        self.cnt += n
        self.avg = self.sum / self.cnt


def accuracy(output, target):
    pred = output.argmax(1)
    return pred.eq(target).float().mean() * 100.0


class IndexedImages(Dataset):
    """Synthetic 10-class 3x8x8 images; remembers which indices were drawn."""

    def __init__(self, n):
        g = torch.Generator().manual_seed(1)
        self.templates = torch.randn(10, 3, 8, 8, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.x = self.templates[self.y] + 1.2 * torch.randn(n, 3, 8, 8, generator=g)
        self.seen = set()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        self.seen.add(int(i))
        return self.x[i], self.y[i]


def op(name, C):
    if name == 'none':
        return None
    if name == 'skip_connect':
        return nn.Identity()
    if name == 'avg_pool_3x3':
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    k = 1 if name == 'nor_conv_1x1' else 3
    return nn.Sequential(nn.ReLU(), nn.Conv2d(C, C, k, padding=k // 2, bias=False), nn.BatchNorm2d(C))


class MixedOp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.names = SEARCH_SPACE
        self._ops = nn.ModuleList([op(n, C) or nn.Identity() for n in SEARCH_SPACE])

    def forward(self, x, weights):
        return sum(w * (o(x) if n != 'none' else x.mul(0.)) for n, w, o in zip(self.names, weights, self._ops))


class TinyNetwork(nn.Module):
    def __init__(self, C, num_classes, num_edge, criterion):
        super().__init__()
        self._criterion = criterion
        self.stem = nn.Sequential(nn.Conv2d(3, C, 3, padding=1, bias=False), nn.BatchNorm2d(C))
        self.cells = nn.ModuleList([MixedOp(C) for _ in range(num_edge)])
        self.lastact = nn.Sequential(nn.BatchNorm2d(C), nn.ReLU(inplace=True))
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(C, num_classes)
        self._arch_parameters = (1e-3 * torch.randn(num_edge, len(SEARCH_SPACE))).requires_grad_(True)
        arch_params = set(id(m) for m in self.arch_parameters())
        self._model_params = [m for m in self.parameters() if id(m) not in arch_params]
        self.optimizer = torch.optim.SGD(self._model_params, args.learning_rate,
                                         momentum=args.momentum, weight_decay=args.weight_decay)

    def arch_parameters(self):
        return [self._arch_parameters]

    def get_weights(self):
        return list(self.stem.parameters()) + list(self.cells.parameters())

    def forward(self, x):
        alphas = F.softmax(self._arch_parameters, dim=-1)
        h = self.stem(x)
        for i, cell in enumerate(self.cells):
            h = cell(h, alphas[i])
        out = self.global_pooling(self.lastact(h)).flatten(1)
        return self.classifier(out)

    def _loss(self, input, target, return_logits=False):
        logits = self(input)
        loss = self._criterion(logits, target)
        return (loss, logits) if return_logits else loss

    def step(self, input, target, args, shared=None):
        Lt, logit_t = self._loss(input, target, return_logits=True)
        Lt.backward()
        nn.utils.clip_grad_norm_(self.get_weights(), args.grad_clip)
        self.optimizer.step()
        return logit_t, Lt

    def genotype(self):
        return [SEARCH_SPACE[int(i)] for i in self._arch_parameters.argmax(-1)]


class Architect(object):
    def __init__(self, model, args):
        self.model = model
        self.optimizer = torch.optim.Adam(self.model.arch_parameters(), lr=args.arch_learning_rate,
                                          betas=(0.5, 0.999), weight_decay=args.arch_weight_decay)

    def step(self, input_train, target_train, input_valid, target_valid, *a, **kw):
        loss = self.model._loss(input_valid, target_valid)
        loss.backward()
        self.optimizer.step()
        return None


def train(train_queue, valid_queue, model, architect, optimizer, lr, epoch):
    objs = AvgrageMeter()
    top1 = AvgrageMeter()

    for step in range(len(train_queue)):
        model.train()

        ## data
        input, target = next(iter(train_queue))
        input_search, target_search = next(iter(valid_queue))

        ## train alpha
        optimizer.zero_grad(); architect.optimizer.zero_grad()
        shared = None
        if epoch >= args.warmup_epoch:
            shared = architect.step(input, target, input_search, target_search,
                                    eta=lr, model_optimizer=optimizer)

        ## train weight
        optimizer.zero_grad(); architect.optimizer.zero_grad()
        logits, loss = model.step(input, target, args, shared=shared)

        n = input.size(0)
        objs.update(loss.item(), n)
        top1.update(accuracy(logits, target).item(), n)

    return top1.avg, objs.avg


def infer(valid_queue, model, criterion):
    objs = AvgrageMeter()
    top1 = AvgrageMeter()
    model.eval()
    with torch.no_grad():
        for step, (input, target) in enumerate(valid_queue):
            logits = model(input)
            loss = criterion(logits, target)
            n = input.size(0)
            objs.update(loss.item(), n)
            top1.update(accuracy(logits, target).item(), n)
    return top1.avg, objs.avg


def main():
    torch.manual_seed(2)
    np.random.seed(2)
    criterion = nn.CrossEntropyLoss()
    train_data = IndexedImages(1536)
    test_data = IndexedImages(1024)
    test_data.x = test_data.templates[test_data.y] + 1.2 * torch.randn(1024, 3, 8, 8, generator=torch.Generator().manual_seed(7))

    num_train = len(train_data)
    indices = list(range(num_train))
    split = int(np.floor(args.train_portion * num_train))

    train_queue = DataLoader(
        train_data, batch_size=args.batch_size,
        sampler=torch.utils.data.sampler.SubsetRandomSampler(indices[:split]))
    valid_queue = DataLoader(
        train_data, batch_size=args.batch_size,
        sampler=torch.utils.data.sampler.SubsetRandomSampler(indices[split:num_train]))
    test_queue = DataLoader(test_data, batch_size=256, shuffle=False)

    model = TinyNetwork(8, 10, 3, criterion)
    architect = Architect(model, args)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        model.optimizer, float(args.epochs), eta_min=args.learning_rate_min)

    for epoch in range(args.epochs):
        lr = scheduler.get_last_lr()[0]
        train_data.seen.clear()
        train_acc, train_obj = train(train_queue, valid_queue, model, architect, model.optimizer, lr, epoch)
        seen_train = len([i for i in train_data.seen if i < split])
        scheduler.step()
        test_acc, test_obj = infer(test_queue, model, criterion)
        print(f"epoch {epoch} lr {lr:.4f} train_acc {train_acc:.2f} train_loss {train_obj:.4f} "
              f"distinct train samples used {seen_train}/{split} test_acc {test_acc:.2f}")
    print('genotype =', model.genotype())
    print(f"final test_acc {test_acc:.2f}")


if __name__ == "__main__":
    main()
