# Source: jakesnell/prototypical-networks, scripts/train/few_shot/train.py + protonets/engine.py + protonets/models/few_shot.py + protonets/models/utils.py + protonets/data/base.py + protonets/data/omniglot.py + protonets/utils/model.py, commit c9bb4d258267c11cb6e23f0a19242d24ca98ad8a
# https://github.com/jakesnell/prototypical-networks
#
# Prototypical networks (original code): an Engine with hook lambdas drives training; the optimizer is
# created INSIDE engine.train from optim_method/optim_config, and the StepLR is created in the on_start
# hook and stepped in on_start_epoch (before any optimizer step); episodes come from a DataLoader whose
# batch_sampler yields random class subsets (EpisodicBatchSampler) over a dataset of whole classes, each
# item transformed into support/query tensors; prototypes are support means, logits are negative squared
# euclidean distances; targets come from arange(n_class) expanded (requires_grad=False Variable);
# validation runs model.loss in eval() mode without no_grad; the best model is moved to cpu(),
# torch.save()-d whole and moved back; early stopping on validation loss with patience.
# Adaptation: Omniglot images (vinyals split) -> synthetic 28x28 characters in memory (3 strokes per
# class, 20 shifted noisy drawings) 240 train / 60 val classes, no rotations; torchnet ListDataset /
# TransformDataset / AverageValueMeter replaced by torch Dataset + DataLoader(batch_sampler=...) and a
# small meter with the same add/reset/value; data.way 60 -> 5 (train), data.train_episodes 100 -> 20,
# data.test_episodes 100 -> 8 (test_way 5, test_query 15), train.epochs 10000 -> 3, decay_every 20;
# tqdm disabled; log dir in a temp directory; the validation is also run once before training and printed; cpu.
import json
import os
import tempfile
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.optim.lr_scheduler as lr_scheduler
from torch.autograd import Variable
from tqdm import tqdm


# ---------------- protonets/models/utils.py ----------------
def euclidean_dist(x, y):
    # x: N x D
    # y: M x D
    n = x.size(0)
    m = y.size(0)
    d = x.size(1)
    assert d == y.size(1)

    x = x.unsqueeze(1).expand(n, m, d)
    y = y.unsqueeze(0).expand(n, m, d)

    return torch.pow(x - y, 2).sum(2)

# ---------------- protonets/models/few_shot.py ----------------

class Flatten(nn.Module):
    def __init__(self):
        super(Flatten, self).__init__()

    def forward(self, x):
        return x.view(x.size(0), -1)

class Protonet(nn.Module):
    def __init__(self, encoder):
        super(Protonet, self).__init__()
        
        self.encoder = encoder

    def loss(self, sample):
        xs = Variable(sample['xs']) # support
        xq = Variable(sample['xq']) # query

        n_class = xs.size(0)
        assert xq.size(0) == n_class
        n_support = xs.size(1)
        n_query = xq.size(1)

        target_inds = torch.arange(0, n_class).view(n_class, 1, 1).expand(n_class, n_query, 1).long()
        target_inds = Variable(target_inds, requires_grad=False)

        if xq.is_cuda:
            target_inds = target_inds.cuda()

        x = torch.cat([xs.view(n_class * n_support, *xs.size()[2:]),
                       xq.view(n_class * n_query, *xq.size()[2:])], 0)

        z = self.encoder.forward(x)
        z_dim = z.size(-1)

        z_proto = z[:n_class*n_support].view(n_class, n_support, z_dim).mean(1)
        zq = z[n_class*n_support:]

        dists = euclidean_dist(zq, z_proto)

        log_p_y = F.log_softmax(-dists, dim=1).view(n_class, n_query, -1)

        loss_val = -log_p_y.gather(2, target_inds).squeeze().view(-1).mean()

        _, y_hat = log_p_y.max(2)
        acc_val = torch.eq(y_hat, target_inds.squeeze()).float().mean()

        return loss_val, {
            'loss': loss_val.item(),
            'acc': acc_val.item()
        }


def load_protonet_conv(**kwargs):
    x_dim = kwargs['x_dim']
    hid_dim = kwargs['hid_dim']
    z_dim = kwargs['z_dim']

    def conv_block(in_channels, out_channels):
        return nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, padding=1),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
            nn.MaxPool2d(2)
        )

    encoder = nn.Sequential(
        conv_block(x_dim[0], hid_dim),
        conv_block(hid_dim, hid_dim),
        conv_block(hid_dim, hid_dim),
        conv_block(hid_dim, z_dim),
        Flatten()
    )

    return Protonet(encoder)

# ---------------- protonets/data/base.py (EpisodicBatchSampler) ----------------
class EpisodicBatchSampler(object):
    def __init__(self, n_classes, n_way, n_episodes):
        self.n_classes = n_classes
        self.n_way = n_way
        self.n_episodes = n_episodes

    def __len__(self):
        return self.n_episodes

    def __iter__(self):
        for i in range(self.n_episodes):
            yield torch.randperm(self.n_classes)[:self.n_way]

