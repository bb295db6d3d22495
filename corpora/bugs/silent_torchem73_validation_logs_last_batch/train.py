# Source: constantinpape/torch-em, torch_em/trainer/default_trainer.py (DefaultTrainer: fit, _train_epoch_impl, _forward_and_loss, _validate_impl), torch_em/trainer/tensorboard_logger.py (TensorboardLogger.log_train, log_validation), torch_em/loss/dice.py (flatten_samples, dice_score, DiceLoss), commit aa8a1eadb6e2ae8d5ad0092a874bff29557b8810
# Report: https://github.com/constantinpape/torch-em/pull/73
# torch-em's DefaultTrainer for a 2d foreground segmentation: a small sigmoid U-Net-like network,
# Dice loss as loss and as validation metric, Adam with ReduceLROnPlateau on the validation
# metric, a "best" checkpoint kept on the lowest validation metric, and the tensorboard logger
# writing train/loss and validation/loss, validation/metric scalars. The tensorboard writer is
# replaced by an in-memory scalar store that is printed at the end; data are synthetic images of
# bright disks on a noisy background; image logging and the progress bar are removed.
import contextlib
import copy
import time

import numpy as np
import torch
import torch.nn as nn


def flatten_samples(input_):
    num_channels = input_.size(1)
    permute_axes = list(range(input_.dim()))
    permute_axes[0], permute_axes[1] = permute_axes[1], permute_axes[0]
    permuted = input_.permute(*permute_axes).contiguous()
    flattened = permuted.view(num_channels, -1)
    return flattened


def dice_score(input_, target, invert=False, channelwise=True, eps=1e-7):
    if channelwise:
        input_ = flatten_samples(input_)
        target = flatten_samples(target)
        numerator = (input_ * target).sum(-1)
        denominator = (input_ * input_).sum(-1) + (target * target).sum(-1)
        channelwise_score = 2 * (numerator / denominator.clamp(min=eps))
        if invert:
            channelwise_score = 1. - channelwise_score
        score = channelwise_score.sum()
    else:
        numerator = (input_ * target).sum()
        denominator = (input_ * input_).sum() + (target * target).sum()
        score = 2. * (numerator / denominator.clamp(min=eps))
        if invert:
            score = 1. - score
    return score


class DiceLoss(nn.Module):
    def __init__(self, channelwise=True, eps=1e-7):
        super().__init__()
        self.channelwise = channelwise
        self.eps = eps

    def forward(self, input_, target):
        return dice_score(input_, target, invert=True, channelwise=self.channelwise, eps=self.eps)


