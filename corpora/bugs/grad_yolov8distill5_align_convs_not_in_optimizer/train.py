# Source: huangzongmou/yolov8_Distillation, ultralytics/yolo/engine/trainer.py (CWDLoss, FeatureLoss, Distillation_loss, BaseTrainer._setup_train / _do_train / build_optimizer / optimizer_step), commit 6c20637a6ca100907f7080f84e28a86748b03a6d
# Report: https://github.com/huangzongmou/yolov8_Distillation/issues/5
# YOLOv8 feature distillation: forward hooks collect the outputs of the teacher's and the
# student's `cv2` convolutions at chosen layers, FeatureLoss maps each student feature to the
# teacher's width with a 1x1 align convolution, normalizes both and applies channel-wise
# distillation (CWD); the student is trained on its task loss plus the weighted
# distillation loss. The detector is reduced to a small C2f-style classifier on synthetic
# 32x32 images (task loss = cross-entropy); the teacher is a wider copy trained first.
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CWDLoss(nn.Module):
    """PyTorch version of `Channel-wise Distillation for Semantic Segmentation."""

    def __init__(self, channels_s, channels_t, tau=1.0):
        super(CWDLoss, self).__init__()
        self.tau = tau

    def forward(self, y_s, y_t):
        assert len(y_s) == len(y_t)
        losses = []

        for idx, (s, t) in enumerate(zip(y_s, y_t)):

            assert s.shape == t.shape

            N, C, H, W = s.shape

            # normalize in channel diemension
            softmax_pred_T = F.softmax(t.view(-1, W * H) / self.tau, dim=1)  # [N*C, H*W]

            logsoftmax = torch.nn.LogSoftmax(dim=1)
            cost = torch.sum(
                softmax_pred_T * logsoftmax(t.view(-1, W * H) / self.tau) -
                softmax_pred_T * logsoftmax(s.view(-1, W * H) / self.tau)) * (self.tau ** 2)

            losses.append(cost / (C * N))
        loss = sum(losses)

        return loss


class FeatureLoss(nn.Module):
    def __init__(self, channels_s, channels_t, distiller='cwd', loss_weight=1.0):
        super(FeatureLoss, self).__init__()
        self.loss_weight = loss_weight

        device = 'cpu'
        self.align_module = nn.ModuleList([
            nn.Conv2d(channel, tea_channel, kernel_size=1, stride=1, padding=0).to(device)
            for channel, tea_channel in zip(channels_s, channels_t)
        ])
        self.norm = [
            nn.BatchNorm2d(tea_channel, affine=False).to(device)
            for tea_channel in channels_t
        ]

        if distiller == 'cwd':
            self.feature_loss = CWDLoss(channels_s, channels_t)
        else:
            raise NotImplementedError

    def forward(self, y_s, y_t):
        assert len(y_s) == len(y_t)
        tea_feats = []
        stu_feats = []

        for idx, (s, t) in enumerate(zip(y_s, y_t)):
            s = self.align_module[idx](s)
            s = self.norm[idx](s)
            t = self.norm[idx](t)
            tea_feats.append(t)
            stu_feats.append(s)

        loss = self.feature_loss(stu_feats, tea_feats)
        return self.loss_weight * loss


