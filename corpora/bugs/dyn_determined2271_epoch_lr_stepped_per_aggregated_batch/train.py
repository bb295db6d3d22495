# Source: determined-ai/determined, harness/determined/pytorch/_pytorch_trial.py (PyTorchTrialController._train_for_step, _auto_step_lr_scheduler_per_batch, get_epoch_idx), harness/determined/pytorch/_pytorch_context.py (step_optimizer, _should_communicate_and_update), harness/determined/pytorch/_lr_scheduler.py (LRScheduler), commit c1fa9234a3e376b6cb40879ab5b3a8d4204a64e2
# Report: https://github.com/determined-ai/determined/pull/2271
# Determined's PyTorch trial loop: the controller calls the user's train_batch for every
# batch, the context only steps the optimizer every `aggregation_frequency` batches
# (gradient aggregation), and wrapped LR schedulers are stepped automatically per epoch
# or per batch. The user trial is a small MNIST-style MLP on synthetic 10-class data with
# StepLR stepped every epoch and aggregation_frequency 4; Horovod/AMP/checkpointing dropped.
import enum
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class LRScheduler:
    class StepMode(enum.Enum):
        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3

    def __init__(self, scheduler, step_mode, frequency=1):
        self._scheduler = scheduler
        self._step_mode = step_mode
        self._frequency = frequency

    def step(self, *args, **kwargs):
        self._scheduler.step(*args, **kwargs)

    def get_last_lr(self):
        return self._scheduler.get_last_lr()


class HvdConfig:
    def __init__(self, aggregation_frequency):
        self.use = False
        self.aggregation_frequency = aggregation_frequency


class PyTorchTrialContext:
    def __init__(self, hparams, hvd_config, training_loader_len):
        self.hparams = hparams
        self.hvd_config = hvd_config
        self.models, self.optimizers, self.lr_schedulers = [], [], []
        self._current_batch_idx = None
        self._training_loader_len = training_loader_len

    def wrap_model(self, model):
        self.models.append(model)
        return model

    def wrap_optimizer(self, optimizer):
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(self, lr_scheduler, step_mode, frequency=1):
        wrapped = LRScheduler(lr_scheduler, step_mode, frequency)
        self.lr_schedulers.append(wrapped)
        return wrapped

    def is_epoch_start(self):
        return self._current_batch_idx % self._training_loader_len == 0

    def _should_communicate_and_update(self):
        return (self._current_batch_idx + 1) % self.hvd_config.aggregation_frequency == 0

    def backward(self, loss):
        loss.backward()

    def step_optimizer(self, optimizer, clip_grads=None, auto_zero_grads=True):
        if not self._should_communicate_and_update():
            return
        parameters = [p for group in optimizer.param_groups for p in group.get("params", [])]
        if clip_grads is not None:
            clip_grads(parameters)
        optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()


class MNistTrial:
    def __init__(self, context):
        self.context = context
        self.model = self.context.wrap_model(nn.Sequential(
            nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10)))
        self.optimizer = self.context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=self.context.hparams["learning_rate"], momentum=0.9))
        self.lr_scheduler = self.context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=self.context.hparams["lr_step_size"],
                                            gamma=self.context.hparams["lr_gamma"]),
            step_mode=LRScheduler.StepMode.STEP_EVERY_EPOCH)

    def train_batch(self, batch, epoch_idx, batch_idx):
        data, labels = batch
        output = self.model(data)
        loss = F.cross_entropy(output, labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch):
        data, labels = batch
        output = self.model(data)
        pred = output.argmax(dim=1)
        return {"validation_loss": F.cross_entropy(output, labels).item(),
                "accuracy": (pred == labels).float().mean().item()}


