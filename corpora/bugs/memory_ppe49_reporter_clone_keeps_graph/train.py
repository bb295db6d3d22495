# Source: pfnet/pytorch-pfn-extras, pytorch_pfn_extras/reporting.py (_copy_variable, Reporter, report, Summary, DictSummary), pytorch_pfn_extras/training/extensions/log_report.py (LogReport), pytorch_pfn_extras/training/manager.py (run_iteration), commit e18ef7e3012a478274c0f81148a2a51fc5c05b24
# Report: https://github.com/pfnet/pytorch-pfn-extras/pull/49
# pytorch-pfn-extras reporting: values reported inside manager.run_iteration() go to the current
# observation; LogReport adds every observation to a DictSummary and emits the epoch means.
# The model reports its errors the way the report() docstring's MyRegressor does. The MNIST
# CNN becomes a denoising MLP autoencoder over synthetic 3x32x32 signals; the manager keeps only run_iteration and
# LogReport; writers, progress bar and snapshots are removed.
import collections
import contextlib
import os
import threading

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
numpy.random.seed(0)
torch.set_num_threads(1)

_thread_local = threading.local()


def _copy_variable(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    return value


class Reporter:

    def __init__(self):
        self._observer_names = {}
        self.observation = {}

    def __enter__(self):
        _get_reporters().append(self)

    def __exit__(self, exc_type, exc_value, traceback):
        _get_reporters().pop()

    @contextlib.contextmanager
    def scope(self, observation):
        old = self.observation
        self.observation = observation
        self.__enter__()
        try:
            yield
        finally:
            self.__exit__(None, None, None)
            self.observation = old

    def add_observer(self, name, observer):
        self._observer_names[id(observer)] = name

    def report(self, values, observer=None):
        values = {k: _copy_variable(v) for k, v in values.items()}
        if observer is not None:
            observer_name = self._observer_names[id(observer)]
            for key, value in values.items():
                self.observation['%s/%s' % (observer_name, key)] = value
        else:
            self.observation.update(values)


def _get_reporters():
    try:
        reporters = _thread_local.reporters
    except AttributeError:
        reporters = _thread_local.reporters = []
    return reporters


def report(values, observer=None):
    reporters = _get_reporters()
    if reporters:
        current = reporters[-1]
        current.report(values, observer)


class Summary:

    def __init__(self):
        self._x = 0.0
        self._x2 = 0.0
        self._n = 0

    def add(self, value, weight=1):
        self._x += weight * value
        self._x2 += weight * value * value
        self._n += weight

    def compute_mean(self):
        x, n = self._x, self._n
        return x / n


class DictSummary:

    def __init__(self):
        self._summaries = collections.defaultdict(Summary)

    def add(self, d):
        summaries = self._summaries
        for k, v in d.items():
            w = 1
            if isinstance(v, tuple):
                w = v[1]
                v = v[0]
            if numpy.isscalar(v) or getattr(v, 'ndim', -1) == 0:
                summaries[k].add(v, weight=w)

    def compute_mean(self):
        return {name: summary.compute_mean()
                for name, summary in self._summaries.items()}


class LogReport:

    def __init__(self, iters_per_epoch):
        self._iters_per_epoch = iters_per_epoch
        self._log = []
        self._init_summary()

    def __call__(self, manager):
        self._summary.add(manager.observation)
        if manager.iteration % self._iters_per_epoch == 0:
            stats = self._summary.compute_mean()
            stats_cpu = {}
            for name, value in stats.items():
                stats_cpu[name] = float(value)  # copy to CPU
            stats_cpu['epoch'] = manager.iteration // self._iters_per_epoch
            stats_cpu['iteration'] = manager.iteration
            self._log.append(stats_cpu)
            self._init_summary()

    @property
    def log(self):
        return self._log

    def _init_summary(self):
        self._summary = DictSummary()


class ExtensionsManager:

    def __init__(self, extensions):
        self.reporter = Reporter()
        self.extensions = extensions
        self.iteration = 0
        self.observation = {}

    @contextlib.contextmanager
    def run_iteration(self):
        self.observation = {}
        with self.reporter.scope(self.observation):
            try:
                yield
            finally:
                self.iteration += 1
                for ext in self.extensions:
                    ext(self)


def rss_mb():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(3 * 32 * 32, 256)
        self.dec = nn.Linear(256, 3 * 32 * 32)

    def forward(self, x):
        return self.dec(F.relu(self.enc(x)))


class MyRegressor(nn.Module):
    def __init__(self, predictor):
        super().__init__()
        self.predictor = predictor

    def forward(self, x, y):
        # This chain just computes the mean absolute and squared
        # errors between the prediction and y.
        pred = self.predictor(x)
        abs_error = torch.sum(abs(pred - y)) / len(x)
        loss = F.mse_loss(pred, y)

        # Report the mean absolute and squared errors.
        report({
            'abs_error': abs_error,
            'squared_error': loss,
        }, self)

        return loss


def make_data(n=5120):
    basis = torch.randn(16, 3 * 32 * 32)
    clean = torch.randn(n, 16) @ basis / 4.0
    noisy = clean + 0.5 * torch.randn(n, 3 * 32 * 32)
    return noisy, clean


def train(manager, model, optimizer, data, target, epochs, batch_size, log):
    n_batches = len(data) // batch_size
    for epoch in range(epochs):
        perm = torch.randperm(len(data))
        rss = []
        model.train()
        for batch_idx in range(n_batches):
            idx = perm[batch_idx * batch_size:(batch_idx + 1) * batch_size]
            with manager.run_iteration():
                optimizer.zero_grad()
                loss = model(data[idx], target[idx])
                loss.backward()
                optimizer.step()
            if (batch_idx + 1) % 10 == 0:
                rss.append(rss_mb())
        last = log.log[-1]
        print(f"epoch {last['epoch']}: main/squared_error {last['main/squared_error']:.4f} "
              f"main/abs_error {last['main/abs_error']:.1f} "
              f"process RSS every 10 iterations (MB): {' '.join(f'{v:.0f}' for v in rss)}")


def main():
    data, target = make_data()
    model = MyRegressor(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    batch_size = 64
    log = LogReport(iters_per_epoch=len(data) // batch_size)
    manager = ExtensionsManager([log])
    manager.reporter.add_observer('main', model)
    print(f"start: process RSS {rss_mb():.0f} MB")
    train(manager, model, optimizer, data, target, epochs=3, batch_size=batch_size, log=log)
    print(f"end: process RSS {rss_mb():.0f} MB")


if __name__ == '__main__':
    main()
