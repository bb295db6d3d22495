# Source: TorchSSL/TorchSSL, models/fixmatch/fixmatch.py (FixMatch.train), commit 5cdf9bc76fbb859bc2521a7703a3f76ae2965119
# Report: https://github.com/TorchSSL/TorchSSL/pull/59
# FixMatch training step of TorchSSL with --amp and --clip: supervised CE on the labelled
# batch + thresholded pseudo-label consistency loss on weak/strong views of the unlabelled
# batch, GradScaler, gradient-norm clipping, SGD(nesterov), EMA of the weights. WideResNet
# and CIFAR are reduced to an MLP on synthetic 10-class data (weak view = small noise,
# strong view = large noise + feature dropout); CUDA AMP to CPU bfloat16 autocast.
import contextlib
from argparse import Namespace
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.amp import GradScaler


def ce_loss(logits, targets, use_hard_labels=True, reduction='none'):
    if use_hard_labels:
        log_pred = F.log_softmax(logits, dim=-1)
        return F.nll_loss(log_pred, targets, reduction=reduction)
    else:
        assert logits.shape == targets.shape
        log_pred = F.log_softmax(logits, dim=-1)
        nll_loss = torch.sum(-targets * log_pred, dim=1)
        return nll_loss


def consistency_loss(logits_s, logits_w, name='ce', T=1.0, p_cutoff=0.0, use_hard_labels=True):
    assert name in ['ce', 'L2']
    logits_w = logits_w.detach()
    pseudo_label = torch.softmax(logits_w, dim=-1)
    max_probs, max_idx = torch.max(pseudo_label, dim=-1)
    mask = max_probs.ge(p_cutoff).float()
    select = max_probs.ge(p_cutoff).long()
    if use_hard_labels:
        masked_loss = ce_loss(logits_s, max_idx, use_hard_labels, reduction='none') * mask
    else:
        pseudo_label = torch.softmax(logits_w / T, dim=-1)
        masked_loss = ce_loss(logits_s, pseudo_label, use_hard_labels) * mask
    return masked_loss.mean(), mask.mean(), select, max_idx.long()


class EMA:
    def __init__(self, model, decay):
        self.model, self.decay, self.shadow = model, decay, {}

    def register(self):
        for name, param in self.model.named_parameters():
            if param.requires_grad:
                self.shadow[name] = param.data.clone()

    def update(self):
        for name, param in self.model.named_parameters():
            if param.requires_grad:
                self.shadow[name] = (1.0 - self.decay) * param.data + self.decay * self.shadow[name]


class FixMatch:
    def __init__(self, net, num_classes, ema_m, T, p_cutoff, lambda_u, hard_label=True):
        self.model = net
        self.num_classes = num_classes
        self.ema_m = ema_m
        self.t_fn = lambda it: T
        self.p_fn = lambda it: p_cutoff
        self.lambda_u = lambda_u
        self.use_hard_label = hard_label
        self.it = 0

    def set_optimizer(self, optimizer):
        self.optimizer = optimizer

    @torch.no_grad()
    def evaluate(self, x, y):
        self.model.eval()
        acc = (self.model(x).argmax(1) == y).float().mean().item()
        self.model.train()
        return acc

    def train(self, args, loader_lb, loader_ulb, eval_set):
        self.model.train()
        self.ema = EMA(self.model, self.ema_m)
        self.ema.register()
        scaler = GradScaler("cpu")
        amp_cm = partial(torch.autocast, "cpu", dtype=torch.bfloat16) if args.amp else contextlib.nullcontext

        for (x_lb, y_lb), (x_ulb_w, x_ulb_s) in zip(loader_lb, loader_ulb):
            if self.it > args.num_train_iter:
                break
            num_lb = x_lb.shape[0]
            inputs = torch.cat((x_lb, x_ulb_w, x_ulb_s))

            # inference and calculate sup/unsup losses
            with amp_cm():
                logits = self.model(inputs)
                logits_x_lb = logits[:num_lb]
                logits_x_ulb_w, logits_x_ulb_s = logits[num_lb:].chunk(2)
                sup_loss = ce_loss(logits_x_lb, y_lb, reduction='mean')

                # hyper-params for update
                T = self.t_fn(self.it)
                p_cutoff = self.p_fn(self.it)

                unsup_loss, mask, select, pseudo_lb = consistency_loss(logits_x_ulb_s,
                                                                       logits_x_ulb_w,
                                                                       'ce', T, p_cutoff,
                                                                       use_hard_labels=args.hard_label)

                total_loss = sup_loss + self.lambda_u * unsup_loss

            # parameter updates
            if args.amp:
                scaler.scale(total_loss).backward()
                if (args.clip > 0):
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), args.clip)
                scaler.step(self.optimizer)
                scaler.update()
            else:
                total_loss.backward()
                if (args.clip > 0):
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), args.clip)
                self.optimizer.step()

            self.ema.update()
            self.model.zero_grad()

            if self.it % 50 == 0:
                acc = self.evaluate(*eval_set)
                print(f"it {self.it} sup_loss {sup_loss.item():.4f} unsup_loss {unsup_loss.item():.4f} "
                      f"mask {mask.item():.3f} eval/top-1-acc {acc:.3f}")
            self.it += 1


def infinite_loader(x, y, batch_size, g):
    while True:
        idx = torch.randint(0, len(x), (batch_size,), generator=g)
        yield x[idx], y[idx]


def main():
    torch.manual_seed(0)
    args = Namespace(amp=True, clip=1.0, num_train_iter=300, hard_label=True, batch_size=16, uratio=7)
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(10, 32, generator=g) * 1.5
    y_all = torch.randint(0, 10, (4000,), generator=g)
    x_all = centers[y_all] + torch.randn(4000, 32, generator=g)
    x_lb, y_lb = x_all[:40], y_all[:40]
    x_ulb = x_all[40:3000]
    eval_set = (x_all[3000:], y_all[3000:])

    def ulb_stream():
        for xb, _ in infinite_loader(x_ulb, torch.zeros(len(x_ulb)), args.batch_size * args.uratio, g):
            weak = xb + 0.1 * torch.randn(xb.shape, generator=g)
            strong = (xb + 0.6 * torch.randn(xb.shape, generator=g)) * (torch.rand(xb.shape, generator=g) > 0.2)
            yield weak, strong

    net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    model = FixMatch(net, 10, ema_m=0.999, T=0.5, p_cutoff=0.95, lambda_u=1.0)
    model.set_optimizer(torch.optim.SGD(net.parameters(), lr=0.03, momentum=0.9, nesterov=True, weight_decay=5e-4))
    model.train(args, infinite_loader(x_lb, y_lb, args.batch_size, g), ulb_stream(), eval_set)


if __name__ == "__main__":
    main()