class PyTorchTrialController:
    def __init__(self, trial_cls, hparams, hvd_config, training_loader, validation_loader):
        self.training_loader = training_loader
        self.validation_loader = validation_loader
        self.hvd_config = hvd_config
        self.context = PyTorchTrialContext(hparams, hvd_config, len(training_loader))
        self.trial = trial_cls(self.context)
        self.training_iterator = self._forever(training_loader)

    @staticmethod
    def _forever(loader):
        while True:
            for batch in loader:
                yield batch

    def get_epoch_idx(self, batch_id):
        return batch_id // len(self.training_loader)

    def _auto_step_lr_scheduler_per_batch(self, batch_idx, lr_scheduler):
        """
        This function aims at automatically step a LR scheduler. It should be called per batch.
        """
        if lr_scheduler._step_mode == LRScheduler.StepMode.STEP_EVERY_BATCH:
            if (batch_idx + 1) % lr_scheduler._frequency == 0:
                lr_scheduler.step()
        elif lr_scheduler._step_mode == LRScheduler.StepMode.STEP_EVERY_EPOCH:
            mod = (batch_idx + 1) % (len(self.training_loader) * lr_scheduler._frequency)
            if mod == 0 or mod < self.hvd_config.aggregation_frequency:
                lr_scheduler.step()

    def _train_for_step(self, step_id, num_batches, total_batches_processed):
        for model in self.context.models:
            model.train()

        start = total_batches_processed
        end = start + num_batches
        per_batch_metrics = []
        lrs = []
        for batch_idx in range(start, end):
            batch = next(self.training_iterator)
            self.context._current_batch_idx = batch_idx
            tr_metrics = self.trial.train_batch(batch=batch, epoch_idx=self.get_epoch_idx(batch_idx),
                                                batch_idx=batch_idx)
            if self.context._should_communicate_and_update():
                lrs.append(self.context.optimizers[0].param_groups[0]["lr"])

            # Step learning rate of a pytorch.LRScheduler.
            for lr_scheduler in self.context.lr_schedulers:
                self._auto_step_lr_scheduler_per_batch(batch_idx, lr_scheduler)

            per_batch_metrics.append({k: v.item() for k, v in tr_metrics.items()})
        return {"metrics": per_batch_metrics, "lrs": lrs}

    def _compute_validation_metrics(self):
        for model in self.context.models:
            model.eval()
        out = []
        with torch.no_grad():
            for batch in self.validation_loader:
                out.append(self.trial.evaluate_batch(batch))
        return {k: float(np.mean([o[k] for o in out])) for k in out[0]}


def make_data(n, rng, centers):
    labels = rng.randint(0, 10, size=n)
    x = centers[labels] + rng.normal(0, 3.0, size=(n, 64))
    return TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(labels))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    centers = rng.normal(0, 1, size=(10, 64))
    train_loader = DataLoader(make_data(4096, rng, centers), batch_size=32, shuffle=True)
    val_loader = DataLoader(make_data(1024, rng, centers), batch_size=256)

    hparams = {"learning_rate": 0.01, "lr_step_size": 2, "lr_gamma": 0.5}
    controller = PyTorchTrialController(MNistTrial, hparams, HvdConfig(aggregation_frequency=4),
                                        train_loader, val_loader)
    batches_per_epoch = len(train_loader)
    t0 = time.time()
    total = 0
    for epoch in range(8):
        resp = controller._train_for_step(epoch + 1, batches_per_epoch, total)
        total += batches_per_epoch
        val = controller._compute_validation_metrics()
        lrs = resp["lrs"]
        print("epoch %d train loss %.4f | validation_loss %.4f accuracy %.4f | lr at optimizer steps: first %.2e last %.2e distinct %d"
              % (epoch + 1, np.mean([m["loss"] for m in resp["metrics"]]), val["validation_loss"], val["accuracy"],
                 lrs[0], lrs[-1], len(set(lrs))))
    print("scheduler last_epoch %d after 8 epochs; lr %.2e; done in %.1fs"
          % (controller.trial.lr_scheduler._scheduler.last_epoch, controller.trial.lr_scheduler.get_last_lr()[0],
             time.time() - t0))


if __name__ == "__main__":
    main()
