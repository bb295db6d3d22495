# Source: bubbliiiing/yolo3-pytorch, train.py (fit_ont_epoch, __main__), nets/yolo_training.py (YOLOLoss), nets/yolo3.py (YoloBody), commit 0a34b171520796d4accf797751613e8680af3451
# Report: https://github.com/bubbliiiing/yolo3-pytorch/issues/3
# YOLOv3 training script: YoloBody with three detection heads, one YOLOLoss per scale summed,
# Adam + StepLR(gamma=0.95) per epoch, frozen-backbone phase, tqdm progress replaced by a
# per-epoch print, validation under torch.no_grad(). The VOC data set is replaced by synthetic
# 64x64 images with 1-2 bright rectangles of 2 classes; Darknet-53 is reduced to a 4-stage
# backbone at width 8-32 with 3 heads at strides 8/16/32; the box loss is reduced to
# BCE on x/y/conf/class and MSE on w/h with the usual best-anchor assignment.
import resource
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

Config = {"yolo": {"anchors": [[[30, 30], [40, 24], [24, 40]], [[16, 16], [20, 12], [12, 20]],
                               [[6, 6], [8, 5], [5, 8]]], "classes": 2},
          "img_h": 64, "img_w": 64}


def conv(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.1))


class YoloBody(nn.Module):
    def __init__(self, config):
        super().__init__()
        out = 3 * (5 + config["yolo"]["classes"])
        self.backbone = nn.ModuleDict({
            "stem": conv(3, 8), "l1": conv(8, 16, s=2), "l2": conv(16, 16, s=2),
            "l3": conv(16, 24, s=2), "l4": conv(24, 32, s=2), "l5": conv(32, 32, s=2)})
        self.head0 = nn.Sequential(conv(32, 32), nn.Conv2d(32, out, 1))
        self.head1 = nn.Sequential(conv(32 + 32, 24), nn.Conv2d(24, out, 1))
        self.head2 = nn.Sequential(conv(32 + 24, 16), nn.Conv2d(16, out, 1))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")

    def forward(self, x):
        b = self.backbone
        x = b["l1"](b["stem"](x))
        x2 = b["l2"](x)          # stride 4
        x3 = b["l3"](x2)         # stride 8
        x4 = b["l4"](x3)         # stride 16
        x5 = b["l5"](x4)         # stride 32
        out0 = self.head0(x5)
        out1 = self.head1(torch.cat([self.up(x5), x4], 1))
        out2 = self.head2(torch.cat([self.up(x4), x3], 1))
        return out0, out1, out2


class YOLOLoss(nn.Module):
    def __init__(self, anchors, num_classes, img_size, cuda):
        super().__init__()
        self.anchors = anchors
        self.num_anchors = len(anchors)
        self.num_classes = num_classes
        self.bbox_attrs = 5 + num_classes
        self.img_size = img_size
        self.bce = nn.BCELoss()
        self.mse = nn.MSELoss()

    def forward(self, input, targets=None):
        bs, _, in_h, in_w = input.shape
        stride_h, stride_w = self.img_size[1] / in_h, self.img_size[0] / in_w
        scaled_anchors = [(a_w / stride_w, a_h / stride_h) for a_w, a_h in self.anchors]
        prediction = input.view(bs, self.num_anchors, self.bbox_attrs, in_h, in_w).permute(0, 1, 3, 4, 2).contiguous()
        x = torch.sigmoid(prediction[..., 0])
        y = torch.sigmoid(prediction[..., 1])
        w = prediction[..., 2]
        h = prediction[..., 3]
        conf = torch.sigmoid(prediction[..., 4])
        pred_cls = torch.sigmoid(prediction[..., 5:])
        mask, noobj_mask, tx, ty, tw, th, tconf, tcls = self.get_target(targets, scaled_anchors, in_w, in_h)
        loss_x = self.bce(x * mask, tx * mask)
        loss_y = self.bce(y * mask, ty * mask)
        loss_w = self.mse(w * mask, tw * mask)
        loss_h = self.mse(h * mask, th * mask)
        loss_conf = self.bce(conf * mask, mask) + 0.5 * self.bce(conf * noobj_mask, noobj_mask * 0.0)
        loss_cls = self.bce(pred_cls[mask == 1], tcls[mask == 1]) if mask.sum() > 0 else conf.sum() * 0
        loss = loss_x + loss_y + loss_w + loss_h + loss_conf + loss_cls
        return loss, loss_x.item(), loss_y.item(), loss_w.item(), loss_h.item(), loss_conf.item(), loss_cls.item()

    def get_target(self, target, anchors, in_w, in_h):
        bs = len(target)
        shape = (bs, self.num_anchors, in_h, in_w)
        mask, noobj_mask = torch.zeros(shape), torch.ones(shape)
        tx, ty, tw, th, tconf = (torch.zeros(shape) for _ in range(5))
        tcls = torch.zeros(shape + (self.num_classes,))
        anchor_wh = torch.tensor(anchors)
        for b in range(bs):
            for t in target[b]:
                gx, gy, gw, gh = t[0] * in_w, t[1] * in_h, t[2] * in_w, t[3] * in_h
                gi, gj = min(int(gx), in_w - 1), min(int(gy), in_h - 1)
                inter = torch.minimum(anchor_wh[:, 0], gw) * torch.minimum(anchor_wh[:, 1], gh)
                iou = inter / (gw * gh + anchor_wh[:, 0] * anchor_wh[:, 1] - inter)
                best_n = int(torch.argmax(iou))
                noobj_mask[b, iou > 0.5, gj, gi] = 0
                mask[b, best_n, gj, gi] = 1
                noobj_mask[b, best_n, gj, gi] = 0
                tx[b, best_n, gj, gi] = gx - gi
                ty[b, best_n, gj, gi] = gy - gj
                tw[b, best_n, gj, gi] = torch.log(gw / anchors[best_n][0] + 1e-16)
                th[b, best_n, gj, gi] = torch.log(gh / anchors[best_n][1] + 1e-16)
                tconf[b, best_n, gj, gi] = 1
                tcls[b, best_n, gj, gi, int(t[4])] = 1
        return mask, noobj_mask, tx, ty, tw, th, tconf, tcls