# ---------------- protonets/engine.py ----------------
class Engine(object):
    def __init__(self):
        hook_names = ['on_start', 'on_start_epoch', 'on_sample', 'on_forward',
                      'on_backward', 'on_end_epoch', 'on_update', 'on_end']

        self.hooks = { }
        for hook_name in hook_names:
            self.hooks[hook_name] = lambda state: None

    def train(self, **kwargs):
        state = {
            'model': kwargs['model'],
            'loader': kwargs['loader'],
            'optim_method': kwargs['optim_method'],
            'optim_config': kwargs['optim_config'],
            'max_epoch': kwargs['max_epoch'],
            'epoch': 0, # epochs done so far
            't': 0, # samples seen so far
            'batch': 0, # samples seen in current epoch
            'stop': False
        }

        state['optimizer'] = state['optim_method'](state['model'].parameters(), **state['optim_config'])

        self.hooks['on_start'](state)
        while state['epoch'] < state['max_epoch'] and not state['stop']:
            state['model'].train()

            self.hooks['on_start_epoch'](state)

            state['epoch_size'] = len(state['loader'])

            for sample in tqdm(state["loader"], desc="Epoch {:d} train".format(state["epoch"] + 1), disable=True):
                state['sample'] = sample
                self.hooks['on_sample'](state)

                state['optimizer'].zero_grad()
                loss, state['output'] = state['model'].loss(state['sample'])
                self.hooks['on_forward'](state)

                loss.backward()
                self.hooks['on_backward'](state)

                state['optimizer'].step()

                state['t'] += 1
                state['batch'] += 1
                self.hooks['on_update'](state)

            state['epoch'] += 1
            state['batch'] = 0
            self.hooks['on_end_epoch'](state)

        self.hooks['on_end'](state)


# ---------------- protonets/data/omniglot.py (synthetic classes instead of image files) ----------------
def extract_episode(n_support, n_query, d):
    # data: N x C x H x W
    n_examples = d['data'].size(0)

    if n_query == -1:
        n_query = n_examples - n_support

    example_inds = torch.randperm(n_examples)[:(n_support+n_query)]
    support_inds = example_inds[:n_support]
    query_inds = example_inds[n_support:]

    xs = d['data'][support_inds]
    xq = d['data'][query_inds]

    return {
        'class': d['class'],
        'xs': xs,
        'xq': xq
    }


def _synthetic_classes(n, rng):
    classes = []
    for c in range(n):
        proto = np.zeros((28, 28), dtype=np.float32)
        for _ in range(3):
            x0, y0, x1, y1 = rng.randint(4, 24, size=4)
            for t in np.linspace(0, 1, 40):
                x, y = int(round(x0 + t * (x1 - x0))), int(round(y0 + t * (y1 - y0)))
                proto[max(y - 1, 0):y + 1, max(x - 1, 0):x + 1] = 1.0
        imgs = []
        for _ in range(20):
            dx, dy = rng.randint(-2, 3, size=2)
            im = np.roll(np.roll(proto, dx, axis=1), dy, axis=0).copy()
            flip = rng.rand(28, 28) < 0.25
            im[flip] = 1.0 - im[flip]
            imgs.append(im)
        classes.append({'class': 'char%03d' % c, 'data': torch.from_numpy(np.stack(imgs)).unsqueeze(1)})
    return classes


class TransformDataset(torch.utils.data.Dataset):
    def __init__(self, items, transform):
        self.items, self.transform = items, transform

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.transform(self.items[i])


def load_data(opt, splits):
    rng = np.random.RandomState(0)
    all_classes = _synthetic_classes(300, rng)
    class_lists = {'train': all_classes[:240], 'val': all_classes[240:]}
    ret = {}
    for split in splits:
        if split in ['val', 'test'] and opt['data.test_way'] != 0:
            n_way = opt['data.test_way']
        else:
            n_way = opt['data.way']
        if split in ['val', 'test'] and opt['data.test_shot'] != 0:
            n_support = opt['data.test_shot']
        else:
            n_support = opt['data.shot']
        if split in ['val', 'test'] and opt['data.test_query'] != 0:
            n_query = opt['data.test_query']
        else:
            n_query = opt['data.query']
        if split in ['val', 'test']:
            n_episodes = opt['data.test_episodes']
        else:
            n_episodes = opt['data.train_episodes']
        ds = TransformDataset(class_lists[split], partial(extract_episode, n_support, n_query))
        sampler = EpisodicBatchSampler(len(ds), n_way, n_episodes)
        # use num_workers=0, otherwise may receive duplicate episodes
        ret[split] = torch.utils.data.DataLoader(ds, batch_sampler=sampler, num_workers=0)
    return ret


# ---------------- protonets/utils/model.py + log.py ----------------
class AverageValueMeter(object):
    def __init__(self):
        self.reset()

    def add(self, value):
        self.sum += value
        self.n += 1

    def value(self):
        return (self.sum / max(self.n, 1), 0.0)

    def reset(self):
        self.sum, self.n = 0.0, 0


def evaluate(model, data_loader, meters, desc=None):
    model.eval()

    for field,meter in meters.items():
        meter.reset()

    if desc is not None:
        data_loader = tqdm(data_loader, desc=desc, disable=True)

    for sample in data_loader:
        _, output = model.loss(sample)
        for field, meter in meters.items():
            meter.add(output[field])

    return meters