class Distillation_loss:
    def __init__(self, modeln, modelL, distiller="CWDLoss"):  # model must be de-paralleled

        self.distiller = distiller
        channels_s = [16, 32, 32]
        channels_t = [32, 64, 64]
        self.D_loss_fn = FeatureLoss(channels_s=channels_s, channels_t=channels_t)

        self.teacher_module_pairs = []
        self.student_module_pairs = []
        self.remove_handle = []
        layers = ["1", "2", "3"]

        for mname, ml in modelL.named_modules():
            if mname is not None:
                name = mname.split(".")
                if name[0] == "module":
                    name.pop(0)
                if len(name) == 3:
                    if name[1] in layers:
                        if "cv2" in mname:
                            self.teacher_module_pairs.append(ml)

        for mname, ml in modeln.named_modules():

            if mname is not None:
                name = mname.split(".")
                if name[0] == "module":
                    name.pop(0)
                if len(name) == 3:
                    if name[1] in layers:
                        if "cv2" in mname:
                            self.student_module_pairs.append(ml)

    def register_hook(self):
        self.teacher_outputs = []
        self.origin_outputs = []

        def make_layer_forward_hook(l):
            def forward_hook(m, input, output):
                l.append(output)
            return forward_hook

        for ml, ori in zip(self.teacher_module_pairs, self.student_module_pairs):
            self.remove_handle.append(ml.register_forward_hook(make_layer_forward_hook(self.teacher_outputs)))
            self.remove_handle.append(ori.register_forward_hook(make_layer_forward_hook(self.origin_outputs)))

    def get_loss(self):
        quant_loss = 0
        quant_loss += self.D_loss_fn(y_t=self.teacher_outputs, y_s=self.origin_outputs)

        self.teacher_outputs.clear()
        self.origin_outputs.clear()
        return quant_loss

    def remove_handle_(self):
        for rm in self.remove_handle:
            rm.remove()


