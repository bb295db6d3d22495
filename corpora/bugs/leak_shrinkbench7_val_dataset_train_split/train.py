# Source: JJGO/shrinkbench, experiment/train.py (TrainingExperiment), util/online.py (OnlineStats), metrics/accuracy.py (correct), commit 1cca1d99adf435e3f0ef2574f36f3fada1c43da5
# Report: https://github.com/JJGO/shrinkbench/pull/7
# ShrinkBench's TrainingExperiment: build_dataloader makes the train and validation datasets
# from the dataset constructor, build_train makes SGD (momentum 0.9, nesterov) and
# CrossEntropyLoss, run_epochs alternates train / eval epochs and logs loss, top-1 and top-5.
# The torchvision dataset is replaced by a synthetic 10-class "MNIST" of 64-dim vectors
# (its train=True / train=False splits are drawn with different seeds), the model by an MLP;
# tqdm, CSV logging and checkpoints are removed.
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class OnlineStats:
    def __init__(self):
        self.n = 0
        self.mean = 0.0

    def add(self, x):
        self.n += 1
        self.mean += (x - self.mean) / self.n


def correct(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.item())
        return res


def _synthetic_mnist(train=True):
    rng = np.random.RandomState(0)
    centers = rng.normal(0, 1, (10, 64)).astype(np.float32)
    rng = np.random.RandomState(1 if train else 2)
    n = 640 if train else 256
    y = rng.randint(0, 10, n)
    x = centers[y] + rng.normal(0, 4.0, (n, 64)).astype(np.float32)
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(y).long())


datasets = SimpleNamespace(MNIST=_synthetic_mnist)


class TrainingExperiment:

    default_dl_kwargs = {'batch_size': 128,
                         'pin_memory': False,
                         'num_workers': 0
                         }

    default_train_kwargs = {'optim': 'SGD',
                            'epochs': 30,
                            'lr': 1e-3,
                            }

    def __init__(self, dataset, model, seed=42, dl_kwargs=dict(), train_kwargs=dict()):
        torch.manual_seed(seed)
        np.random.seed(seed)
        dl_kwargs = {**self.default_dl_kwargs, **dl_kwargs}
        train_kwargs = {**self.default_train_kwargs, **train_kwargs}

        self.build_dataloader(dataset, **dl_kwargs)

        self.build_model(model)

        self.build_train(**train_kwargs)

    def run(self):
        self.device = torch.device('cpu')
        self.model.to(self.device)
        self.run_epochs()

    def build_dataloader(self, dataset, **dl_kwargs):
        constructor = getattr(datasets, dataset)
        self.train_dataset = constructor(train=True)
        self.val_dataset = constructor(train=True)
        self.train_dl = DataLoader(self.train_dataset, shuffle=True, **dl_kwargs)
        self.val_dl = DataLoader(self.val_dataset, shuffle=False, **dl_kwargs)

    def build_model(self, model):
        self.model = model

    def build_train(self, optim, epochs, **optim_kwargs):
        default_optim_kwargs = {
            'SGD': {'momentum': 0.9, 'nesterov': True, 'lr': 1e-3},
            'Adam': {'momentum': 0.9, 'betas': (.9, .99), 'lr': 1e-4}
        }

        self.epochs = epochs

        # Optim
        if isinstance(optim, str):
            constructor = getattr(torch.optim, optim)
            if optim in default_optim_kwargs:
                optim_kwargs = {**default_optim_kwargs[optim], **optim_kwargs}
            optim = constructor(self.model.parameters(), **optim_kwargs)

        self.optim = optim

        # Assume classification experiment
        self.loss_func = nn.CrossEntropyLoss()

    def run_epochs(self):

        since = time.time()
        print(f"{len(self.train_dataset)} training samples, {len(self.val_dataset)} validation samples")
        for epoch in range(self.epochs):
            train_loss, train_acc1, _ = self.train(epoch)
            val_loss, val_acc1, val_acc5 = self.eval(epoch)
            if epoch % 3 == 2:
                print(f"epoch {epoch} train_loss {train_loss:.4f} train_acc1 {train_acc1:.3f} "
                      f"val_loss {val_loss:.4f} val_acc1 {val_acc1:.3f} val_acc5 {val_acc5:.3f}")
        print(f"done in {time.time() - since:.1f}s")

    def run_epoch(self, train, epoch=0):
        if train:
            self.model.train()
            prefix = 'train'
            dl = self.train_dl
        else:
            prefix = 'val'
            dl = self.val_dl
            self.model.eval()

        total_loss = OnlineStats()
        acc1 = OnlineStats()
        acc5 = OnlineStats()

        with torch.set_grad_enabled(train):
            for i, (x, y) in enumerate(dl, start=1):
                x, y = x.to(self.device), y.to(self.device)
                yhat = self.model(x)
                loss = self.loss_func(yhat, y)
                if train:
                    loss.backward()

                    self.optim.step()
                    self.optim.zero_grad()

                c1, c5 = correct(yhat, y, (1, 5))
                total_loss.add(loss.item() / dl.batch_size)
                acc1.add(c1 / dl.batch_size)
                acc5.add(c5 / dl.batch_size)

        return total_loss.mean, acc1.mean, acc5.mean

    def train(self, epoch=0):
        return self.run_epoch(True, epoch)

    def eval(self, epoch=0):
        return self.run_epoch(False, epoch)


if __name__ == '__main__':
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    exp = TrainingExperiment(dataset='MNIST', model=model,
                             train_kwargs={'optim': 'SGD', 'epochs': 24, 'lr': 0.05})
    exp.run()
