# Source: alan-turing-institute/deepsensor, deepsensor/train/train.py (train_epoch), README.md (training loop), commit 12eabee4a57095fd73c5556d8dce95f0a6bc1997
# Report: https://github.com/alan-turing-institute/deepsensor/issues/47
# DeepSensor training: a ConvNP maps gridded context observations of a field to a Gaussian
# prediction at target locations, trained by train_epoch() over a list of tasks, one call per
# epoch. The neuralprocesses ConvNP is replaced by a small on-grid conv model with a Gaussian
# likelihood, xarray / TaskLoader by synthetic smooth 2-D fields with random context masks,
# `lab` by torch; the torch branch of train_epoch is kept.
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


class Task(dict):
    pass


def concat_tasks(tasks):
    merged = Task()
    for key in tasks[0]:
        merged[key] = torch.cat([t[key] for t in tasks], dim=0)
    return merged


class ConvNP:
    """Wraps the torch module as DeepSensor does (model.model holds the parameters)."""

    def __init__(self, channels=32):
        self.model = nn.Sequential(
            nn.Conv2d(2, channels, 5, padding=2), nn.ReLU(),
            nn.Conv2d(channels, channels, 5, padding=2), nn.ReLU(),
            nn.Conv2d(channels, channels, 5, padding=2), nn.ReLU(),
            nn.Conv2d(channels, 2, 1))

    def loss_fn(self, task, normalise=True):
        context = torch.cat([task["y_c"] * task["mask_c"], task["mask_c"]], dim=1)
        out = self.model(context)
        mean, log_std = out[:, :1], out[:, 1:].clamp(-5, 5)
        nll = 0.5 * ((task["y_t"] - mean) / log_std.exp()) ** 2 + log_std + 0.9189
        nll = (nll * task["mask_t"]).sum()
        if normalise:
            nll = nll / task["mask_t"].sum()
        return nll


def train_epoch(model, tasks, lr=5e-5, batch_size=None, opt=None, progress_bar=False, tqdm_notebook=False):
    """Train model for one epoch (torch backend)."""
    if opt is None:
        opt = optim.Adam(model.model.parameters(), lr=lr)

    def train_step(tasks):
        if not isinstance(tasks, list):
            tasks = [tasks]
        opt.zero_grad()
        task_losses = []
        for task in tasks:
            task_losses.append(model.loss_fn(task, normalise=True))
        mean_batch_loss = torch.mean(torch.stack(task_losses))
        mean_batch_loss.backward()
        opt.step()
        return mean_batch_loss.detach().cpu().numpy()

    tasks = np.random.permutation(tasks)

    if batch_size is not None:
        n_batches = len(tasks) // batch_size  # Note that this will drop the remainder
    else:
        n_batches = len(tasks)

    batch_losses = []
    for batch_i in range(n_batches):
        if batch_size is not None:
            task = concat_tasks(tasks[batch_i * batch_size: (batch_i + 1) * batch_size])
        else:
            task = tasks[batch_i]
        batch_loss = train_step(task)
        batch_losses.append(batch_loss)

    return batch_losses


def make_tasks(n, rng, size=24):
    yy, xx = np.mgrid[0:size, 0:size] / size
    tasks = []
    for _ in range(n):
        field = np.zeros((size, size))
        for _ in range(3):
            fy, fx, ph = rng.uniform(1, 3), rng.uniform(1, 3), rng.uniform(0, 6.28)
            field += np.sin(6.28 * (fy * yy + fx * xx) + ph) / 2
        field += 0.05 * rng.normal(size=field.shape)
        mask_c = (rng.uniform(size=field.shape) < rng.uniform(0.05, 0.3)).astype(np.float32)
        t = Task(y_c=torch.tensor(field, dtype=torch.float32)[None, None],
                 mask_c=torch.tensor(mask_c)[None, None],
                 y_t=torch.tensor(field, dtype=torch.float32)[None, None],
                 mask_t=torch.ones(1, 1, size, size))
        tasks.append(t)
    return tasks


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    train_tasks = make_tasks(64, rng)
    val_tasks = make_tasks(16, rng)
    model = ConvNP()

    n_epochs = 12
    losses = []
    for epoch in range(n_epochs):
        batch_losses = train_epoch(model, train_tasks, lr=5e-4, batch_size=8)
        losses.append(np.mean(batch_losses))
        with torch.no_grad():
            val_loss = np.mean([model.loss_fn(t).item() for t in val_tasks])
        print(f"epoch {epoch}: train NLL {losses[-1]:.4f} first batch {batch_losses[0]:.4f} "
              f"last batch {batch_losses[-1]:.4f} val NLL {val_loss:.4f}")


if __name__ == "__main__":
    main()
