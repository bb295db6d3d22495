# Source: lucidrains/ema-pytorch, ema_pytorch/ema_pytorch.py, README.md (usage), commit d65f4e3031067055a944282583afc5702d8592ad
# Report: https://github.com/lucidrains/ema-pytorch/issues/8
import copy

import torch
from torch import nn


def exists(val):
    return val is not None


def clamp(value, min_value=None, max_value=None):
    assert exists(min_value) or exists(max_value)
    if exists(min_value):
        value = max(value, min_value)
    if exists(max_value):
        value = min(value, max_value)
    return value


class EMA(nn.Module):
    def __init__(
        self,
        model,
        ema_model=None,
        beta=0.9999,
        update_after_step=100,
        update_every=10,
        inv_gamma=1.0,
        power=2 / 3,
        min_value=0.0,
        param_or_buffer_names_no_ema=set(),
        ignore_names=set(),
        ignore_startswith_names=set(),
        include_online_model=True
    ):
        super().__init__()
        self.beta = beta
        self.include_online_model = include_online_model
        if include_online_model:
            self.online_model = model
        else:
            self.online_model = [model]  # hack
        self.ema_model = ema_model
        if not exists(self.ema_model):
            self.ema_model = copy.deepcopy(model)
        self.ema_model.requires_grad_(False)

        self.parameter_names = {name for name, param in self.ema_model.named_parameters() if param.dtype == torch.float}
        self.buffer_names = {name for name, buffer in self.ema_model.named_buffers() if buffer.dtype == torch.float}

        self.update_every = update_every
        self.update_after_step = update_after_step
        self.inv_gamma = inv_gamma
        self.power = power
        self.min_value = min_value
        self.param_or_buffer_names_no_ema = param_or_buffer_names_no_ema
        self.ignore_names = ignore_names
        self.ignore_startswith_names = ignore_startswith_names
        self.register_buffer('initted', torch.Tensor([False]))
        self.register_buffer('step', torch.tensor([0]))

    @property
    def model(self):
        return self.online_model if self.include_online_model else self.online_model[0]

    def get_params_iter(self, model):
        for name, param in model.named_parameters():
            if name not in self.parameter_names:
                continue
            yield name, param

    def get_buffers_iter(self, model):
        for name, buffer in model.named_parameters():
            if name not in self.buffer_names:
                continue
            yield name, buffer

    def copy_params_from_model_to_ema(self):
        for (_, ma_params), (_, current_params) in zip(self.get_params_iter(self.ema_model),
                                                       self.get_params_iter(self.model)):
            ma_params.data.copy_(current_params.data)
        for (_, ma_buffers), (_, current_buffers) in zip(self.get_buffers_iter(self.ema_model),
                                                         self.get_buffers_iter(self.model)):
            ma_buffers.data.copy_(current_buffers.data)

    def get_current_decay(self):
        epoch = clamp(self.step.item() - self.update_after_step - 1, min_value=0.)
        value = 1 - (1 + epoch / self.inv_gamma) ** - self.power
        if epoch <= 0:
            return 0.
        return clamp(value, min_value=self.min_value, max_value=self.beta)

    def update(self):
        step = self.step.item()
        self.step += 1
        if (step % self.update_every) != 0:
            return
        if step <= self.update_after_step:
            self.copy_params_from_model_to_ema()
            return
        if not self.initted.item():
            self.copy_params_from_model_to_ema()
            self.initted.data.copy_(torch.Tensor([True]))
        self.update_moving_average(self.ema_model, self.model)

    @torch.no_grad()
    def update_moving_average(self, ma_model, current_model):
        current_decay = self.get_current_decay()
        for (name, current_params), (_, ma_params) in zip(self.get_params_iter(current_model),
                                                          self.get_params_iter(ma_model)):
            if name in self.ignore_names:
                continue
            if name in self.param_or_buffer_names_no_ema:
                ma_params.data.copy_(current_params.data)
                continue
            ma_params.data.lerp_(current_params.data, 1. - current_decay)
        for (name, current_buffer), (_, ma_buffer) in zip(self.get_buffers_iter(current_model),
                                                          self.get_buffers_iter(ma_model)):
            if name in self.ignore_names:
                continue
            if name in self.param_or_buffer_names_no_ema:
                ma_buffer.data.copy_(current_buffer.data)
                continue
            ma_buffer.data.lerp_(current_buffer.data, 1. - current_decay)

    def __call__(self, *args, **kwargs):
        return self.ema_model(*args, **kwargs)


def make_data(n, generator):
    # 3 classes of 1x12x12 "images" on a bright background (mean ~4), class = position of a blob
    x = 4.0 + 0.8 * torch.randn(n, 1, 12, 12, generator=generator)
    y = torch.randint(0, 3, (n,), generator=generator)
    for i in range(n):
        c = 2 + 4 * y[i].item()
        x[i, 0, c:c + 3, 3:9] += 2.0
    return x, y


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    train_x, train_y = make_data(768, g)
    test_x, test_y = make_data(300, g)

    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 3))
    ema = EMA(net, beta=0.99, update_after_step=20, update_every=1)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(4):
        net.train()
        perm = torch.randperm(len(train_y), generator=g)
        for i in range(0, len(perm), 32):
            idx = perm[i:i + 32]
            loss = loss_fn(net(train_x[idx]), train_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema.update()
        net.eval()
        ema.ema_model.eval()
        with torch.no_grad():
            acc_online = (net(test_x).argmax(1) == test_y).float().mean().item()
            acc_ema = (ema(test_x).argmax(1) == test_y).float().mean().item()
        bn_online, bn_ema = net[1].running_mean, ema.ema_model[1].running_mean
        print(f'epoch {epoch}: loss {loss.item():.4f}, test acc online {acc_online:.3f}, ema {acc_ema:.3f}; '
              f'first BatchNorm running_mean |online| {bn_online.norm():.3f}, |ema| {bn_ema.norm():.3f}')


if __name__ == '__main__':
    main()
