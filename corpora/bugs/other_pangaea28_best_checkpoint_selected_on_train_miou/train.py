# Source: VMarsocci/pangaea-bench, engine/trainer.py (Trainer, SegTrainer), engine/evaluator.py (SegEvaluator), utils/logger.py (RunningAverageMeter), run.py (main), commit 00f1816906b44c1eb80b2b2676543023e7ed45f9
# Report: https://github.com/VMarsocci/pangaea-bench/issues/28
# PANGAEA benchmark semantic-segmentation training: a segmentor over an encoder is trained with
# AdamW and a per-iteration MultiStepLR, the val set is evaluated (confusion-matrix mIoU) every
# eval_interval epochs, a "_best" checkpoint is kept during training and the test set is then
# evaluated with that best checkpoint. The geospatial foundation encoder + UPerNet become a small
# conv encoder-decoder, the datasets synthetic multispectral tiles whose training annotations
# have noisy regions; DDP, wandb, mixed precision and the flops counter are removed, and the
# separate evaluation run (--eval_dir) follows training in the same script.
import copy
import logging
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class RunningAverageMeter(object):
    def __init__(self, length=100):
        self.queue = []
        self.ptr = 0
        self.length = length

        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def reset(self):
        self.queue = []
        self.prt = 0
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val):
        if len(self.queue) < self.length:
            self.queue.append(val)
        else:
            self.queue[self.ptr] = val
            self.ptr = (self.ptr + 1) % self.length

        self.val = val
        self.sum = sum(self.queue)
        self.count = len(self.queue)
        self.avg = self.sum / self.count


CLASSES = ["background", "cropland", "forest", "water", "urban"]


class TileDataset(Dataset):
    def __init__(self, split, n, seed, label_noise=0.0, size=24, block=6, bands=6):
        rng = np.random.RandomState(seed)
        proto = np.random.RandomState(123).randn(len(CLASSES), bands).astype(np.float32)
        g = size // block
        self.split = split
        self.classes = CLASSES
        self.images, self.targets = [], []
        for _ in range(n):
            cls = rng.randint(0, len(CLASSES), size=(g, g))
            target = np.kron(cls, np.ones((block, block), np.int64))
            img = proto[target].transpose(2, 0, 1) + 1.6 * rng.randn(bands, size, size).astype(np.float32)
            if label_noise:
                flip = rng.rand(g, g) < label_noise
                noisy = np.where(flip, rng.randint(0, len(CLASSES), size=(g, g)), cls)
                target = np.kron(noisy, np.ones((block, block), np.int64))
            target[:1, :] = -1
            self.images.append(torch.from_numpy(img.astype(np.float32)))
            self.targets.append(torch.from_numpy(target))

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return {"image": {"optical": self.images[i]}, "target": self.targets[i]}


class Segmentor(nn.Module):
    def __init__(self, in_chans, num_classes, channels=64):
        super().__init__()
        self.model_name = "UPerNet"
        self.encoder = nn.Sequential(
            nn.Conv2d(in_chans, channels, 3, padding=1), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(),
        )
        self.down = nn.Sequential(nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(2 * channels, 2 * channels, 3, padding=1), nn.ReLU())
        self.fuse = nn.Sequential(nn.Conv2d(3 * channels, channels, 3, padding=1), nn.ReLU())
        self.conv_seg = nn.Conv2d(channels, num_classes, 1)

    def forward(self, img, output_shape=None):
        x = img["optical"]
        f1 = self.encoder(x)
        f2 = self.down(f1)
        f2 = F.interpolate(f2, size=f1.shape[-2:], mode="bilinear", align_corners=False)
        out = self.conv_seg(self.fuse(torch.cat([f1, f2], 1)))
        if output_shape is not None:
            out = F.interpolate(out, size=output_shape, mode="bilinear", align_corners=False)
        return out


