# Source: XuyangBai/KPConv.pytorch, trainer.py (Trainer.train, train_epoch, evaluate), utils/metrics.py (calculate_acc, calculate_iou), commit 89b8e37bac6cb62b6b583723178c4c734f36a4a4
# Report: https://github.com/XuyangBai/KPConv.pytorch/issues/3
# KPConv part-segmentation trainer: stacked point clouds with stack_lengths, per-epoch
# training, evaluation every epoch whose loss / IoU pick the 'best_loss' / 'best_iou'
# snapshots, StepLR-style scheduler every scheduler_interval epochs. The KPConv network and
# ShapeNetPart loader are replaced by a small per-point MLP with a per-cloud max-pooled
# global feature on synthetic two-part shapes (10% of the training point labels are noisy);
# tensorboard and checkpoint files are replaced by prints.
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class AverageMeter(object):
    def __init__(self):
        self.avg, self.sum, self.count = 0.0, 0.0, 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def calculate_acc(predict, labels):
    pred_labels = torch.max(predict, dim=1)[1]
    return torch.sum(pred_labels == labels).float().item() * 100 / predict.shape[0]


def calculate_iou(predict, labels, stack_lengths, n_parts):
    pred_labels = torch.max(predict, dim=1)[1]
    start_ind = 0
    iou_list = []
    for length in stack_lengths:
        length = int(length)
        pred, label = pred_labels[start_ind:start_ind + length], labels[start_ind:start_ind + length]
        start_ind += length
        part_ious = []
        for j in range(n_parts):
            inter = torch.sum((pred == j) & (label == j)).item()
            union = torch.sum((pred == j) | (label == j)).item()
            part_ious.append(1.0 if union == 0 else inter / union)
        iou_list.append(np.mean(part_ious))
    return iou_list


class ShapePartDataset(Dataset):
    """Two-part shapes: a sphere (part 0) and a cylinder (part 1) whose size and offset vary."""

    def __init__(self, n_shapes, n_points, seed, label_noise):
        rng = np.random.RandomState(seed)
        self.items = []
        for _ in range(n_shapes):
            n0 = n_points // 2
            d = rng.normal(size=(n0, 3))
            sphere = d / np.linalg.norm(d, axis=1, keepdims=True) * rng.uniform(0.5, 1.0)
            h = rng.uniform(0.8, 1.6)
            ang = rng.uniform(0, 2 * np.pi, n_points - n0)
            r = rng.uniform(0.25, 0.5)
            cyl = np.stack([r * np.cos(ang), r * np.sin(ang), rng.uniform(0, h, n_points - n0)], 1)
            cyl[:, 2] += rng.uniform(0.2, 0.8)
            pts = np.concatenate([sphere, cyl]) + rng.normal(0, 0.15, size=(n_points, 3))
            lab = np.concatenate([np.zeros(n0), np.ones(n_points - n0)]).astype(np.int64)
            flip = rng.uniform(size=n_points) < label_noise
            lab[flip] = 1 - lab[flip]
            self.items.append((pts.astype(np.float32), lab))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate_fn(batch):
    points = torch.from_numpy(np.concatenate([b[0] for b in batch]))
    labels = torch.from_numpy(np.concatenate([b[1] for b in batch]))
    lengths = torch.tensor([len(b[0]) for b in batch])
    return {'points': [points], 'features': torch.cat([torch.ones(len(points), 1), points], 1),
            'labels': labels, 'stack_lengths': [lengths]}


class PointSegNet(nn.Module):
    def __init__(self, num_classes, hidden=128):
        super().__init__()
        self.local = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                  nn.Linear(hidden, num_classes))

    def forward(self, inputs):
        f = self.local(inputs['features'])
        glob = torch.cat([seg.max(0, keepdim=True)[0].expand(len(seg), -1)
                          for seg in torch.split(f, inputs['stack_lengths'][0].tolist())])
        return self.head(torch.cat([f, glob], 1))


