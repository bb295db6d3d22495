# Source: KaiyangZhou/deep-person-reid, scripts/main.py, torchreid/utils/torchtools.py (save_checkpoint, load_checkpoint, resume_from_checkpoint), torchreid/optim/lr_scheduler.py (build_lr_scheduler), torchreid/engine/engine.py, torchreid/engine/image/softmax.py, commit 7ff428608ae98e3d2fdf98dfd22b101352f9fb1d
# Report: https://github.com/KaiyangZhou/deep-person-reid/issues/270
# Person re-ID softmax training with torchreid, interrupted after 5 epochs and restarted with
# cfg.model.resume pointing at the last checkpoint (both runs happen in this one process). The
# OSNet/ResNet backbone and Market-1501 are replaced by a small CNN on synthetic 32x16 "person"
# crops of 20 identities.
import os
import os.path as osp
import shutil
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


def save_checkpoint(state, save_dir, is_best=False):
    os.makedirs(save_dir, exist_ok=True)
    epoch = state['epoch']
    fpath = osp.join(save_dir, 'model.pth.tar-' + str(epoch))
    torch.save(state, fpath)
    print('Checkpoint saved to "{}"'.format(fpath))
    if is_best:
        shutil.copy(fpath, osp.join(osp.dirname(fpath), 'model-best.pth.tar'))
    return fpath


def load_checkpoint(fpath):
    if fpath is None:
        raise ValueError('File path is None')
    if not osp.exists(fpath):
        raise FileNotFoundError('File is not found at "{}"'.format(fpath))
    return torch.load(fpath, map_location='cpu')


def resume_from_checkpoint(fpath, model, optimizer=None):
    print('Loading checkpoint from "{}"'.format(fpath))
    checkpoint = load_checkpoint(fpath)
    model.load_state_dict(checkpoint['state_dict'])
    print('Loaded model weights')
    if optimizer is not None and 'optimizer' in checkpoint.keys():
        optimizer.load_state_dict(checkpoint['optimizer'])
        print('Loaded optimizer')
    start_epoch = checkpoint['epoch']
    print('Last epoch = {}'.format(start_epoch))
    if 'rank1' in checkpoint.keys():
        print('Last rank1 = {:.1%}'.format(checkpoint['rank1']))
    return start_epoch


def build_lr_scheduler(optimizer, lr_scheduler='single_step', stepsize=1, gamma=0.1, max_epoch=1):
    if lr_scheduler == 'single_step':
        if isinstance(stepsize, list):
            stepsize = stepsize[-1]
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=stepsize, gamma=gamma)
    elif lr_scheduler == 'multi_step':
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=stepsize, gamma=gamma)
    else:
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, float(max_epoch))
    return scheduler


class CrossEntropyLoss(nn.Module):
    def __init__(self, num_classes, eps=0.1, label_smooth=True):
        super(CrossEntropyLoss, self).__init__()
        self.num_classes = num_classes
        self.eps = eps if label_smooth else 0
        self.logsoftmax = nn.LogSoftmax(dim=1)

    def forward(self, inputs, targets):
        log_probs = self.logsoftmax(inputs)
        zeros = torch.zeros(log_probs.size())
        targets = zeros.scatter_(1, targets.unsqueeze(1).data.cpu(), 1)
        targets = (1 - self.eps) * targets + self.eps / self.num_classes
        return (-targets * log_probs).mean(0).sum()


class ReIDNet(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


class ImageSoftmaxEngine:
    def __init__(self, datamanager, model, optimizer, scheduler=None, label_smooth=True):
        self.train_loader, self.test_loader = datamanager
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.criterion = CrossEntropyLoss(num_classes=20, label_smooth=label_smooth)

    def run(self, save_dir, max_epoch, start_epoch=0, stop_epoch=None):
        for epoch in range(start_epoch, max_epoch):
            self.train(epoch, max_epoch)
            rank1 = self.test()
            self.save_model(epoch, rank1, save_dir)
            if stop_epoch is not None and epoch + 1 == stop_epoch:
                print('=> Interrupted after epoch {}'.format(epoch + 1))
                return

    def train(self, epoch, max_epoch):
        self.model.train()
        total, n = 0.0, 0
        for imgs, pids in self.train_loader:
            self.optimizer.zero_grad()
            outputs = self.model(imgs)
            loss = self.criterion(outputs, pids)
            loss.backward()
            self.optimizer.step()
            total += loss.item() * pids.size(0)
            n += pids.size(0)
        print('Epoch: [{0}/{1}]\tLoss {2:.4f}\tLr {3:.6f}'.format(
            epoch + 1, max_epoch, total / n, self.optimizer.param_groups[0]['lr']))
        if self.scheduler is not None:
            self.scheduler.step()

    @torch.no_grad()
    def test(self):
        self.model.eval()
        imgs, pids = self.test_loader
        return (self.model(imgs).argmax(1) == pids).float().mean().item()

    def save_model(self, epoch, rank1, save_dir, is_best=False):
        return save_checkpoint(
            {
                'state_dict': self.model.state_dict(),
                'epoch': epoch + 1,
                'rank1': rank1,
                'optimizer': self.optimizer.state_dict(),
            },
            save_dir,
            is_best=is_best
        )


def build_data(seed=0):
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(20, 3, 32, 16, generator=g)
    pids = torch.arange(20).repeat(16)
    imgs = protos[pids] * 0.6 + torch.randn(len(pids), 3, 32, 16, generator=g)
    perm = torch.randperm(len(pids), generator=g)
    imgs, pids = imgs[perm], pids[perm]
    train_loader = [(imgs[i:i + 32], pids[i:i + 32]) for i in range(0, 256, 32)]
    test_loader = (imgs[256:], pids[256:])
    return train_loader, test_loader


def main_run(save_dir, resume='', stop_epoch=None):
    torch.manual_seed(1)
    datamanager = build_data()
    model = ReIDNet(num_classes=20)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003, weight_decay=5e-4)
    scheduler = build_lr_scheduler(optimizer, lr_scheduler='single_step', stepsize=6, gamma=0.1)
    start_epoch = 0
    if resume and osp.isfile(resume):
        start_epoch = resume_from_checkpoint(
            resume, model, optimizer=optimizer
        )
    engine = ImageSoftmaxEngine(datamanager, model, optimizer, scheduler=scheduler)
    engine.run(save_dir, max_epoch=12, start_epoch=start_epoch, stop_epoch=stop_epoch)
    print('=> Final rank-1 (top-1 on held-out crops): {:.1%}'.format(engine.test()))


def main():
    save_dir = tempfile.mkdtemp()
    main_run(save_dir, stop_epoch=5)
    main_run(save_dir, resume=osp.join(save_dir, 'model.pth.tar-5'))
    shutil.rmtree(save_dir)


if __name__ == '__main__':
    main()