class SegEvaluator():
    def __init__(self, args, val_loader, exp_dir, device):
        self.args = args
        self.val_loader = val_loader
        self.logger = logging.getLogger()
        self.exp_dir = exp_dir
        self.device = device
        self.classes = self.val_loader.dataset.classes
        self.split = self.val_loader.dataset.split
        self.num_classes = len(self.classes)
        self.max_name_len = max([len(name) for name in self.classes])

    @torch.no_grad()
    def evaluate(self, model, model_name='model', model_ckpt_path=None):
        t = time.time()

        if model_ckpt_path is not None:
            model_dict = torch.load(model_ckpt_path, map_location=self.device)
            model_name = os.path.basename(model_ckpt_path).split('.')[0]
            if 'model' in model_dict:
                model.load_state_dict(model_dict["model"])
            else:
                model.load_state_dict(model_dict)

            self.logger.info(f"Loaded model from {model_ckpt_path} for evaluation")

        model.eval()

        confusion_matrix = torch.zeros((self.num_classes, self.num_classes), device=self.device)

        for batch_idx, data in enumerate(self.val_loader):
            image, target = data['image'], data['target']
            image = {k: v.to(self.device) for k, v in image.items()}
            target = target.to(self.device)

            logits = model(image, output_shape=target.shape[-2:])
            if logits.shape[1] == 1:
                pred = (torch.sigmoid(logits) > 0.5).type(torch.int64).squeeze(dim=1)
            else:
                pred = torch.argmax(logits, dim=1)
            valid_mask = target != -1
            pred, target = pred[valid_mask], target[valid_mask]
            count = torch.bincount((pred * self.num_classes + target), minlength=self.num_classes ** 2)
            confusion_matrix += count.view(self.num_classes, self.num_classes)

        metrics = self.compute_metrics(confusion_matrix)
        self.log_metrics(metrics, model_name)

        used_time = time.time() - t

        return metrics, used_time

    @torch.no_grad()
    def __call__(self, model, model_name='model', model_ckpt_path=None):
        return self.evaluate(model, model_name, model_ckpt_path)

    def compute_metrics(self, confusion_matrix):
        intersection = torch.diag(confusion_matrix)
        union = confusion_matrix.sum(dim=1) + confusion_matrix.sum(dim=0) - intersection
        iou = (intersection / (union + 1e-6)) * 100

        precision = intersection / (confusion_matrix.sum(dim=0) + 1e-6) * 100
        recall = intersection / (confusion_matrix.sum(dim=1) + 1e-6) * 100

        f1 = 2 * (precision * recall) / (precision + recall + 1e-6)

        miou = iou.mean().item()
        mf1 = f1.mean().item()
        macc = (intersection.sum() / (confusion_matrix.sum() + 1e-6)).item() * 100

        metrics = {
            'IoU': [iou[i].item() for i in range(self.num_classes)],
            'mIoU': miou,
            'F1': [f1[i].item() for i in range(self.num_classes)],
            'mF1': mf1,
            'mAcc': macc,
        }

        return metrics

    def log_metrics(self, metrics, model_name):
        self.logger.info(f"[{model_name} on {self.split} set] mIoU {metrics['mIoU']:.3f}  "
                         f"mF1 {metrics['mF1']:.3f}  Mean Accuracy: {metrics['mAcc']:.3f}")