def extract_meter_values(meters):
    ret = { }
    for split in meters.keys():
        ret[split] = { }
        for field,meter in meters[split].items():
            ret[split][field] = meter.value()[0]
    return ret


def render_meter_values(meter_values):
    field_info = []
    for split in meter_values.keys():
        for field,val in meter_values[split].items():
            field_info.append("{:s} {:s} = {:0.6f}".format(split, field, val))
    return ', '.join(field_info)


# ---------------- scripts/train/few_shot/train.py ----------------
def main(opt):
    if not os.path.isdir(opt['log.exp_dir']):
        os.makedirs(opt['log.exp_dir'])

    # save opts
    with open(os.path.join(opt['log.exp_dir'], 'opt.json'), 'w') as f:
        json.dump(opt, f)
        f.write('\n')

    trace_file = os.path.join(opt['log.exp_dir'], 'trace.txt')

    # Postprocess arguments
    opt['model.x_dim'] = list(map(int, opt['model.x_dim'].split(',')))
    opt['log.fields'] = opt['log.fields'].split(',')

    torch.manual_seed(1234)

    data = load_data(opt, ['train', 'val'])
    train_loader = data['train']
    val_loader = data['val']

    model = load_protonet_conv(x_dim=opt['model.x_dim'], hid_dim=opt['model.hid_dim'], z_dim=opt['model.z_dim'])

    engine = Engine()

    meters = { 'train': { field: AverageValueMeter() for field in opt['log.fields'] } }

    if val_loader is not None:
        meters['val'] = { field: AverageValueMeter() for field in opt['log.fields'] }

    def on_start(state):
        if os.path.isfile(trace_file):
            os.remove(trace_file)
        state['scheduler'] = lr_scheduler.StepLR(state['optimizer'], opt['train.decay_every'], gamma=0.5)
    engine.hooks['on_start'] = on_start

    def on_start_epoch(state):
        for split, split_meters in meters.items():
            for field, meter in split_meters.items():
                meter.reset()
        state['scheduler'].step()
    engine.hooks['on_start_epoch'] = on_start_epoch

    def on_update(state):
        for field, meter in meters['train'].items():
            meter.add(state['output'][field])
    engine.hooks['on_update'] = on_update

    def on_end_epoch(hook_state, state):
        if val_loader is not None:
            if 'best_loss' not in hook_state:
                hook_state['best_loss'] = np.inf
            if 'wait' not in hook_state:
                hook_state['wait'] = 0

        if val_loader is not None:
            evaluate(state['model'],
                     val_loader,
                     meters['val'],
                     desc="Epoch {:d} valid".format(state['epoch']))

        meter_vals = extract_meter_values(meters)
        print("Epoch {:02d}: {:s}".format(state['epoch'], render_meter_values(meter_vals)))
        meter_vals['epoch'] = state['epoch']
        with open(trace_file, 'a') as f:
            json.dump(meter_vals, f)
            f.write('\n')

        if val_loader is not None:
            if meter_vals['val']['loss'] < hook_state['best_loss']:
                hook_state['best_loss'] = meter_vals['val']['loss']
                print("==> best model (loss = {:0.6f}), saving model...".format(hook_state['best_loss']))

                state['model'].cpu()
                torch.save(state['model'], os.path.join(opt['log.exp_dir'], 'best_model.pt'))
                if opt['data.cuda']:
                    state['model'].cuda()

                hook_state['wait'] = 0
            else:
                hook_state['wait'] += 1

                if hook_state['wait'] > opt['train.patience']:
                    print("==> patience {:d} exceeded".format(opt['train.patience']))
                    state['stop'] = True

    engine.hooks['on_end_epoch'] = partial(on_end_epoch, { })

    if val_loader is not None:
        evaluate(model, val_loader, meters['val'])
        print("Before training: val acc = {:0.6f}".format(extract_meter_values({'val': meters['val']})['val']['acc']))

    engine.train(
        model = model,
        loader = train_loader,
        optim_method = getattr(optim, opt['train.optim_method']),
        optim_config = { 'lr': opt['train.learning_rate'],
                         'weight_decay': opt['train.weight_decay'] },
        max_epoch = opt['train.epochs']
    )


if __name__ == '__main__':
    main({'data.way': 5, 'data.shot': 5, 'data.query': 5, 'data.test_way': 5, 'data.test_shot': 0,
          'data.test_query': 15, 'data.train_episodes': 20, 'data.test_episodes': 8, 'data.trainval': False,
          'data.sequential': False, 'data.cuda': False, 'model.model_name': 'protonet_conv',
          'model.x_dim': '1,28,28', 'model.hid_dim': 64, 'model.z_dim': 64, 'train.epochs': 3,
          'train.optim_method': 'Adam', 'train.learning_rate': 0.001, 'train.decay_every': 20,
          'train.weight_decay': 0.0, 'train.patience': 200, 'log.fields': 'loss,acc',
          'log.exp_dir': tempfile.mkdtemp()})
