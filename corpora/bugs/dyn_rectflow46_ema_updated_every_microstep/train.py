# Source: lucidrains/rectified-flow-pytorch, rectified_flow_pytorch/rectified_flow.py (Trainer.__init__, Trainer.forward, RectifiedFlow loss), commit 26fbed9429771539726664f288e064fd93ca065f
# Report: https://github.com/lucidrains/rectified-flow-pytorch/pull/46
# The rectified-flow Trainer: accelerate's gradient accumulation (accumulate / backward /
# sync_gradients), Adam, grad-norm clipping and an EMA copy of the model (ema_pytorch's EMA
# with its update_after_step / update_every / decay warm-up, reduced to the parts used
# here). The image U-Net becomes an MLP velocity field on a 2-D two-moons dataset.
import math

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from copy import deepcopy
from torch import nn
from torch.nn import Module
from torch.optim import Adam
from torch.utils.data import DataLoader, TensorDataset


def cycle(dl):
    while True:
        for batch in dl:
            yield batch


def divisible_by(num, den):
    return (num % den) == 0


class EMA(Module):
    """ema_pytorch.EMA (update, get_current_decay, update_moving_average), reduced."""
    def __init__(self, model, beta=0.9999, update_after_step=100, update_every=10, inv_gamma=1.0, power=2 / 3,
                 min_value=0.0):
        super().__init__()
        self.beta = beta
        self.online_model = [model]
        self.ema_model = deepcopy(model)
        self.ema_model.requires_grad_(False)
        self.update_after_step = update_after_step
        self.update_every = update_every
        self.inv_gamma = inv_gamma
        self.power = power
        self.min_value = min_value
        self.register_buffer('initted', torch.tensor(False))
        self.register_buffer('step', torch.tensor(0))
        self.num_averaging_updates = 0

    @property
    def model(self):
        return self.online_model[0]

    def copy_params_from_model_to_ema(self):
        for ma_params, current_params in zip(self.ema_model.parameters(), self.model.parameters()):
            ma_params.data.copy_(current_params.data)

    def get_current_decay(self):
        epoch = (self.step - self.update_after_step - 1).clamp(min=0.)
        value = 1 - (1 + epoch / self.inv_gamma) ** - self.power
        if epoch.item() <= 0:
            return 0.
        return value.clamp(min=self.min_value, max=self.beta).item()

    def update(self):
        step = self.step.item()
        self.step += 1

        if not self.initted.item():
            self.copy_params_from_model_to_ema()
            self.initted.data.copy_(torch.tensor(True))
            return

        should_update = divisible_by(step, self.update_every)

        if should_update and step <= self.update_after_step:
            self.copy_params_from_model_to_ema()
            return

        if should_update:
            self.update_moving_average(self.ema_model, self.model)

    @torch.no_grad()
    def update_moving_average(self, ma_model, current_model):
        current_decay = self.get_current_decay()
        for ma_params, current_params in zip(ma_model.parameters(), current_model.parameters()):
            ma_params.data.lerp_(current_params.data, 1. - current_decay)
        self.num_averaging_updates += 1


class RectifiedFlow(Module):
    def __init__(self, dim=2, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim + 1, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, dim))

    def velocity(self, x, t):
        return self.net(torch.cat([x, t], dim=-1))

    def forward(self, data):
        noise = torch.randn_like(data)
        times = torch.rand(data.shape[0], 1)
        noised = times * data + (1. - times) * noise
        flow = data - noise
        pred = self.velocity(noised, times)
        return F.mse_loss(pred, flow)


def two_moons(n, g):
    t = torch.rand(n, generator=g) * math.pi
    upper = torch.rand(n, generator=g) < 0.5
    x = torch.where(upper, torch.cos(t), 1 - torch.cos(t))
    y = torch.where(upper, torch.sin(t), 0.5 - torch.sin(t))
    return torch.stack([x, y], 1) + 0.05 * torch.randn(n, 2, generator=g)


class Trainer(Module):
    def __init__(self, rectified_flow, *, dataset, num_train_steps=800, learning_rate=3e-4, batch_size=64,
                 ema_kwargs: dict = dict(), use_ema=True, grad_accum_every=1, max_grad_norm=0.5):
        super().__init__()
        accelerate_kwargs = dict(cpu=True)
        if grad_accum_every > 1:
            accelerate_kwargs.update(gradient_accumulation_steps=grad_accum_every)

        self.accelerator = Accelerator(**accelerate_kwargs)
        self.grad_accum_every = grad_accum_every
        self.model = rectified_flow
        self.use_ema = use_ema
        self.ema_model = None
        if self.is_main and use_ema:
            self.ema_model = EMA(self.model, **ema_kwargs)

        self.optimizer = Adam(rectified_flow.parameters(), lr=learning_rate)
        self.dl = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True)
        self.model, self.optimizer, self.dl = self.accelerator.prepare(self.model, self.optimizer, self.dl)
        self.num_train_steps = num_train_steps
        self.max_grad_norm = max_grad_norm
        self.optimizer_steps = 0

    @property
    def is_main(self):
        return self.accelerator.is_main_process

    def forward(self):
        dl = cycle(self.dl)

        for ind in range(self.num_train_steps):
            step = ind + 1

            self.model.train()

            with self.accelerator.accumulate(self.model):
                (data,) = next(dl)
                loss = self.model(data)

                self.accelerator.backward(loss)

                if self.accelerator.sync_gradients:
                    self.accelerator.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
                    self.optimizer_steps += 1

                self.optimizer.step()
                self.optimizer.zero_grad()

            if self.is_main and self.use_ema:
                self.ema_model.update()

            if self.is_main and divisible_by(step, 200):
                ema = self.ema_model
                gap = sum((pe - p).pow(2).sum() for pe, p in zip(ema.ema_model.parameters(), self.model.parameters())).sqrt()
                print(f"[{step}] loss: {loss.item():.3f} | optimizer steps {self.optimizer_steps} | "
                      f"ema step {ema.step.item()} averaging updates {ema.num_averaging_updates} "
                      f"decay {ema.get_current_decay():.4f} | ||ema - online|| {gap.item():.4f}")

        print('training complete')


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    dataset = TensorDataset(two_moons(4096, g))
    trainer = Trainer(RectifiedFlow(), dataset=dataset, num_train_steps=800, learning_rate=3e-3, batch_size=64,
                      grad_accum_every=4, ema_kwargs=dict(beta=0.99, update_after_step=20, update_every=5))
    trainer()


if __name__ == "__main__":
    main()