class Trainer():
    def __init__(self, args, model, train_loader, criterion, optimizer, lr_scheduler, evaluator, exp_dir, device):
        self.args = args
        self.rank = 0
        self.criterion = criterion
        self.model = model
        self.train_loader = train_loader
        self.batch_per_epoch = len(self.train_loader)
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.evaluator = evaluator
        self.logger = logging.getLogger()
        self.training_stats = {name: RunningAverageMeter(length=self.batch_per_epoch) for name in ['loss', 'data_time', 'batch_time', 'eval_time']}
        self.training_metrics = {}
        self.best_ckpt = None
        self.exp_dir = exp_dir
        self.device = device

        self.start_epoch = 0
        self.epochs = args.epochs

    def train(self):
        for epoch in range(self.start_epoch, self.epochs):
            # train the network for one epoch
            if epoch % self.args.eval_interval == 0:
                _, used_time = self.evaluator(self.model, f'epoch {epoch}')
                self.training_stats['eval_time'].update(used_time)

            self.t = time.time()
            self.train_one_epoch(epoch)
            if epoch % self.args.ckpt_interval == 0 and epoch != self.start_epoch:
                self.save_model(epoch)

        self.evaluator(self.model, 'final model')

        # save last model
        self.save_model(self.epochs, is_final=True)

        # save best model
        if self.best_ckpt:
            self.save_model(self.best_ckpt["epoch"], is_best=True, checkpoint=self.best_ckpt)

    def train_one_epoch(self, epoch):
        self.model.train()

        end_time = time.time()
        for batch_idx, data in enumerate(self.train_loader):
            image, target = data['image'], data['target']
            image = {k: v.to(self.device) for k, v in image.items()}
            target = target.to(self.device)
            self.training_stats['data_time'].update(time.time() - end_time)

            logits = self.model(image, output_shape=target.shape[-2:])
            loss = self.compute_loss(logits, target)
            self.compute_logging_metrics(logits.detach().clone(), target.detach().clone())

            self.optimizer.zero_grad()

            loss.backward()
            self.optimizer.step()
            self.lr_scheduler.step()

            self.training_stats['loss'].update(loss.item())
            if (batch_idx + 1) % self.args.log_interval == 0:
                self.log(batch_idx + 1, epoch)
            self.training_stats['batch_time'].update(time.time() - end_time)
            end_time = time.time()

    def get_checkpoint(self, epoch):
        checkpoint = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict(),
            "epoch": epoch,
        }
        return copy.deepcopy(checkpoint)

    def save_model(self, epoch, is_final=False, is_best=False, checkpoint=None):
        if self.rank != 0:
            return
        checkpoint = self.get_checkpoint(epoch) if checkpoint is None else checkpoint
        suffix = '_best' if is_best else '_final' if is_final else ''
        checkpoint_path = os.path.join(self.exp_dir, f"checkpoint_{epoch}{suffix}.pth")
        torch.save(checkpoint, checkpoint_path)
        self.logger.info(f"Epoch {epoch} | Training checkpoint saved at {checkpoint_path}")

    def compute_loss(self, logits, target):
        pass

    @torch.no_grad()
    def compute_logging_metrics(self, logits, target):
        pass

    def log(self, batch_idx, epoch):
        basic_info = (
            "Epoch [{epoch}-{batch_idx}/{len_loader}]\t"
            "Loss {loss.val:.4f} ({loss.avg:.4f})\t"
            "lr {lr:.3e}"
            .format(
                epoch=epoch,
                len_loader=len(self.train_loader),
                batch_idx=batch_idx,
                loss=self.training_stats['loss'],
                lr=self.optimizer.param_groups[0]['lr']
            ))

        metrics_info = ['{} {:>7} ({:>7})'.format(k, '%.3f' % v.val, '%.3f' % v.avg) for k, v in self.training_metrics.items()]
        metrics_info = ' Training metrics: ' + '\t'.join(metrics_info)
        self.logger.info(basic_info + metrics_info)


