# Source: ostris/ai-toolkit, toolkit/ema.py (ExponentialMovingAverage), commit 27a03a91f23eb1b757d5ec2e80ee3e129cfcc350, with the update() lines of commit 4a41f14 quoted in the report
# Report: https://github.com/ostris/ai-toolkit/issues/1034
# LoRA-style fine-tuning with an EMA of the trainable parameters (use_ema: true, decay 0.99):
# ema.update() after every optimizer step, and the EMA weights are swapped in
# (store / copy_to / restore) to sample / save checkpoints. The diffusion transformer and
# its LoRA are a frozen MLP with low-rank adapters; the task is a synthetic regression.
import weakref
from typing import Iterable, Optional

import torch
from torch import nn


class ExponentialMovingAverage:
    def __init__(
            self,
            parameters: Iterable[torch.nn.Parameter] = None,
            decay: float = 0.995,
            use_num_updates: bool = False,
    ):
        if parameters is None:
            raise ValueError("parameters must be provided")
        if decay < 0.0 or decay > 1.0:
            raise ValueError('Decay must be between 0 and 1')
        self.decay = decay
        self.num_updates = 0 if use_num_updates else None
        parameters = list(parameters)
        self.shadow_params = [
            p.clone().detach()
            for p in parameters
        ]
        self.collected_params = None
        self._params_refs = [weakref.ref(p) for p in parameters]

    def _get_parameters(self, parameters: Optional[Iterable[torch.nn.Parameter]]):
        if parameters is None:
            return [p() for p in self._params_refs]
        return list(parameters)

    def update(self, parameters: Optional[Iterable[torch.nn.Parameter]] = None) -> None:
        parameters = self._get_parameters(parameters)
        decay = self.decay
        if self.num_updates is not None:
            self.num_updates += 1
            decay = min(
                decay,
                (1 + self.num_updates) / (10 + self.num_updates)
            )
        one_minus_decay = 1.0 - decay
        with torch.no_grad():
            for s_param, param in zip(self.shadow_params, parameters):
                s_param_float = s_param.float()
                if s_param.dtype != torch.float32:
                    s_param_float = s_param_float.to(torch.float32)
                param_float = param
                if param.dtype != torch.float32:
                    param_float = param_float.to(torch.float32)
                gap = (s_param_float - param_float)
                s_param_float.add_(gap * one_minus_decay)

    def copy_to(self, parameters: Optional[Iterable[torch.nn.Parameter]] = None) -> None:
        parameters = self._get_parameters(parameters)
        for s_param, param in zip(self.shadow_params, parameters):
            param.data.copy_(s_param.data)

    def store(self, parameters: Optional[Iterable[torch.nn.Parameter]] = None) -> None:
        parameters = self._get_parameters(parameters)
        self.collected_params = [param.clone() for param in parameters]

    def restore(self, parameters: Optional[Iterable[torch.nn.Parameter]] = None) -> None:
        if self.collected_params is None:
            raise RuntimeError("This ExponentialMovingAverage has no `store()`ed weights to `restore()`")
        parameters = self._get_parameters(parameters)
        for c_param, param in zip(self.collected_params, parameters):
            param.data.copy_(c_param.data)


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank=4, alpha=4.0):
        super().__init__()
        self.base = base
        self.lora_down = nn.Linear(base.in_features, rank, bias=False)
        self.lora_up = nn.Linear(rank, base.out_features, bias=False)
        nn.init.zeros_(self.lora_up.weight)
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + self.lora_up(self.lora_down(x)) * self.scale


def main():
    torch.manual_seed(0)
    net = nn.Sequential(LoRALinear(nn.Linear(32, 64)), nn.GELU(), LoRALinear(nn.Linear(64, 32)))
    for name, p in net.named_parameters():
        p.requires_grad_("lora" in name)
    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2)
    ema = ExponentialMovingAverage(params, decay=0.99)

    g = torch.Generator().manual_seed(1)
    target = nn.Linear(32, 32)
    x_val = torch.randn(256, 32, generator=g)
    with torch.no_grad():
        y_val = target(x_val)
    for step in range(1, 601):
        x = torch.randn(64, 32, generator=g)
        with torch.no_grad():
            y = target(x)
        loss = nn.functional.mse_loss(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ema.update()
        if step % 100 == 0:
            with torch.no_grad():
                val = nn.functional.mse_loss(net(x_val), y_val).item()
                ema.store()
                ema.copy_to()
                val_ema = nn.functional.mse_loss(net(x_val), y_val).item()
                ema.restore()
            print("step %d loss %.4f val %.4f | EMA val %.4f max|EMA weight| %.3g max|weight| %.3g" % (
                step, loss.item(), val, val_ema,
                max(s.abs().max().item() for s in ema.shadow_params),
                max(p.abs().max().item() for p in params)))


if __name__ == "__main__":
    main()
