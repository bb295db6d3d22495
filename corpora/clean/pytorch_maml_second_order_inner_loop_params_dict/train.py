# Source: tristandeleu/pytorch-maml, maml/metalearners/maml.py + maml/model.py + maml/utils.py + train.py,
# commit 44104272a0140b35e2223ba68750e7e715315653
# https://github.com/tristandeleu/pytorch-maml
#
# Second-order MAML: the inner loop builds adapted parameters as an OrderedDict of non-leaf tensors with
# torch.autograd.grad(create_graph=True) (torchmeta's gradient_update_parameters), the outer loss is the sum of
# per-task query losses through those tensors, divided in place (mean_outer_loss.div_), `self.model.zero_grad()`
# is called inside the inner loop between the outer-loss terms, train_iter *yields* the results before
# outer_loss.backward(); the step size is a 0-d tensor; BatchNorm2d(momentum=1., track_running_stats=False) is a
# plain nn module whose affine weights are NOT adapted in the inner loop (only Meta* layers take params) but are
# meta-trained by Adam; accuracies computed under no_grad.
# Adaptation: torchmeta is not installed: MetaModule / MetaSequential / MetaConv2d / MetaLinear /
# gradient_update_parameters are re-implemented minimally with torchmeta's semantics (get_subdict,
# meta_named_parameters, params=None -> own parameters); Omniglot -> synthetic 28x28 characters; tqdm removed;
# hidden_size 64 -> 16; batch_size 25 -> 4 tasks; num_shots 5, num_shots_test 15 -> 5; 50 epochs x 100 batches ->
# 40 batches; step_size 0.1 -> 0.4 (the paper's Omniglot value).
import re
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- minimal torchmeta.modules / torchmeta.utils --------------------------------------------------------------
class MetaModule(nn.Module):
    def meta_named_parameters(self, prefix='', recurse=True):
        gen = self._named_members(
            lambda module: module._parameters.items()
            if isinstance(module, MetaModule) else [],
            prefix=prefix, recurse=recurse)
        for elem in gen:
            yield elem

    def meta_parameters(self, recurse=True):
        for name, param in self.meta_named_parameters(recurse=recurse):
            yield param

    def get_subdict(self, params, key=None):
        if params is None:
            return None
        key_re = re.compile(r'^{0}\.(.+)'.format(re.escape(key)))
        return OrderedDict((key_re.sub(r'\1', k), value) for (k, value)
                           in params.items() if key_re.match(k) is not None)


class MetaSequential(nn.Sequential, MetaModule):
    def forward(self, input, params=None):
        for name, module in self._modules.items():
            if isinstance(module, MetaModule):
                input = module(input, params=self.get_subdict(params, name))
            elif isinstance(module, nn.Module):
                input = module(input)
            else:
                raise TypeError('The module must be either a torch module '
                    '(inheriting from `nn.Module`), or a `MetaModule`. '
                    'Got type: `{0}`'.format(type(module)))
        return input


class MetaConv2d(nn.Conv2d, MetaModule):
    def forward(self, input, params=None):
        if params is None:
            params = OrderedDict(self.named_parameters())
        bias = params.get('bias', None)
        return self._conv_forward(input, params['weight'], bias)


class MetaLinear(nn.Linear, MetaModule):
    def forward(self, input, params=None):
        if params is None:
            params = OrderedDict(self.named_parameters())
        bias = params.get('bias', None)
        return F.linear(input, params['weight'], bias)


def gradient_update_parameters(model, loss, params=None, step_size=0.5, first_order=False):
    if not isinstance(model, MetaModule):
        raise ValueError('The model must be an instance of `torchmeta.modules.'
                         'MetaModule`, got `{0}`'.format(type(model)))

    if params is None:
        params = OrderedDict(model.meta_named_parameters())

    grads = torch.autograd.grad(loss, params.values(), create_graph=not first_order)

    updated_params = OrderedDict()

    if isinstance(step_size, (dict, OrderedDict)):
        for (name, param), grad in zip(params.items(), grads):
            updated_params[name] = param - step_size[name] * grad

    else:
        for (name, param), grad in zip(params.items(), grads):
            updated_params[name] = param - step_size * grad

    return updated_params


