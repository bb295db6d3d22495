# Source: optimass/Maximally_Interfered_Retrieval, er_main.py, data.py (CLDataLoader), mir.py (retrieve_replay_update), buffer.py, utils.py, commit c4522972a515b639a3687e6ecb01922c74216ca9
# Report: https://github.com/optimass/Maximally_Interfered_Retrieval/issues/9
import argparse
from collections import OrderedDict as OD

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CLDataLoader(object):
    def __init__(self, datasets_per_task, args, train=True):
        bs = args.batch_size if train else 64
        self.datasets = datasets_per_task
        self.loaders = [
            torch.utils.data.DataLoader(x, batch_size=bs, shuffle=True, drop_last=train, num_workers=0)
            for x in self.datasets]

    def __getitem__(self, idx):
        return self.loaders[idx]

    def __len__(self):
        return len(self.loaders)


def get_split_gaussians(args):
    # 5 tasks of 2 classes each, 20-d class clusters; 130 test samples per task
    args.n_tasks, args.n_classes, args.input_size, args.multiple_heads = 5, 10, (20,), False
    g = torch.Generator().manual_seed(0)
    means = 0.45 * torch.randn(10, 20, generator=g)

    def split(n_per_class):
        out = []
        for t in range(args.n_tasks):
            ys = torch.arange(2 * t, 2 * t + 2).repeat_interleave(n_per_class)
            xs = means[ys] + torch.randn(len(ys), 20, generator=g)
            out.append(torch.utils.data.TensorDataset(xs, ys))
        return out
    return split(200), split(65), split(65)


class Buffer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.bx = torch.zeros(args.mem_size, *args.input_size)
        self.by = torch.zeros(args.mem_size, dtype=torch.long)
        self.current_index = 0
        self.n_seen_so_far = 0

    def add_reservoir(self, x, y, logits, t):
        for i in range(x.size(0)):
            if self.current_index < self.bx.size(0):
                self.bx[self.current_index], self.by[self.current_index] = x[i], y[i]
                self.current_index += 1
            else:
                j = np.random.randint(0, self.n_seen_so_far + i + 1)
                if j < self.bx.size(0):
                    self.bx[j], self.by[j] = x[i], y[i]
        self.n_seen_so_far += x.size(0)

    def sample(self, amt):
        idx = torch.from_numpy(np.random.choice(self.current_index, min(amt, self.current_index), replace=False))
        return self.bx[idx], self.by[idx]


class MLP(nn.Module):
    def __init__(self, args, num_classes=10, nf=100):
        super(MLP, self).__init__()
        self.input_size = np.prod(args.input_size)
        self.hidden = nn.Sequential(nn.Linear(self.input_size, nf), nn.ReLU(True), nn.Linear(nf, nf), nn.ReLU(True))
        self.linear = nn.Linear(nf, num_classes)

    def return_hidden(self, x):
        x = x.view(-1, self.input_size)
        return self.hidden(x)

    def forward(self, x):
        out = self.return_hidden(x)
        return self.linear(out)


def retrieve_replay_update(args, model, opt, input_x, input_y, buffer, task, loader=None, rehearse=True):
    hid = model.return_hidden(input_x)
    logits = model.linear(hid)
    loss_a = F.cross_entropy(logits, input_y, reduction='none')
    loss = (loss_a).sum() / loss_a.size(0)
    opt.zero_grad()
    loss.backward()
    if not rehearse:
        opt.step()
        return model
    mem_x, mem_y = buffer.sample(args.buffer_batch_size)
    logits_buffer = model(mem_x)
    F.cross_entropy(logits_buffer, mem_y).backward()
    opt.step()
    return model


def get_logger(names, n_runs=1, n_tasks=None):
    log = OD()
    for i in range(n_runs):
        log[i] = {}
        for mode in ['train', 'valid', 'test']:
            log[i][mode] = {}
            for name in names:
                log[i][mode][name] = np.zeros([n_tasks, n_tasks])
            log[i][mode]['final_acc'] = 0.
            log[i][mode]['final_forget'] = 0.
    return log


def get_temp_logger(exp, names):
    log = OD()
    for name in names:
        log[name] = []
    return log


def logging_per_task(wandb, log, run, mode, metric, task=0, task_t=0, value=0):
    if 'final' in metric:
        log[run][mode][metric] = value
    else:
        log[run][mode][metric][task_t, task] = value


def main():
    args = argparse.Namespace(batch_size=10, buffer_batch_size=10, mem_size=20, n_runs=1, lr=0.1,
                              disc_iters=1, method='rand_replay')
    data = get_split_gaussians(args)
    train_loader, val_loader, test_loader = [CLDataLoader(elem, args, train=t)
                                             for elem, t in zip(data, [True, False, False])]
    wandb = None
    LOG = get_logger(['cls_loss', 'acc'], n_runs=args.n_runs, n_tasks=args.n_tasks)
    args.mem_size = args.mem_size * args.n_classes

    for run in range(args.n_runs):
        np.random.seed(run)
        torch.manual_seed(run)
        model = MLP(args)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        buffer = Buffer(args)

        for task, tr_loader in enumerate(train_loader):
            model = model.train()
            for i, (data, target) in enumerate(tr_loader):
                for it in range(args.disc_iters):
                    model = retrieve_replay_update(args, model, opt, data, target, buffer, task, tr_loader,
                                                   rehearse=task > 0)
                buffer.add_reservoir(data, target, None, task)

            # ------------------------ eval ------------------------ #
            model = model.eval()
            eval_loaders = [('valid', val_loader), ('test', test_loader)]
            for mode, loader_ in eval_loaders:
                for task_t, te_loader in enumerate(loader_):
                    if task_t > task:
                        break
                    LOG_temp = get_temp_logger(None, ['cls_loss', 'acc'])
                    for i, (data, target) in enumerate(te_loader):
                        logits = model(data)
                        loss = F.cross_entropy(logits, target)
                        pred = logits.argmax(dim=1, keepdim=True)
                        LOG_temp['acc'] += [pred.eq(target.view_as(pred)).sum().item() / pred.size(0)]
                        LOG_temp['cls_loss'] += [loss.item()]
                    logging_per_task(wandb, LOG, run, mode, 'acc', task, task_t,
                                     np.round(np.mean(LOG_temp['acc']), 2))
                    logging_per_task(wandb, LOG, run, mode, 'cls_loss', task, task_t,
                                     np.round(np.mean(LOG_temp['cls_loss']), 2))

        print('Run #{} Final Results'.format(run))
        for mode in ['valid', 'test']:
            final_accs = LOG[run][mode]['acc'][:, task]
            logging_per_task(wandb, LOG, run, mode, 'final_acc', task, value=np.round(np.mean(final_accs), 2))
            best_acc = np.max(LOG[run][mode]['acc'], 1)
            final_forgets = best_acc - LOG[run][mode]['acc'][:, task]
            logging_per_task(wandb, LOG, run, mode, 'final_forget', task,
                             value=np.round(np.mean(final_forgets[:-1]), 2))
            print('{}: final accuracy: {}'.format(mode, final_accs))
            print('average: {}'.format(LOG[run][mode]['final_acc']))

        with torch.no_grad():
            for task_t, te_loader in enumerate(test_loader):
                xs, ys = te_loader.dataset.tensors
                print(f'test task {task_t}: {len(ys)} samples in batches of {te_loader.batch_size}, '
                      f'{(model(xs).argmax(1) == ys).sum().item()} correct')


if __name__ == '__main__':
    main()