class Trainer(object):
    def __init__(self, args):
        self.config = args.config
        self.start_epoch = args.start_epoch
        self.epoch = args.epoch
        self.device = args.device
        self.best_iou = 0
        self.best_loss = 10000000
        self.best_epochs = {}

        self.model = args.model.to(self.device)
        self.optimizer = args.optimizer
        self.scheduler = args.scheduler
        self.scheduler_interval = args.scheduler_interval
        self.evaluate_interval = args.evaluate_interval
        self.evaluate_metric = args.evaluate_metric

        self.train_loader = args.train_loader
        self.test_loader = args.test_loader

    def train(self):
        self.train_hist = {'iou': [], 'loss': [], 'accuracy': []}
        print('training start!!')
        self.model.train()
        for epoch in range(self.start_epoch, self.epoch):
            self.train_epoch(epoch)

            if (epoch + 1) % self.evaluate_interval == 0 or epoch == 0:
                res = self.evaluate(epoch + 1)
                print(f'Evaluation: Epoch {epoch + 1}: Loss {res["loss"]:.4f}, Accuracy {res["accuracy"]:.2f}, IOU {res["iou"]:.4f}')
                if res['loss'] < self.best_loss:
                    self.best_loss = res['loss']
                    self._snapshot(epoch + 1, 'best_loss')
                if res['iou'] > self.best_iou:
                    self.best_iou = res['iou']
                    self._snapshot(epoch + 1, 'best_iou')

            if (epoch + 1) % self.scheduler_interval == 0:
                self.scheduler.step()
        print("Training finish!... best_loss snapshot from epoch %d, best_iou snapshot from epoch %d"
              % (self.best_epochs['best_loss'], self.best_epochs['best_iou']))

    def train_epoch(self, epoch):
        loss_meter, acc_meter, iou_meter = AverageMeter(), AverageMeter(), AverageMeter()
        num_iter = int(len(self.train_loader.dataset) // self.train_loader.batch_size)
        train_loader_iter = self.train_loader.__iter__()
        for iter in range(num_iter):
            inputs = next(train_loader_iter)
            for k, v in inputs.items():  # load inputs to device.
                if type(v) == list:
                    inputs[k] = [item.to(self.device) for item in v]
                else:
                    inputs[k] = v.to(self.device)

            # forward
            self.optimizer.zero_grad()
            predict = self.model(inputs)
            labels = inputs['labels'].long().squeeze()
            loss = self.evaluate_metric(predict, labels)
            acc = calculate_acc(predict, labels)
            part_iou = calculate_iou(predict, labels, stack_lengths=inputs['stack_lengths'][0], n_parts=self.config.num_classes)
            iou = np.mean(part_iou)

            # backward
            loss.backward()
            self.optimizer.step()
            loss_meter.update(float(loss))
            iou_meter.update(float(iou))
            acc_meter.update(float(acc))
        self.train_hist['loss'].append(loss_meter.avg)
        self.train_hist['accuracy'].append(acc_meter.avg)
        self.train_hist['iou'].append(iou_meter.avg)
        print(f'Epoch {epoch+1}: Loss : {loss_meter.avg:.4f}, Accuracy: {acc_meter.avg:.2f}, IOU: {iou_meter.avg:.4f}')

    def evaluate(self, epoch):
        loss_meter, acc_meter, iou_meter = AverageMeter(), AverageMeter(), AverageMeter()
        num_iter = int(len(self.test_loader.dataset) // self.train_loader.batch_size)
        test_loader_iter = self.train_loader.__iter__()
        for iter in range(num_iter):
            inputs = next(test_loader_iter)
            for k, v in inputs.items():  # load inputs to device.
                if type(v) == list:
                    inputs[k] = [item.to(self.device) for item in v]
                else:
                    inputs[k] = v.to(self.device)

            predict = self.model(inputs)
            labels = inputs['labels'].long().squeeze()
            loss = self.evaluate_metric(predict, labels)
            acc = calculate_acc(predict, labels)
            part_iou = calculate_iou(predict, labels, stack_lengths=inputs['stack_lengths'][0], n_parts=self.config.num_classes)
            iou = np.mean(part_iou)

            loss_meter.update(float(loss))
            iou_meter.update(float(iou))
            acc_meter.update(float(acc))
        self.model.train()
        res = {
            'iou': iou_meter.avg,
            'loss': loss_meter.avg,
            'accuracy': acc_meter.avg
        }
        return res

    def _snapshot(self, epoch, name=None):
        self.best_epochs[name] = epoch


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)

    class Args:
        pass

    args = Args()
    args.config = Args()
    args.config.num_classes = 2
    args.start_epoch, args.epoch, args.device = 0, 20, torch.device('cpu')
    train_set = ShapePartDataset(48, 256, seed=0, label_noise=0.1)
    test_set = ShapePartDataset(32, 256, seed=1, label_noise=0.0)
    args.train_loader = DataLoader(train_set, batch_size=4, shuffle=True, collate_fn=collate_fn)
    args.test_loader = DataLoader(test_set, batch_size=4, shuffle=False, collate_fn=collate_fn)
    args.model = PointSegNet(args.config.num_classes)
    args.optimizer = torch.optim.Adam(args.model.parameters(), lr=3e-3)
    args.scheduler = torch.optim.lr_scheduler.StepLR(args.optimizer, step_size=1, gamma=0.9)
    args.scheduler_interval = 10
    args.evaluate_interval = 1
    args.evaluate_metric = nn.CrossEntropyLoss()
    t0 = time.time()
    Trainer(args).train()
    print('done in %.1fs' % (time.time() - t0))


if __name__ == '__main__':
    main()