# ---- maml/utils.py ----------------------------------------------------------------------------------------------
def compute_accuracy(logits, targets):
    """Compute the accuracy"""
    with torch.no_grad():
        _, predictions = torch.max(logits, dim=1)
        accuracy = torch.mean(predictions.eq(targets).float())
    return accuracy.item()


def tensors_to_device(tensors, device=torch.device('cpu')):
    """Place a collection of tensors in a specific device"""
    if isinstance(tensors, torch.Tensor):
        return tensors.to(device=device)
    elif isinstance(tensors, (list, tuple)):
        return type(tensors)(tensors_to_device(tensor, device=device)
            for tensor in tensors)
    elif isinstance(tensors, (dict, OrderedDict)):
        return type(tensors)([(name, tensors_to_device(tensor, device=device))
            for (name, tensor) in tensors.items()])
    else:
        raise NotImplementedError()


# ---- maml/model.py ---------------------------------------------------------------------------------------------
def conv_block(in_channels, out_channels, **kwargs):
    return MetaSequential(OrderedDict([
        ('conv', MetaConv2d(in_channels, out_channels, **kwargs)),
        ('norm', nn.BatchNorm2d(out_channels, momentum=1.,
            track_running_stats=False)),
        ('relu', nn.ReLU()),
        ('pool', nn.MaxPool2d(2))
    ]))


class MetaConvModel(MetaModule):
    def __init__(self, in_channels, out_features, hidden_size=64, feature_size=64):
        super(MetaConvModel, self).__init__()
        self.in_channels = in_channels
        self.out_features = out_features
        self.hidden_size = hidden_size
        self.feature_size = feature_size

        self.features = MetaSequential(OrderedDict([
            ('layer1', conv_block(in_channels, hidden_size, kernel_size=3,
                                  stride=1, padding=1, bias=True)),
            ('layer2', conv_block(hidden_size, hidden_size, kernel_size=3,
                                  stride=1, padding=1, bias=True)),
            ('layer3', conv_block(hidden_size, hidden_size, kernel_size=3,
                                  stride=1, padding=1, bias=True)),
            ('layer4', conv_block(hidden_size, hidden_size, kernel_size=3,
                                  stride=1, padding=1, bias=True))
        ]))
        self.classifier = MetaLinear(feature_size, out_features, bias=True)

    def forward(self, inputs, params=None):
        features = self.features(inputs, params=self.get_subdict(params, 'features'))
        features = features.view((features.size(0), -1))
        logits = self.classifier(features, params=self.get_subdict(params, 'classifier'))
        return logits


def ModelConvOmniglot(out_features, hidden_size=64):
    return MetaConvModel(1, out_features, hidden_size=hidden_size,
                         feature_size=hidden_size)


