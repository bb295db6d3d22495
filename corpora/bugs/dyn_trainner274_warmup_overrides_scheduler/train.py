# Source: the-database/traiNNer-redux, traiNNer/models/base_model.py (BaseModel._set_lr, _get_init_lr, update_learning_rate, get_current_learning_rate), train.py (train_pipeline warm-up list + loop), commit 1a2fbde0e5c55452e70ba2b9137a16bcf194cd16
# Report: https://github.com/the-database/traiNNer-redux/pull/274
# traiNNer-redux super-resolution training: generator optimizer with a MultiStepLR schedule,
# per-optimizer linear warm-up applied by BaseModel.update_learning_rate after every
# scheduler step, L1 loss, periodic log of the learning rates. The registry-built SR network
# is reduced to a small conv + PixelShuffle x2 net; paired LR/HR images are synthetic
# (HR textures, LR = 2x average-pooled); iterations scaled down (400, milestones 150/300).
import torch
import torch.nn as nn
import torch.nn.functional as F
from types import SimpleNamespace as NS


class BaseModel:
    def __init__(self, opt):
        self.opt = opt
        self.optimizers = []
        self.schedulers = []
        self.optimizers_skipped = []

    def _set_lr(self, lr_groups_l: list[list[float]]) -> None:
        """Set learning rate for warm-up.

        Args:
            lr_groups_l (list): List for lr_groups, each for an optimizer.
        """
        for optimizer, lr_groups in zip(self.optimizers, lr_groups_l, strict=False):
            for param_group, lr in zip(optimizer.param_groups, lr_groups, strict=False):
                param_group["lr"] = lr

    def _get_init_lr(self) -> list[list[float]]:
        """Get the initial lr, which is set by the scheduler."""
        init_lr_groups_l = []
        for optimizer in self.optimizers:
            init_lr_groups_l.append([v["initial_lr"] for v in optimizer.param_groups])
        return init_lr_groups_l

    def update_learning_rate(
        self, current_iter: int, warmup_iter: list[int] | None = None
    ) -> None:
        """Update learning rate.

        Args:
            current_iter (int): Current iteration.
            warmup_iter (list[int] or None): Per-optimizer warm-up iters.
                If None, no warm-up. If provided, len must == len(self.optimizers),
                and warmup_iter[i] is the warm-up length for optimizer i.
        """
        # step all schedulers
        for i, scheduler in enumerate(self.schedulers):
            if not self.optimizers_skipped[i]:
                scheduler.step()

        # apply per-optimizer warm-up
        if warmup_iter is not None:
            assert len(warmup_iter) == len(self.optimizers), (
                "warmup_iter must have one entry per optimizer"
            )
            init_lr_groups = self._get_init_lr()
            warmup_lr_groups: list[list[float]] = []
            for opt_idx, init_lrs in enumerate(init_lr_groups):
                wi = warmup_iter[opt_idx]
                if current_iter < wi and wi > 0:
                    scaled = [lr * (current_iter / wi) for lr in init_lrs]
                else:
                    scaled = init_lrs
                warmup_lr_groups.append(scaled)

            # push the new lrs back into each optimizer
            self._set_lr(warmup_lr_groups)

    def get_current_learning_rate(self) -> list[float]:
        return [param_group["lr"] for param_group in self.optimizers[0].param_groups]


class TinySR(nn.Module):
    def __init__(self, ch=32, scale=2):
        super().__init__()
        self.head = nn.Conv2d(3, ch, 3, padding=1)
        self.body = nn.Sequential(nn.Conv2d(ch, ch, 3, padding=1), nn.LeakyReLU(0.1), nn.Conv2d(ch, ch, 3, padding=1))
        self.tail = nn.Sequential(nn.Conv2d(ch, 3 * scale * scale, 3, padding=1), nn.PixelShuffle(scale))

    def forward(self, x):
        f = self.head(x)
        return self.tail(f + self.body(f)) + F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


class SRModel(BaseModel):
    def __init__(self, opt):
        super().__init__(opt)
        self.net_g = TinySR()
        self.optimizer_g = torch.optim.AdamW(self.net_g.parameters(), lr=opt.train.optim_g.lr, betas=(0.9, 0.99),
                                             weight_decay=0)
        self.optimizers.append(self.optimizer_g)
        self.optimizers_skipped.append(False)
        self.schedulers.append(torch.optim.lr_scheduler.MultiStepLR(self.optimizer_g, milestones=opt.train.scheduler.milestones,
                                                                    gamma=opt.train.scheduler.gamma))
        self.log_dict = {}

    def feed_data(self, data):
        self.lq, self.gt = data

    def optimize_parameters(self, current_iter):
        self.optimizer_g.zero_grad()
        self.output = self.net_g(self.lq)
        l_g_total = F.l1_loss(self.output, self.gt)
        l_g_total.backward()
        self.optimizer_g.step()
        self.log_dict.setdefault("l_g_pix", []).append(l_g_total.item())

    def get_current_log(self):
        return {k: sum(v) / len(v) for k, v in self.log_dict.items()}

    def reset_current_log(self):
        self.log_dict = {}


def make_pairs(n, g):
    xs = torch.linspace(0, 1, 32)
    freq = torch.rand(n, 3, 2, generator=g) * 10 + 2
    hr = 0.5 + 0.25 * torch.sin(freq[..., 0, None, None] * xs[None, None, :, None] * 6.28) \
        * torch.cos(freq[..., 1, None, None] * xs[None, None, None, :] * 6.28)
    hr = hr + 0.05 * torch.randn(n, 3, 32, 32, generator=g)
    lq = F.avg_pool2d(hr, 2)
    return lq, hr


def train_pipeline():
    torch.manual_seed(0)
    opt = NS(train=NS(total_iter=400, warmup_iter=50, warmup_iter_g=1, warmup_iter_d=1,
                      optim_g=NS(lr=2e-3), scheduler=NS(milestones=[150, 300], gamma=0.1)),
             logger=NS(print_freq=25))
    model = SRModel(opt)
    g = torch.Generator().manual_seed(0)
    lq_all, hr_all = make_pairs(512, g)

    warmup_iters: list[int] = []
    warmup_iters.append(
        opt.train.warmup_iter_g
        if opt.train.warmup_iter_g != 1
        else opt.train.warmup_iter
    )
    if len(model.optimizers) > 1:
        warmup_iters.append(
            opt.train.warmup_iter_d
            if opt.train.warmup_iter_d != 1
            else opt.train.warmup_iter
        )

    current_iter = 0
    total_iters = opt.train.total_iter
    while current_iter < total_iters:
        perm = torch.randperm(512, generator=g)
        for b in range(0, 512, 16):
            current_iter += 1
            if current_iter > total_iters:
                break
            idx = perm[b:b + 16]
            model.feed_data((lq_all[idx], hr_all[idx]))
            model.optimize_parameters(current_iter)
            # update learning rate
            model.update_learning_rate(current_iter, warmup_iter=warmup_iters)
            if current_iter % opt.logger.print_freq == 0:
                log_vars = {"iter": current_iter, "lrs": model.get_current_learning_rate()}
                log_vars.update(model.get_current_log())
                model.reset_current_log()
                print(f"[iter:{log_vars['iter']:4d}, lr:({log_vars['lrs'][0]:.3e})] l_g_pix: {log_vars['l_g_pix']:.4e}")


if __name__ == "__main__":
    train_pipeline()