class Conv(nn.Module):
    def __init__(self, c1, c2, k=3, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class C2f(nn.Module):
    """Reduced C2f: cv1 splits, a bottleneck, cv2 fuses."""
    def __init__(self, c1, c2, s=2):
        super().__init__()
        self.cv1 = Conv(c1, c2, 3, s)
        self.m = Conv(c2, c2, 3, 1)
        self.cv2 = Conv(2 * c2, c2, 1, 1)

    def forward(self, x):
        y = self.cv1(x)
        return self.cv2(torch.cat([y, self.m(y)], 1))


class ClassifyModel(nn.Module):
    def __init__(self, width=16, nc=4):
        super().__init__()
        self.model = nn.Sequential(Conv(3, width, 3, 1), C2f(width, width), C2f(width, 2 * width),
                                   C2f(2 * width, 2 * width))
        self.head = nn.Linear(2 * width, nc)

    def forward(self, x):
        return self.head(self.model(x).mean((2, 3)))


def build_optimizer(model, name='Adam', lr=0.001, momentum=0.9, decay=1e-5):
    g = [], [], []  # optimizer parameter groups
    bn = tuple(v for k, v in nn.__dict__.items() if 'Norm' in k)  # normalization layers, i.e. BatchNorm2d()
    for v in model.modules():
        if hasattr(v, 'bias') and isinstance(v.bias, nn.Parameter):  # bias (no decay)
            g[2].append(v.bias)
        if isinstance(v, bn):  # weight (no decay)
            g[1].append(v.weight)
        elif hasattr(v, 'weight') and isinstance(v.weight, nn.Parameter):  # weight (with decay)
            g[0].append(v.weight)

    if name == 'Adam':
        optimizer = torch.optim.Adam(g[2], lr=lr, betas=(momentum, 0.999))  # adjust beta1 to momentum
    elif name == 'SGD':
        optimizer = torch.optim.SGD(g[2], lr=lr, momentum=momentum, nesterov=True)
    else:
        raise NotImplementedError(f'Optimizer {name} not implemented.')

    optimizer.add_param_group({'params': g[0], 'weight_decay': decay})  # add g0 with weight_decay
    optimizer.add_param_group({'params': g[1]})  # add g1 (BatchNorm2d weights)
    return optimizer


def make_data(n, g):
    y = torch.randint(0, 4, (n,), generator=g)
    x = 0.8 * torch.randn(n, 3, 32, 32, generator=g)
    yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    patterns = torch.stack([torch.sin(xx / 2), torch.sin(yy / 2), torch.sin((xx + yy) / 3), torch.cos((xx - yy) / 3)])
    x = x + patterns[y].unsqueeze(1)
    return x, y


def batches(x, y, bs, g):
    perm = torch.randperm(len(y), generator=g)
    for i in range(0, len(y), bs):
        idx = perm[i:i + bs]
        yield {"img": x[idx], "cls": y[idx]}


class BaseTrainer:
    def __init__(self, args, model, Distillation):
        self.args = args
        self.model = model
        self.Distillation = Distillation
        self.epochs = args.epochs

    def criterion(self, preds, batch):
        loss = F.cross_entropy(preds, batch["cls"])
        return loss, loss.detach()

    def _setup_train(self):
        if self.Distillation is not None:
            for k, v in self.Distillation.model.named_parameters():
                v.requires_grad = True
        self.accumulate = max(round(self.args.nbs / self.args.batch), 1)
        weight_decay = self.args.weight_decay * self.args.batch * self.accumulate / self.args.nbs
        self.optimizer = build_optimizer(model=self.model, name=self.args.optimizer, lr=self.args.lr0,
                                         momentum=self.args.momentum, decay=weight_decay)
        self.lf = lambda x: (1 - x / self.epochs) * (1.0 - self.args.lrf) + self.args.lrf  # linear
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda=self.lf)

    def optimizer_step(self):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=10.0)  # clip gradients
        self.optimizer.step()
        self.optimizer.zero_grad()

    def _do_train(self, train_x, train_y, g):
        self._setup_train()
        nb = math.ceil(len(train_y) / self.args.batch)
        last_opt_step = -1
        if self.Distillation is not None:
            distillation_loss = Distillation_loss(self.model, self.Distillation)

        for epoch in range(self.epochs):
            self.model.train()
            self.optimizer.zero_grad()
            if self.Distillation is not None:
                distillation_loss.register_hook()
            tloss, dloss, correct = 0.0, 0.0, 0
            for i, batch in enumerate(batches(train_x, train_y, self.args.batch, g)):
                ni = i + nb * epoch
                preds = self.model(batch['img'])
                self.loss, self.loss_items = self.criterion(preds, batch)
                tloss += self.loss_items.item()
                correct += (preds.argmax(1) == batch['cls']).sum().item()

                if self.Distillation is not None:
                    distill_weight = ((1 - math.cos(i * math.pi / nb)) / 2) * (0.1 - 1) + 1
                    with torch.no_grad():
                        pred = self.Distillation(batch['img'])

                    self.d_loss = distillation_loss.get_loss()
                    self.d_loss *= distill_weight
                    dloss += self.d_loss.item()
                    self.loss += self.d_loss

                self.loss.backward()

                if ni - last_opt_step >= self.accumulate:
                    self.optimizer_step()
                    last_opt_step = ni

            self.scheduler.step()
            if self.Distillation is not None:
                distillation_loss.remove_handle_()
                align = distillation_loss.D_loss_fn.align_module
                print(f"epoch {epoch + 1}/{self.epochs}: cls_loss {tloss / nb:.4f} d_loss {dloss / nb:.4f} "
                      f"acc {correct / len(train_y):.3f} | align_module.0.weight norm {align[0].weight.norm().item():.6f} "
                      f"pending grad norm {0.0 if align[0].weight.grad is None else align[0].weight.grad.norm().item():.3e}")


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    train_x, train_y = make_data(512, g)
    args = SimpleNamespace(epochs=6, batch=32, nbs=32, optimizer='SGD', lr0=0.01, lrf=0.01, momentum=0.937,
                           weight_decay=0.0005)

    # the teacher: a wider model trained first
    teacher = ClassifyModel(width=32)
    topt = torch.optim.SGD(teacher.parameters(), lr=0.05, momentum=0.9)
    for _ in range(3):
        for batch in batches(train_x, train_y, 32, g):
            topt.zero_grad()
            F.cross_entropy(teacher(batch['img']), batch['cls']).backward()
            topt.step()
    teacher.eval()

    student = ClassifyModel(width=16)
    trainer = BaseTrainer(args, student, teacher)
    trainer._do_train(train_x, train_y, g)


if __name__ == "__main__":
    main()
