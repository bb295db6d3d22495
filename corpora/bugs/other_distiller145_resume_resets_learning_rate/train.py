# Source: IntelLabs/distiller, distiller/apputils/checkpoint.py (save_checkpoint, load_checkpoint), examples/classifier_compression/compress_classifier.py (main, train, _validate), distiller/scheduler.py (CompressionScheduler), distiller/policy.py (LRPolicy), commit cef7fc36622d55f4549bf7dafb7bfe3c27445307
# Report: https://github.com/IntelLabs/distiller/issues/145
# Distiller's image-classifier sample: SGD with momentum, a MultiStepLR decay wrapped in an
# LRPolicy that the CompressionScheduler fires at the beginning of every epoch, a checkpoint
# (epoch, state_dict, optimizer, compression schedule) saved after every epoch, and --resume to
# continue a session from a checkpoint. The session is run in two parts: 8 epochs, then a resumed
# run of 6 more epochs from the last checkpoint. The CIFAR ResNet becomes a small MLP on a
# synthetic 4-class problem with noisy labels; YAML schedules become a dict; loggers are removed.
import logging
import os
import shutil
import tempfile
from errno import ENOENT
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(message)s")
msglogger = logging.getLogger()


class ScheduledTrainingPolicy(object):
    def on_epoch_begin(self, model, zeros_mask_dict, meta):
        pass

    def on_epoch_end(self, model, zeros_mask_dict, meta):
        pass


class LRPolicy(ScheduledTrainingPolicy):
    """ Learning-rate decay scheduling policy."""
    def __init__(self, lr_scheduler):
        super(LRPolicy, self).__init__()
        self.lr_scheduler = lr_scheduler

    def on_epoch_begin(self, model, zeros_mask_dict, meta):
        self.lr_scheduler.step()


class CompressionScheduler(object):
    def __init__(self, model):
        self.model = model
        self.policies = {}
        self.sched_metadata = {}
        self.zeros_mask_dict = {}

    def add_policy(self, policy, epochs=None, starting_epoch=0, ending_epoch=1, frequency=1):
        if epochs is None:
            epochs = list(range(starting_epoch, ending_epoch, frequency))
        for epoch in epochs:
            if epoch not in self.policies:
                self.policies[epoch] = [policy]
            else:
                self.policies[epoch].append(policy)
            assert len(self.policies[epoch]) > 0
        self.sched_metadata[policy] = {'starting_epoch': starting_epoch,
                                       'ending_epoch': ending_epoch,
                                       'frequency': frequency}

    def on_epoch_begin(self, epoch, optimizer=None):
        if epoch in self.policies:
            for policy in self.policies[epoch]:
                meta = self.sched_metadata[policy]
                meta['current_epoch'] = epoch
                policy.on_epoch_begin(self.model, self.zeros_mask_dict, meta)

    def on_epoch_end(self, epoch, optimizer=None):
        if epoch in self.policies:
            for policy in self.policies[epoch]:
                meta = self.sched_metadata[policy]
                meta['current_epoch'] = epoch
                meta['optimizer'] = optimizer
                policy.on_epoch_end(self.model, self.zeros_mask_dict, meta)

    def state_dict(self):
        return {'masks_dict': {}}

    def load_state_dict(self, state, normalize_dataparallel_keys=False):
        pass


def dict_config(model, optimizer, sched_dict, scheduler=None):
    if scheduler is None:
        scheduler = CompressionScheduler(model)
    for policy_def in sched_dict['policies']:
        lr_sched = sched_dict['lr_schedulers'][policy_def['lr_scheduler']['instance_name']]
        lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=lr_sched['milestones'],
                                                            gamma=lr_sched['gamma'])
        scheduler.add_policy(LRPolicy(lr_scheduler), starting_epoch=policy_def['starting_epoch'],
                             ending_epoch=policy_def['ending_epoch'], frequency=policy_def['frequency'])
    return scheduler


def save_checkpoint(epoch, arch, model, optimizer=None, scheduler=None,
                    best_top1=None, is_best=False, name=None, dir='.'):
    if not os.path.isdir(dir):
        raise IOError(ENOENT, 'Checkpoint directory does not exist at', os.path.abspath(dir))
    filename = 'checkpoint.pth.tar' if name is None else name + '_checkpoint.pth.tar'
    fullpath = os.path.join(dir, filename)
    filename_best = 'best.pth.tar' if name is None else name + '_best.pth.tar'
    fullpath_best = os.path.join(dir, filename_best)
    checkpoint = {}
    checkpoint['epoch'] = epoch
    checkpoint['arch'] = arch
    checkpoint['state_dict'] = model.state_dict()
    if best_top1 is not None:
        checkpoint['best_top1'] = best_top1
    if optimizer is not None:
        checkpoint['optimizer'] = optimizer.state_dict()
    if scheduler is not None:
        checkpoint['compression_sched'] = scheduler.state_dict()
    torch.save(checkpoint, fullpath)
    if is_best:
        shutil.copyfile(fullpath, fullpath_best)
    return fullpath