class SmallUNet(nn.Module):
    def __init__(self, in_channels=1, out_channels=1, f=8):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(in_channels, f, 3, padding=1), nn.ReLU(), nn.Conv2d(f, f, 3, padding=1), nn.ReLU())
        self.enc2 = nn.Sequential(nn.Conv2d(f, 2 * f, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(2 * f, f, 2, stride=2)
        self.dec = nn.Sequential(nn.Conv2d(2 * f, f, 3, padding=1), nn.ReLU())
        self.out = nn.Conv2d(f, out_channels, 1)
        self.final_activation = nn.Sigmoid()

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(nn.functional.max_pool2d(e1, 2))
        d = self.dec(torch.cat([self.up(e2), e1], 1))
        return self.final_activation(self.out(d))


class ScalarWriter:
    def __init__(self):
        self.scalars = {}

    def add_scalar(self, tag, scalar_value, global_step):
        if torch.is_tensor(scalar_value):
            scalar_value = scalar_value.detach().cpu().numpy()
        self.scalars.setdefault(tag, []).append((global_step, float(scalar_value)))


class TensorboardLogger:
    def __init__(self, trainer):
        self.tb = ScalarWriter()
        self.log_image_interval = trainer.log_image_interval

    def log_train(self, step, loss, lr, x, y, prediction, log_gradients=False):
        self.tb.add_scalar(tag="train/loss", scalar_value=loss, global_step=step)
        self.tb.add_scalar(tag="train/learning_rate", scalar_value=lr, global_step=step)

    def log_validation(self, step, metric, loss, x, y, prediction):
        self.tb.add_scalar(tag="validation/loss", scalar_value=loss, global_step=step)
        self.tb.add_scalar(tag="validation/metric", scalar_value=metric, global_step=step)


class DefaultTrainer:
    def __init__(self, name, train_loader, val_loader, model, loss, optimizer, metric, device,
                 lr_scheduler=None, log_image_interval=100, logger=TensorboardLogger):
        self.name = name
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.model = model
        self.loss = loss
        self.optimizer = optimizer
        self.metric = metric
        self.device = device
        self.lr_scheduler = lr_scheduler
        self.log_image_interval = log_image_interval
        self.logger = logger(self) if logger is not None else None
        self._iteration = 0
        self._epoch = 0
        self._best_epoch = 0
        self.checkpoints = {}

    def save_checkpoint(self, name, best_metric):
        self.checkpoints[name] = {"epoch": self._epoch, "best_metric": best_metric,
                                  "model_state": copy.deepcopy(self.model.state_dict())}

    def fit(self, epochs):
        self.max_epoch = self._epoch + epochs
        self.max_iteration = self.max_epoch * len(self.train_loader)
        best_metric = np.inf
        train_epoch = self._train_epoch
        validate = self._validate
        msg = "Epoch %i: average [s/it]: %f, current metric: %f, best metric: %f"

        train_epochs = self.max_epoch - self._epoch
        for _ in range(train_epochs):
            t_per_iter = train_epoch()
            current_metric = validate()

            if self.lr_scheduler is not None:
                self.lr_scheduler.step(current_metric)

            if current_metric < best_metric:
                best_metric = current_metric
                self._best_epoch = self._epoch
                self.save_checkpoint("best", best_metric)
            self.save_checkpoint("latest", best_metric)

            self._epoch += 1
            print(msg % (self._epoch, t_per_iter, current_metric, best_metric))

        print(f"Finished training after {self._epoch} epochs / {self._iteration} iterations.")
        print(f"The best epoch is number {self._best_epoch}.")

    def _backprop(self, loss):
        loss.backward()
        self.optimizer.step()

    def _train_epoch(self):
        return self._train_epoch_impl(contextlib.nullcontext, self._backprop)

    def _forward_and_loss(self, x, y):
        pred = self.model(x)
        if self._iteration % self.log_image_interval == 0:
            if pred.requires_grad:
                pred.retain_grad()
        loss = self.loss(pred, y)
        return pred, loss

    def _train_epoch_impl(self, forward_context, backprop):
        self.model.train()
        n_iter = 0
        t_per_iter = time.time()
        for x, y in self.train_loader:
            x, y = x.to(self.device), y.to(self.device)
            self.optimizer.zero_grad()
            with forward_context():
                pred, loss = self._forward_and_loss(x, y)
            backprop(loss)
            lr = [pm["lr"] for pm in self.optimizer.param_groups][0]
            if self.logger is not None:
                self.logger.log_train(self._iteration, loss, lr, x, y, pred, log_gradients=True)
            self._iteration += 1
            n_iter += 1
            if self._iteration >= self.max_iteration:
                break
        t_per_iter = (time.time() - t_per_iter) / n_iter
        return t_per_iter

    def _validate(self):
        return self._validate_impl(contextlib.nullcontext)

    def _validate_impl(self, forward_context):
        self.model.eval()

        metric_val = 0.0
        loss_val = 0.0

        with torch.no_grad():
            for x, y in self.val_loader:
                x, y = x.to(self.device), y.to(self.device)
                with forward_context():
                    pred, loss = self._forward_and_loss(x, y)
                    metric = self.metric(pred, y)

                loss_val += loss.item()
                metric_val += metric.item()

        metric_val /= len(self.val_loader)
        loss_val /= len(self.val_loader)
        if self.logger is not None:
            self.logger.log_validation(self._iteration, metric, loss, x, y, pred)
        return metric_val


def make_images(n, rng, size=32):
    yy, xx = np.mgrid[:size, :size]
    images, labels = [], []
    for _ in range(n):
        mask = np.zeros((size, size), dtype=np.float32)
        for _ in range(rng.randint(1, 5)):
            cy, cx = rng.randint(4, size - 4, size=2)
            r = rng.uniform(1.5, 6.0)
            mask[(yy - cy) ** 2 + (xx - cx) ** 2 <= r ** 2] = 1.0
        noise = rng.uniform(0.3, 1.2)
        img = mask * rng.uniform(0.6, 1.0) + noise * rng.randn(size, size).astype(np.float32)
        images.append(img[None].astype(np.float32))
        labels.append(mask[None])
    return torch.from_numpy(np.stack(images)), torch.from_numpy(np.stack(labels))


def batches(x, y, bs, shuffle, gen):
    idx = torch.randperm(len(x), generator=gen) if shuffle else torch.arange(len(x))
    return [(x[idx[i:i + bs]], y[idx[i:i + bs]]) for i in range(0, len(x), bs)]


class Loader:
    def __init__(self, x, y, batch_size, shuffle, seed):
        self.x, self.y, self.batch_size, self.shuffle = x, y, batch_size, shuffle
        self.gen = torch.Generator().manual_seed(seed)

    def __iter__(self):
        return iter(batches(self.x, self.y, self.batch_size, self.shuffle, self.gen))

    def __len__(self):
        return (len(self.x) + self.batch_size - 1) // self.batch_size


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    xtr, ytr = make_images(96, rng)
    xva, yva = make_images(24, rng)
    train_loader = Loader(xtr, ytr, 8, True, 0)
    val_loader = Loader(xva, yva, 4, False, 0)
    model = SmallUNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=3)
    trainer = DefaultTrainer("dice-unet", train_loader, val_loader, model, DiceLoss(), optimizer, DiceLoss(),
                             torch.device("cpu"), lr_scheduler=scheduler)
    trainer.fit(epochs=12)

    tb = trainer.logger.tb.scalars
    print("tensorboard validation/metric (1 - dice):")
    for (step, m), (_, l) in zip(tb["validation/metric"], tb["validation/loss"]):
        print(f"  step {step:4d}: validation/metric {m:.4f}  validation/loss {l:.4f}")
    best_step, best_logged = min(tb["validation/metric"], key=lambda t: t[1])
    print(f"best logged validation/metric {best_logged:.4f} at step {best_step}; "
          f"trainer best metric {trainer.checkpoints['best']['best_metric']:.4f} "
          f"(epoch {trainer.checkpoints['best']['epoch']})")
