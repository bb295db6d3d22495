# Source: AnnaAraslanova/FBNet, general_functions/dataloaders.py, supernet_main_file.py, supernet_functions/training_functions_supernet.py, supernet_functions/model_supernet.py, commit 7545db69b9459da2b011049dcd723481d9c7eb8d
# Report: https://github.com/AnnaAraslanova/FBNet/pull/4
# FBNet supernet search: the CIFAR-10 train set is split 80/20 by SubsetRandomSampler into a loader
# for the weights (w) and a loader for the architecture parameters (thetas); after warm-up epochs
# each epoch trains w on the first and thetas on the second, then validates on the test set.
# CIFAR-10 is replaced by synthetic 3x8x8 images, the 22 searchable FBNet blocks by 3 mixed
# layers of {skip, conv3x3, conv5x5}, the latency lookup table by fixed per-op latencies.
import logging
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset
from torch.utils.data.sampler import SubsetRandomSampler

CONFIG_SUPERNET = {
    'dataloading': {'batch_size': 50, 'w_share_in_train': 0.8},
    'optimizer': {'w_lr': 0.1, 'w_momentum': 0.9, 'w_weight_decay': 1e-4,
                  'thetas_lr': 0.01, 'thetas_weight_decay': 5 * 1e-4},
    'loss': {'alpha': 0.2, 'beta': 0.6},
    'train_settings': {'cnt_epochs': 12, 'train_thetas_from_the_epoch': 3,
                       'init_temperature': 5.0, 'exp_anneal_rate': np.exp(-0.045)},
}


def get_logger():
    logging.basicConfig(stream=sys.stdout, format='%(message)s', level=logging.INFO)
    return logging.getLogger('fbnet')


def make_cifar_like(n, seed):
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(10, 3, 8, 8, generator=torch.Generator().manual_seed(123))
    y = torch.randint(0, 10, (n,), generator=g)
    X = 0.5 * templates[y] + torch.randn(n, 3, 8, 8, generator=g)
    flip = torch.rand(n, generator=g) < 0.2
    y[flip] = torch.randint(0, 10, (int(flip.sum()),), generator=g)
    return TensorDataset(X, y)


def get_loaders(train_portion, batch_size, logger):
    train_data = make_cifar_like(1500, seed=0)

    num_train = len(train_data)
    indices = list(range(num_train))
    split = int(np.floor(train_portion * num_train))

    train_idx, valid_idx = indices[:split], indices[split:]

    train_sampler = SubsetRandomSampler(train_idx)

    train_loader = torch.utils.data.DataLoader(
        train_data, batch_size=batch_size, sampler=train_sampler)

    if train_portion == 1:
        return train_loader

    valid_sampler = SubsetRandomSampler(valid_idx)

    val_loader = torch.utils.data.DataLoader(
        train_data, batch_size=batch_size, sampler=train_sampler)

    logger.info("w loader: %d batches, thetas loader: %d batches" % (len(train_loader), len(val_loader)))
    return train_loader, val_loader


def get_test_loader(batch_size):
    test_data = make_cifar_like(500, seed=1)
    return torch.utils.data.DataLoader(test_data, batch_size=batch_size, shuffle=False)


class AverageMeter(object):
    def __init__(self, name=''):
        self._name = name
        self.avg = 0.0
        self.sum = 0.0
        self.cnt = 0.0

    def reset(self):
        self.avg = 0.0
        self.sum = 0.0
        self.cnt = 0.0

    def update(self, val, n=1):
        self.sum += val * n
        self.cnt += n
        self.avg = self.sum / self.cnt

    def get_avg(self):
        return self.avg


def accuracy(output, target, topk=(1,)):
    maxk = max(topk)
    batch_size = target.size(0)
    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