class SegTrainer(Trainer):
    def __init__(self, args, model, train_loader, criterion, optimizer, scheduler, evaluator, exp_dir, device):
        super().__init__(args, model, train_loader, criterion, optimizer, scheduler, evaluator, exp_dir, device)

        self.training_metrics = {name: RunningAverageMeter(length=100) for name in ['Acc', 'mAcc', 'mIoU']}
        self.best_metric = float('-inf')

    def train_one_epoch(self, epoch):
        super().train_one_epoch(epoch)

        if self.training_metrics['mIoU'].avg > self.best_metric:
            self.best_metric = self.training_metrics['mIoU'].avg
            self.best_ckpt = self.get_checkpoint(epoch)

    def compute_loss(self, logits, target):
        loss = self.criterion(logits, target)

        return loss

    @torch.no_grad()
    def compute_logging_metrics(self, logits, target):
        num_classes = logits.shape[1]
        if num_classes == 1:
            pred = (torch.sigmoid(logits) > 0.5).type(torch.int64)
        else:
            pred = torch.argmax(logits, dim=1, keepdim=True)
        target = target.unsqueeze(1)
        ignore_mask = target == -1
        target[ignore_mask] = 0
        ignore_mask = ignore_mask.expand(-1, num_classes if num_classes > 1 else 2, -1, -1)

        dims = list(logits.shape)
        if num_classes == 1:
            dims[1] = 2
        binary_pred = torch.zeros(dims, dtype=bool, device=self.device)
        binary_target = torch.zeros(dims, dtype=bool, device=self.device)
        binary_pred.scatter_(dim=1, index=pred, src=torch.ones_like(binary_pred))
        binary_target.scatter_(dim=1, index=target, src=torch.ones_like(binary_target))
        binary_pred[ignore_mask] = 0
        binary_target[ignore_mask] = 0

        intersection = torch.logical_and(binary_pred, binary_target)
        union = torch.logical_or(binary_pred, binary_target)

        acc = intersection.sum() / binary_target.sum() * 100
        macc = torch.nanmean(intersection.sum(dim=(0, 2, 3)) / binary_target.sum(dim=(0, 2, 3))) * 100
        miou = torch.nanmean(intersection.sum(dim=(0, 2, 3)) / union.sum(dim=(0, 2, 3))) * 100

        self.training_metrics['Acc'].update(acc.item())
        self.training_metrics['mAcc'].update(macc.item())
        self.training_metrics['mIoU'].update(miou.item())


class Cfg:
    seed = 0
    batch_size = 8
    epochs = 30
    eval_interval = 1
    ckpt_interval = 100
    log_interval = 3
    lr = 2e-3
    weight_decay = 0.05
    lr_milestones = [0.6, 0.9]
    ignore_index = -1


def main(cfg):
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logger = logging.getLogger()
    device = torch.device("cpu")

    train_dataset = TileDataset("train", 24, seed=1, label_noise=0.5)
    val_dataset = TileDataset("val", 24, seed=2)
    test_dataset = TileDataset("test", 48, seed=3)

    model = Segmentor(in_chans=6, num_classes=len(CLASSES)).to(device)
    logger.info("Built {} for with {} encoder.".format(model.model_name, "conv"))

    with tempfile.TemporaryDirectory() as exp_dir:
        g = torch.Generator().manual_seed(cfg.seed)
        train_loader = DataLoader(train_dataset, batch_size=cfg.batch_size, shuffle=True, generator=g, drop_last=True)
        val_loader = DataLoader(val_dataset, batch_size=cfg.batch_size, shuffle=False, drop_last=False)

        criterion = torch.nn.CrossEntropyLoss(ignore_index=cfg.ignore_index)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.999), weight_decay=cfg.weight_decay)
        total_iters = cfg.epochs * len(train_loader)
        scheduler = torch.optim.lr_scheduler.MultiStepLR(
            optimizer, [total_iters * r for r in cfg.lr_milestones], gamma=0.1)

        val_evaluator = SegEvaluator(cfg, val_loader, exp_dir, device)
        trainer = SegTrainer(cfg, model, train_loader, criterion, optimizer, scheduler, val_evaluator, exp_dir, device)
        trainer.train()

        # Evaluation
        test_loader = DataLoader(test_dataset, batch_size=cfg.batch_size, shuffle=False, drop_last=False)
        test_evaluator = SegEvaluator(cfg, test_loader, exp_dir, device)
        model_ckpt_path = os.path.join(
            exp_dir, next(f for f in os.listdir(exp_dir) if f.endswith("_best.pth"))
        )
        test_evaluator.evaluate(model, "best model", model_ckpt_path)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Cfg())