# ---- maml/metalearners/maml.py -------------------------------------------------------------------------------------
class ModelAgnosticMetaLearning(object):
    def __init__(self, model, optimizer=None, step_size=0.1, first_order=False,
                 learn_step_size=False, per_param_step_size=False,
                 num_adaptation_steps=1, scheduler=None,
                 loss_function=F.cross_entropy, device=None):
        self.model = model.to(device=device)
        self.optimizer = optimizer
        self.step_size = step_size
        self.first_order = first_order
        self.num_adaptation_steps = num_adaptation_steps
        self.scheduler = scheduler
        self.loss_function = loss_function
        self.device = device

        if per_param_step_size:
            self.step_size = OrderedDict((name, torch.tensor(step_size,
                dtype=param.dtype, device=self.device,
                requires_grad=learn_step_size)) for (name, param)
                in model.meta_named_parameters())
        else:
            self.step_size = torch.tensor(step_size, dtype=torch.float32,
                device=self.device, requires_grad=learn_step_size)

        if (self.optimizer is not None) and learn_step_size:
            self.optimizer.add_param_group({'params': self.step_size.values()
                if per_param_step_size else [self.step_size]})
            if scheduler is not None:
                for group in self.optimizer.param_groups:
                    group.setdefault('initial_lr', group['lr'])
                self.scheduler.base_lrs([group['initial_lr']
                    for group in self.optimizer.param_groups])

    def get_outer_loss(self, batch):
        if 'test' not in batch:
            raise RuntimeError('The batch does not contain any test dataset.')

        _, test_targets = batch['test']
        num_tasks = test_targets.size(0)
        is_classification_task = (not test_targets.dtype.is_floating_point)
        results = {
            'num_tasks': num_tasks,
            'inner_losses': np.zeros((self.num_adaptation_steps,
                num_tasks), dtype=np.float32),
            'outer_losses': np.zeros((num_tasks,), dtype=np.float32),
            'mean_outer_loss': 0.
        }
        if is_classification_task:
            results.update({
                'accuracies_before': np.zeros((num_tasks,), dtype=np.float32),
                'accuracies_after': np.zeros((num_tasks,), dtype=np.float32)
            })

        mean_outer_loss = torch.tensor(0., device=self.device)
        for task_id, (train_inputs, train_targets, test_inputs, test_targets) \
                in enumerate(zip(*batch['train'], *batch['test'])):
            params, adaptation_results = self.adapt(train_inputs, train_targets,
                is_classification_task=is_classification_task,
                num_adaptation_steps=self.num_adaptation_steps,
                step_size=self.step_size, first_order=self.first_order)

            results['inner_losses'][:, task_id] = adaptation_results['inner_losses']
            if is_classification_task:
                results['accuracies_before'][task_id] = adaptation_results['accuracy_before']

            with torch.set_grad_enabled(self.model.training):
                test_logits = self.model(test_inputs, params=params)
                outer_loss = self.loss_function(test_logits, test_targets)
                results['outer_losses'][task_id] = outer_loss.item()
                mean_outer_loss += outer_loss

            if is_classification_task:
                results['accuracies_after'][task_id] = compute_accuracy(
                    test_logits, test_targets)

        mean_outer_loss.div_(num_tasks)
        results['mean_outer_loss'] = mean_outer_loss.item()

        return mean_outer_loss, results

    def adapt(self, inputs, targets, is_classification_task=None,
              num_adaptation_steps=1, step_size=0.1, first_order=False):
        if is_classification_task is None:
            is_classification_task = (not targets.dtype.is_floating_point)
        params = None

        results = {'inner_losses': np.zeros(
            (num_adaptation_steps,), dtype=np.float32)}

        for step in range(num_adaptation_steps):
            logits = self.model(inputs, params=params)
            inner_loss = self.loss_function(logits, targets)
            results['inner_losses'][step] = inner_loss.item()

            if (step == 0) and is_classification_task:
                results['accuracy_before'] = compute_accuracy(logits, targets)

            self.model.zero_grad()
            params = gradient_update_parameters(self.model, inner_loss,
                step_size=step_size, params=params,
                first_order=(not self.model.training) or first_order)

        return params, results

    def train_iter(self, dataloader, max_batches=500):
        if self.optimizer is None:
            raise RuntimeError('Trying to call `train_iter`, while the '
                'optimizer is `None`.')
        num_batches = 0
        self.model.train()
        while num_batches < max_batches:
            for batch in dataloader:
                if num_batches >= max_batches:
                    break

                if self.scheduler is not None:
                    self.scheduler.step(epoch=num_batches)

                self.optimizer.zero_grad()

                batch = tensors_to_device(batch, device=self.device)
                outer_loss, results = self.get_outer_loss(batch)
                yield results

                outer_loss.backward()
                self.optimizer.step()

                num_batches += 1


MAML = ModelAgnosticMetaLearning