def ConvBNRelu(input_depth, output_depth, kernel):
    return nn.Sequential(nn.Conv2d(input_depth, output_depth, kernel, padding=kernel // 2, bias=False),
                         nn.BatchNorm2d(output_depth), nn.ReLU(inplace=True))


PROPOSED_OPERATIONS = {
    'skip': lambda c_in, c_out: nn.Identity(),
    'k3': lambda c_in, c_out: ConvBNRelu(c_in, c_out, 3),
    'k5': lambda c_in, c_out: ConvBNRelu(c_in, c_out, 5),
}
LATENCY = {'skip': 0.5, 'k3': 2.0, 'k5': 4.0}


class MixedOperation(nn.Module):
    def __init__(self, layer_parameters, proposed_operations, latency):
        super(MixedOperation, self).__init__()
        ops_names = [op_name for op_name in proposed_operations]

        self.ops = nn.ModuleList([proposed_operations[op_name](*layer_parameters)
                                  for op_name in ops_names])
        self.latency = [latency[op_name] for op_name in ops_names]
        self.thetas = nn.Parameter(torch.Tensor([1.0 / len(ops_names) for i in range(len(ops_names))]))

    def forward(self, x, temperature, latency_to_accumulate):
        soft_mask_variables = nn.functional.gumbel_softmax(self.thetas, temperature)
        output = sum(m * op(x) for m, op in zip(soft_mask_variables, self.ops))
        latency = sum(m * lat for m, lat in zip(soft_mask_variables, self.latency))
        latency_to_accumulate = latency_to_accumulate + latency
        return output, latency_to_accumulate


class FBNet_Stochastic_SuperNet(nn.Module):
    def __init__(self, cnt_layers=3, cnt_classes=10):
        super(FBNet_Stochastic_SuperNet, self).__init__()
        self.first = ConvBNRelu(3, 16, 3)
        self.stages_to_search = nn.ModuleList([MixedOperation((16, 16), PROPOSED_OPERATIONS, LATENCY)
                                               for layer_id in range(cnt_layers)])
        self.last_stages = nn.Sequential(nn.Conv2d(16, 32, kernel_size=1), nn.AvgPool2d(kernel_size=2),
                                         nn.Flatten(), nn.Linear(32 * 4 * 4, cnt_classes))

    def forward(self, x, temperature, latency_to_accumulate):
        y = self.first(x)
        for mixed_op in self.stages_to_search:
            y, latency_to_accumulate = mixed_op(y, temperature, latency_to_accumulate)
        y = self.last_stages(y)
        return y, latency_to_accumulate


class SupernetLoss(nn.Module):
    def __init__(self):
        super(SupernetLoss, self).__init__()
        self.alpha = CONFIG_SUPERNET['loss']['alpha']
        self.beta = CONFIG_SUPERNET['loss']['beta']
        self.weight_criterion = nn.CrossEntropyLoss()

    def forward(self, outs, targets, latency, losses_ce, losses_lat, N):
        ce = self.weight_criterion(outs, targets)
        lat = torch.log(latency ** self.beta)
        losses_ce.update(ce.item(), N)
        losses_lat.update(lat.item(), N)
        loss = self.alpha * ce * lat
        return loss


class TrainerSupernet:
    def __init__(self, criterion, w_optimizer, theta_optimizer, w_scheduler, logger):
        self.top1 = AverageMeter()
        self.losses = AverageMeter()
        self.losses_lat = AverageMeter()
        self.losses_ce = AverageMeter()
        self.logger = logger
        self.criterion = criterion
        self.w_optimizer = w_optimizer
        self.theta_optimizer = theta_optimizer
        self.w_scheduler = w_scheduler
        self.temperature = CONFIG_SUPERNET['train_settings']['init_temperature']
        self.exp_anneal_rate = CONFIG_SUPERNET['train_settings']['exp_anneal_rate']
        self.cnt_epochs = CONFIG_SUPERNET['train_settings']['cnt_epochs']
        self.train_thetas_from_the_epoch = CONFIG_SUPERNET['train_settings']['train_thetas_from_the_epoch']

    def train_loop(self, train_w_loader, train_thetas_loader, test_loader, model):
        best_top1 = 0.0
        for epoch in range(self.train_thetas_from_the_epoch):
            self._training_step(model, train_w_loader, self.w_optimizer, epoch, info_for_logger="_w_step_")
            self.w_scheduler.step()

        for epoch in range(self.train_thetas_from_the_epoch, self.cnt_epochs):
            self._training_step(model, train_w_loader, self.w_optimizer, epoch, info_for_logger="_w_step_")
            self.w_scheduler.step()

            self._training_step(model, train_thetas_loader, self.theta_optimizer, epoch, info_for_logger="_theta_step_")

            top1_avg = self._validate(model, test_loader, epoch)
            if best_top1 < top1_avg:
                best_top1 = top1_avg

            self.temperature = self.temperature * self.exp_anneal_rate

    def _training_step(self, model, loader, optimizer, epoch, info_for_logger=""):
        model = model.train()
        start_time = time.time()

        for step, (X, y) in enumerate(loader):
            N = X.shape[0]

            optimizer.zero_grad()
            latency_to_accumulate = torch.Tensor([[0.0]]).requires_grad_()
            outs, latency_to_accumulate = model(X, self.temperature, latency_to_accumulate)
            loss = self.criterion(outs, y, latency_to_accumulate, self.losses_ce, self.losses_lat, N)
            loss.backward()
            optimizer.step()

            self._intermediate_stats_logging(outs, y, loss, N)

        self._epoch_stats_logging(start_time=start_time, epoch=epoch, info_for_logger=info_for_logger, val_or_train='train')
        for avg in [self.top1, self.losses, self.losses_ce]:
            avg.reset()

    def _validate(self, model, loader, epoch):
        model.eval()
        start_time = time.time()
        with torch.no_grad():
            for step, (X, y) in enumerate(loader):
                N = X.shape[0]
                latency_to_accumulate = torch.Tensor([[0.0]])
                outs, latency_to_accumulate = model(X, self.temperature, latency_to_accumulate)
                loss = self.criterion(outs, y, latency_to_accumulate, self.losses_ce, self.losses_lat, N)
                self._intermediate_stats_logging(outs, y, loss, N)
        top1_avg = self.top1.get_avg()
        self._epoch_stats_logging(start_time=start_time, epoch=epoch, val_or_train='val')
        for avg in [self.top1, self.losses, self.losses_ce]:
            avg.reset()
        return top1_avg

    def _epoch_stats_logging(self, start_time, epoch, val_or_train, info_for_logger=''):
        self.logger.info(info_for_logger + val_or_train + ": [{:3d}/{}] Final Prec@1 {:.4%} CE {:.4f} Time {:.2f}".format(
            epoch + 1, self.cnt_epochs, self.top1.get_avg() / 100, self.losses_ce.get_avg(), time.time() - start_time))

    def _intermediate_stats_logging(self, outs, y, loss, N):
        prec1, = accuracy(outs, y, topk=(1,))
        self.losses.update(loss.item(), N)
        self.top1.update(prec1.item(), N)


def train_supernet():
    manual_seed = 1
    np.random.seed(manual_seed)
    torch.manual_seed(manual_seed)

    logger = get_logger()

    train_w_loader, train_thetas_loader = get_loaders(CONFIG_SUPERNET['dataloading']['w_share_in_train'],
                                                      CONFIG_SUPERNET['dataloading']['batch_size'],
                                                      logger)
    test_loader = get_test_loader(CONFIG_SUPERNET['dataloading']['batch_size'])

    model = FBNet_Stochastic_SuperNet(cnt_classes=10)

    criterion = SupernetLoss()

    thetas_params = [param for name, param in model.named_parameters() if 'thetas' in name]
    params_except_thetas = [param for param in model.parameters() if not any(param is t for t in thetas_params)]

    w_optimizer = torch.optim.SGD(params=params_except_thetas,
                                  lr=CONFIG_SUPERNET['optimizer']['w_lr'],
                                  momentum=CONFIG_SUPERNET['optimizer']['w_momentum'],
                                  weight_decay=CONFIG_SUPERNET['optimizer']['w_weight_decay'])

    theta_optimizer = torch.optim.Adam(params=thetas_params,
                                       lr=CONFIG_SUPERNET['optimizer']['thetas_lr'],
                                       weight_decay=CONFIG_SUPERNET['optimizer']['thetas_weight_decay'])

    w_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(w_optimizer,
                                                             T_max=CONFIG_SUPERNET['train_settings']['cnt_epochs'])

    trainer = TrainerSupernet(criterion, w_optimizer, theta_optimizer, w_scheduler, logger)
    trainer.train_loop(train_w_loader, train_thetas_loader, test_loader, model)

    ops_names = list(PROPOSED_OPERATIONS)
    arch = [ops_names[int(np.argmax(layer.thetas.detach().numpy()))] for layer in model.stages_to_search]
    logger.info("Sampled Architecture: " + " - ".join(arch))
    logger.info("thetas: " + " ".join(str(np.round(layer.thetas.detach().numpy(), 3)) for layer in model.stages_to_search))


if __name__ == "__main__":
    train_supernet()