def load_checkpoint(model, chkpt_file, optimizer=None):
    if not os.path.isfile(chkpt_file):
        raise IOError(ENOENT, 'Could not find a checkpoint file at', chkpt_file)
    msglogger.info("=> loading checkpoint %s", chkpt_file)
    checkpoint = torch.load(chkpt_file, map_location=lambda storage, loc: storage)
    if 'state_dict' not in checkpoint:
        raise ValueError("Checkpoint must contain the model parameters under the key 'state_dict'")
    checkpoint_epoch = checkpoint.get('epoch', None)
    start_epoch = checkpoint_epoch + 1 if checkpoint_epoch is not None else 0
    best_top1 = checkpoint.get('best_top1', None)
    if best_top1 is not None:
        msglogger.info("   best top@1: %.3f", best_top1)
    compression_scheduler = None
    if 'compression_sched' in checkpoint:
        compression_scheduler = CompressionScheduler(model)
        compression_scheduler.load_state_dict(checkpoint['compression_sched'])
        msglogger.info("Loaded compression schedule from checkpoint (epoch {})".format(checkpoint_epoch))
    msglogger.info("=> loaded checkpoint '{f}' (epoch {e})".format(f=str(chkpt_file), e=checkpoint_epoch))
    model.load_state_dict(checkpoint['state_dict'])
    return (model, compression_scheduler, start_epoch)


def make_data(n, seed):
    g = np.random.RandomState(seed)
    centers = np.random.RandomState(0).randn(4, 20).astype(np.float32) * 0.9
    y = g.randint(0, 4, size=n)
    x = centers[y] + g.randn(n, 20).astype(np.float32)
    flip = g.rand(n) < 0.25
    y_noisy = np.where(flip, g.randint(0, 4, size=n), y)
    return torch.from_numpy(x), torch.from_numpy(y_noisy).long(), torch.from_numpy(y).long()


def create_model():
    return nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4))


def train(train_loader, model, criterion, optimizer, epoch, compression_scheduler, args):
    model.train()
    losses = []
    for train_step, (inputs, target) in enumerate(train_loader):
        output = model(inputs)
        loss = criterion(output, target)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float(np.mean(losses))


def _validate(data_loader, model, criterion, args, epoch=-1):
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for inputs, target in data_loader:
            output = model(inputs)
            loss_sum += criterion(output, target).item() * target.size(0)
            correct += (output.argmax(1) == target).sum().item()
            total += target.size(0)
    return 100.0 * correct / total, loss_sum / total


def batches(x, y, bs, shuffle, gen):
    idx = torch.randperm(len(x), generator=gen) if shuffle else torch.arange(len(x))
    return [(x[idx[i:i + bs]], y[idx[i:i + bs]]) for i in range(0, len(x), bs)]


def main(args, data):
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    start_epoch = 0
    model = create_model()
    compression_scheduler = None

    # We can optionally resume from a checkpoint
    if args.resume:
        model, compression_scheduler, start_epoch = load_checkpoint(model, chkpt_file=args.resume)

    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr,
                                momentum=args.momentum,
                                weight_decay=args.weight_decay)
    msglogger.info('Optimizer Type: %s', type(optimizer))

    if args.compress:
        compression_scheduler = dict_config(model, optimizer, args.compress, compression_scheduler)
    elif compression_scheduler is None:
        compression_scheduler = CompressionScheduler(model)

    xtr, ytr, xva, yva, xte, yte = data
    val_loader = batches(xva, yva, 256, False, gen)
    best_top1, chkpt = -1.0, None
    for epoch in range(start_epoch, start_epoch + args.epochs):
        if compression_scheduler:
            compression_scheduler.on_epoch_begin(epoch)
        train_loader = batches(xtr, ytr, args.batch_size, True, gen)
        tloss = train(train_loader, model, criterion, optimizer, epoch, compression_scheduler, args)
        top1, vloss = _validate(val_loader, model, criterion, args, epoch)
        msglogger.info("Epoch %2d  LR %.4f  train loss %.4f  ==> Top1: %.2f  Loss: %.4f",
                       epoch, optimizer.param_groups[0]['lr'], tloss, top1, vloss)
        if compression_scheduler:
            compression_scheduler.on_epoch_end(epoch, optimizer)
        is_best = top1 > best_top1
        best_top1 = max(best_top1, top1)
        chkpt = save_checkpoint(epoch, 'mlp', model, optimizer, compression_scheduler,
                                best_top1, is_best, args.name, args.logdir)
    top1, tloss = _validate(batches(xte, yte, 256, False, gen), model, criterion, args)
    msglogger.info("--- test ---------------------\n==> Top1: %.2f    Loss: %.4f", top1, tloss)
    return chkpt


if __name__ == "__main__":
    torch.set_num_threads(1)
    xtr, ytr, _ = make_data(2000, 1)
    xva, _, yva = make_data(1000, 2)
    xte, _, yte = make_data(2000, 3)
    data = (xtr, ytr, xva, yva, xte, yte)
    schedule = {'lr_schedulers': {'training_lr': {'milestones': [4, 7], 'gamma': 0.1}},
                'policies': [{'lr_scheduler': {'instance_name': 'training_lr'},
                              'starting_epoch': 0, 'ending_epoch': 14, 'frequency': 1}]}
    logdir = tempfile.mkdtemp()
    args = SimpleNamespace(seed=0, lr=0.1, momentum=0.9, weight_decay=1e-4, batch_size=32, epochs=8,
                           compress=schedule, resume=None, name='mlp', logdir=logdir)
    chkpt = main(args, data)
    msglogger.info("=== session interrupted; resuming from %s ===", os.path.basename(chkpt))
    args.resume, args.epochs, args.seed = chkpt, 6, 1
    main(args, data)
    shutil.rmtree(logdir)
