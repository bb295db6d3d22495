# Source: cnstark/easytorch, easytorch/core/runner.py (Runner.train, init_training, save_model, load_model_resume, save_best_model, validate), easytorch/core/checkpoint.py, commit 987ebeeff925b87cbb528c5e1380463d78330562
# Report: https://github.com/cnstark/easytorch/pull/58
# An EasyTorch Runner subclass for a classifier: every epoch is checkpointed, the validation
# accuracy is tracked with save_best_model, and a second launch resumes from the last
# checkpoint to extend the run. Data (noisy-label synthetic features), the MLP and the reduced
# Runner (no DDP, tensorboard, meters or config system) stand in for the user's project.
import glob
import os
import re
import tempfile
from typing import Dict

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def save_ckpt(ckpt: Dict, ckpt_path: str):
    torch.save(ckpt, ckpt_path)


def load_ckpt(ckpt_save_dir: str, ckpt_path: str = None) -> Dict:
    if ckpt_path is None:
        paths = sorted(glob.glob(os.path.join(ckpt_save_dir, '*_[0-9]*.pt')),
                       key=lambda p: int(re.findall(r'_(\d+)\.pt$', p)[0]))
        ckpt_path = paths[-1]
    return torch.load(ckpt_path, weights_only=False)


def get_ckpt_dict(model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int) -> Dict:
    return {
        'epoch': epoch,
        'model_state_dict': model.state_dict(),
        'optim_state_dict': optimizer.state_dict()
    }


class Runner:
    def __init__(self, cfg: Dict):
        self.model_name = cfg['MODEL']['NAME']
        self.ckpt_save_dir = cfg['TRAIN']['CKPT_SAVE_DIR']
        self.model = self.define_model(cfg)
        self.scheduler = None
        self.val_data_loader = None

    def get_ckpt_path(self, epoch: int) -> str:
        return os.path.join(self.ckpt_save_dir, '{}_{}.pt'.format(self.model_name, epoch))

    def save_model(self, epoch: int):
        ckpt_dict = get_ckpt_dict(self.model, self.optim, epoch)
        save_ckpt(ckpt_dict, self.get_ckpt_path(epoch))

    def load_model_resume(self, strict: bool = True):
        try:
            checkpoint_dict = load_ckpt(self.ckpt_save_dir)
            self.model.load_state_dict(checkpoint_dict['model_state_dict'], strict=strict)
            self.optim.load_state_dict(checkpoint_dict['optim_state_dict'])
            self.start_epoch = checkpoint_dict['epoch']
            if self.scheduler is not None:
                self.scheduler.last_epoch = checkpoint_dict['epoch']
            print('resume training from epoch {}'.format(self.start_epoch))
        except (IndexError, OSError, KeyError):
            pass

    def train(self, cfg: Dict):
        self.init_training(cfg)
        for epoch_index in range(self.start_epoch, self.num_epochs):
            epoch = epoch_index + 1
            self.model.train()
            for iter_index, data in enumerate(self.train_data_loader):
                loss = self.train_iters(epoch, iter_index, data)
                if loss is not None:
                    self.backward(loss)
            self.on_epoch_end(epoch)

    def init_training(self, cfg: Dict):
        self.num_epochs = cfg['TRAIN']['NUM_EPOCHS']
        self.start_epoch = 0
        self.best_metrics = {}
        self.train_data_loader = self.build_train_data_loader(cfg)
        self.optim = torch.optim.Adam(self.model.parameters(), **cfg['TRAIN']['OPTIM']['PARAM'])
        self.load_model_resume()
        self.val_data_loader = self.build_val_data_loader(cfg)

    def on_epoch_end(self, epoch: int):
        if self.val_data_loader is not None:
            self.validate(train_epoch=epoch)
        self.save_model(epoch)

    def backward(self, loss: torch.Tensor):
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()

    @torch.no_grad()
    def validate(self, train_epoch: int):
        self.model.eval()
        self.on_validating_start(train_epoch)
        for iter_index, data in enumerate(self.val_data_loader):
            self.val_iters(iter_index, data)
        self.on_validating_end(train_epoch)

    def save_best_model(self, epoch: int, metric_name: str, metric: float, greater_best: bool = True):
        best_metric = self.best_metrics.get(metric_name)
        if best_metric is None or (metric > best_metric if greater_best else metric < best_metric):
            self.best_metrics[metric_name] = metric
            ckpt_dict = get_ckpt_dict(self.model, self.optim, epoch)
            ckpt_path = os.path.join(
                self.ckpt_save_dir,
                '{}_best_{}.pt'.format(self.model_name, metric_name.replace('/', '_'))
            )
            save_ckpt(ckpt_dict, ckpt_path)


def make_data(seed):
    rng = np.random.RandomState(seed)
    centres = np.random.RandomState(7).randn(5, 40).astype(np.float32)
    def split(n, noise):
        y = rng.randint(0, 5, size=n)
        x = centres[y] + 2.2 * rng.randn(n, 40).astype(np.float32)
        flip = rng.rand(n) < noise
        y = np.where(flip, rng.randint(0, 5, size=n), y)
        return torch.from_numpy(x), torch.from_numpy(y)
    return split(300, 0.35), split(400, 0.0)


class ClassifierRunner(Runner):
    @staticmethod
    def define_model(cfg: Dict) -> nn.Module:
        torch.manual_seed(cfg['SEED'])
        return nn.Sequential(nn.Linear(40, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 5))

    def build_train_data_loader(self, cfg: Dict) -> DataLoader:
        (x, y), _ = make_data(0)
        g = torch.Generator().manual_seed(cfg['SEED'] + self.start_epoch)
        return DataLoader(TensorDataset(x, y), batch_size=30, shuffle=True, generator=g)

    def build_val_data_loader(self, cfg: Dict) -> DataLoader:
        _, (x, y) = make_data(0)
        return DataLoader(TensorDataset(x, y), batch_size=100)

    def train_iters(self, epoch, iter_index, data):
        x, y = data
        return nn.functional.cross_entropy(self.model(x), y)

    def on_validating_start(self, train_epoch):
        self.correct, self.total = 0, 0

    def val_iters(self, iter_index, data):
        x, y = data
        self.correct += (self.model(x).argmax(1) == y).sum().item()
        self.total += len(y)

    def on_validating_end(self, train_epoch):
        acc = self.correct / self.total
        print('epoch {:d} val/acc {:.4f}'.format(train_epoch, acc))
        self.save_best_model(train_epoch, 'val/acc', acc, greater_best=True)


def main():
    ckpt_dir = tempfile.mkdtemp()
    cfg = {'SEED': 0, 'MODEL': {'NAME': 'MLP'},
           'TRAIN': {'NUM_EPOCHS': 6, 'CKPT_SAVE_DIR': ckpt_dir, 'OPTIM': {'PARAM': {'lr': 3e-3}}}}

    # first launch
    ClassifierRunner(cfg).train(cfg)

    # the job is relaunched with more epochs and resumes from the last checkpoint
    cfg['TRAIN']['NUM_EPOCHS'] = 12
    runner = ClassifierRunner(cfg)
    runner.train(cfg)

    best = torch.load(os.path.join(ckpt_dir, 'MLP_best_val_acc.pt'), weights_only=False)
    runner.model.load_state_dict(best['model_state_dict'])
    runner.validate(train_epoch=best['epoch'])
    print('best checkpoint file holds epoch {} (best_metrics in memory: {})'.format(best['epoch'], runner.best_metrics))


if __name__ == "__main__":
    main()