class SyntheticOmniglot(torch.utils.data.Dataset):
    """Stand-in for OmniglotDataset: n_classes 'characters' (random smoothed stroke masks), n_per_class
    jittered 1x28x28 drawings each; exposes .y like the original."""

    def __init__(self, n_classes, n_per_class=20, seed=0, label_offset=0):
        g = torch.Generator().manual_seed(seed)
        protos = (torch.rand(n_classes, 1, 32, 32, generator=g) < 0.12).float()
        protos = torch.nn.functional.max_pool2d(protos, 3, 1, 1)
        xs, ys = [], []
        for c in range(n_classes):
            for _ in range(n_per_class):
                i, j = torch.randint(0, 5, (2,), generator=g).tolist()
                img = protos[c, :, i:i + 28, j:j + 28]
                img = (img + 0.3 * torch.randn(img.shape, generator=g)).clamp(0, 1)
                xs.append(img)
                ys.append(c + label_offset)
        self.x = torch.stack(xs)
        self.y = ys

    def __getitem__(self, idx):
        return self.x[idx], self.y[idx]

    def __len__(self):
        return len(self.y)


class TaskBatches:
    """Stand-in for torchmeta's BatchMetaDataLoader over a ClassSplitter(Omniglot): yields
    {'train': (inputs [B, N*K, 1, 28, 28], targets [B, N*K]), 'test': (...)} with per-task labels 0..N-1."""

    def __init__(self, dataset, num_ways, num_shots, num_shots_test, batch_size, seed=0):
        self.ds, self.n, self.k, self.q, self.b = dataset, num_ways, num_shots, num_shots_test, batch_size
        self.by_class = {}
        for i, y in enumerate(dataset.y):
            self.by_class.setdefault(y, []).append(i)
        self.classes = sorted(self.by_class)
        self.rng = np.random.RandomState(seed)

    def __iter__(self):
        while True:
            tr_x, tr_y, te_x, te_y = [], [], [], []
            for _ in range(self.b):
                cls = self.rng.choice(self.classes, self.n, replace=False)
                a, b, c, d = [], [], [], []
                for label, cl in enumerate(cls):
                    idx = self.rng.choice(self.by_class[cl], self.k + self.q, replace=False)
                    a.append(self.ds.x[idx[:self.k]]); b += [label] * self.k
                    c.append(self.ds.x[idx[self.k:]]); d += [label] * self.q
                tr_x.append(torch.cat(a)); tr_y.append(torch.tensor(b))
                te_x.append(torch.cat(c)); te_y.append(torch.tensor(d))
            yield {'train': (torch.stack(tr_x), torch.stack(tr_y)), 'test': (torch.stack(te_x), torch.stack(te_y))}


def main():
    torch.manual_seed(0)
    num_ways, num_shots, num_shots_test, batch_size, hidden_size = 5, 5, 5, 4, 16
    dataset = SyntheticOmniglot(100, n_per_class=20, seed=0)
    meta_train_dataloader = TaskBatches(dataset, num_ways, num_shots, num_shots_test, batch_size)

    model = ModelConvOmniglot(num_ways, hidden_size=hidden_size)
    meta_optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    metalearner = ModelAgnosticMetaLearning(model,
                                            meta_optimizer,
                                            first_order=False,
                                            num_adaptation_steps=1,
                                            step_size=0.4,
                                            loss_function=F.cross_entropy,
                                            device=torch.device('cpu'))
    history = []
    for i, results in enumerate(metalearner.train_iter(meta_train_dataloader, max_batches=40)):
        history.append((results['mean_outer_loss'], float(np.mean(results['accuracies_after']))))
        if i % 5 == 0:
            print(f"batch {i} outer loss {results['mean_outer_loss']:.4f} "
                  f"acc before {np.mean(results['accuracies_before']):.3f} after {np.mean(results['accuracies_after']):.3f}")
    first = np.mean([h[0] for h in history[:5]]); last = np.mean([h[0] for h in history[-5:]])
    a0 = np.mean([h[1] for h in history[:5]]); a1 = np.mean([h[1] for h in history[-5:]])
    print(f"[summary] outer_loss(mean of 5) first={first:.4f} last={last:.4f} decreased={last < first}")
    print(f"[summary] query_acc_after_adaptation first={a0:.3f} last={a1:.3f} increased={a1 > a0}")


if __name__ == '__main__':
    main()