def graph_nodes(value):
    fn = getattr(value, "grad_fn", None)
    seen, stack = set(), [fn] if fn is not None else []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(nxt for nxt, _ in node.next_functions)
    return len(seen)


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // (1024 * 1024)


def get_lr(optimizer):
    for param_group in optimizer.param_groups:
        return param_group['lr']


def fit_ont_epoch(net, yolo_losses, epoch, epoch_size, epoch_size_val, gen, genval, Epoch, cuda):
    total_loss = 0
    val_loss = 0
    start_time = time.time()
    for iteration, batch in enumerate(gen):
        if iteration >= epoch_size:
            break
        images, targets = batch[0], batch[1]
        with torch.no_grad():
            images = torch.from_numpy(images).type(torch.FloatTensor)
            targets = [torch.from_numpy(ann).type(torch.FloatTensor) for ann in targets]
        optimizer.zero_grad()
        outputs = net(images)
        losses = []
        for i in range(3):
            loss_item = yolo_losses[i](outputs[i], targets)
            losses.append(loss_item[0])
        loss = sum(losses)
        loss.backward()
        optimizer.step()

        total_loss += loss
    net.eval()
    for iteration, batch in enumerate(genval):
        if iteration >= epoch_size_val:
            break
        images_val, targets_val = batch[0], batch[1]

        with torch.no_grad():
            images_val = torch.from_numpy(images_val).type(torch.FloatTensor)
            targets_val = [torch.from_numpy(ann).type(torch.FloatTensor) for ann in targets_val]
            optimizer.zero_grad()
            outputs = net(images_val)
            losses = []
            for i in range(3):
                loss_item = yolo_losses[i](outputs[i], targets_val)
                losses.append(loss_item[0])
            loss = sum(losses)
            val_loss += loss
    net.train()
    print('Epoch:' + str(epoch + 1) + '/' + str(Epoch) + ' lr %.2e' % get_lr(optimizer))
    print('Total Loss: %.4f || Val Loss: %.4f || %.1fs || RSS %d MB, autograd nodes held by total_loss %d' % (
        total_loss / (epoch_size + 1), val_loss / (epoch_size_val + 1), time.time() - start_time,
        rss_mb(), graph_nodes(total_loss)))


def make_lines(n, rng):
    lines = []
    for _ in range(n):
        boxes = []
        for _ in range(rng.randint(1, 3)):
            w, h = rng.uniform(0.1, 0.5, size=2)
            cx, cy = rng.uniform(w / 2, 1 - w / 2), rng.uniform(h / 2, 1 - h / 2)
            boxes.append([cx, cy, w, h, rng.randint(2)])
        lines.append(np.array(boxes, np.float32))
    return lines


class Generator(object):
    def __init__(self, batch_size, lines, image_size, seed=0):
        self.batch_size = batch_size
        self.lines = lines
        self.image_size = image_size
        self.rng = np.random.RandomState(seed)

    def generate(self):
        while True:
            order = self.rng.permutation(len(self.lines))
            for s in range(0, len(order) - self.batch_size + 1, self.batch_size):
                images, targets = [], []
                for k in order[s:s + self.batch_size]:
                    img = self.rng.normal(0, 0.1, size=(3,) + self.image_size).astype(np.float32)
                    for cx, cy, w, h, c in self.lines[k]:
                        y0, y1 = int((cy - h / 2) * self.image_size[0]), int((cy + h / 2) * self.image_size[0])
                        x0, x1 = int((cx - w / 2) * self.image_size[1]), int((cx + w / 2) * self.image_size[1])
                        img[int(c), y0:y1, x0:x1] += 1.0
                    images.append(img)
                    targets.append(self.lines[k])
                yield np.stack(images), targets


if __name__ == "__main__":
    torch.manual_seed(0)
    model = YoloBody(Config)
    Cuda = False
    net = model.train()

    yolo_losses = []
    for i in range(3):
        yolo_losses.append(YOLOLoss(np.reshape(Config["yolo"]["anchors"][i], [-1, 2]),
                                    Config["yolo"]["classes"], (Config["img_w"], Config["img_h"]), Cuda))

    val_split = 0.1
    rng = np.random.RandomState(10101)
    lines = make_lines(440, rng)
    num_val = int(len(lines) * val_split)
    num_train = len(lines) - num_val

    if True:
        lr = 1e-3
        Batch_size = 2
        Init_Epoch = 0
        Freeze_Epoch = 4

        optimizer = optim.Adam(net.parameters(), lr)
        lr_scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.95)

        gen = Generator(Batch_size, lines[:num_train], (Config["img_h"], Config["img_w"])).generate()
        gen_val = Generator(Batch_size, lines[num_train:], (Config["img_h"], Config["img_w"]), seed=1).generate()

        epoch_size = num_train // Batch_size
        epoch_size_val = num_val // Batch_size
        for param in model.backbone.parameters():
            param.requires_grad = False

        for epoch in range(Init_Epoch, Freeze_Epoch):
            fit_ont_epoch(net, yolo_losses, epoch, epoch_size, epoch_size_val, gen, gen_val, Freeze_Epoch, Cuda)
            lr_scheduler.step()
