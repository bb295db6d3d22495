# Source: tristandeleu/pytorch-meta, examples/maml/train.py, examples/maml/model.py, examples/maml/utils.py, torchmeta/utils/gradient_based.py, torchmeta/modules/{module,container,conv,linear,batchnorm}.py, commit d55d89ebd47f340180267106bde3e4b723f23762
# https://github.com/tristandeleu/pytorch-meta/blob/master/examples/maml/train.py
#
# Second-order MAML with Torchmeta: the inner step is torch.autograd.grad(inner_loss, params, create_graph=True) and
# the adapted weights are a dict of non-leaf tensors (param - step_size * grad) passed to forward(params=...); the
# query loss of each task is added to a tensor created with torch.tensor(0.) and divided in place (outer_loss.div_)
# before one backward through the inner gradient step; model.zero_grad() is called inside the task loop right after
# the inner forward (autograd.grad does not read .grad); BatchNorm uses momentum=1 and track_running_stats=False, so
# it normalises with batch statistics in train and eval alike and has no running buffers; inner step size 0.4 (SGD
# on the support set, no optimizer) and Adam 1e-3 for the meta-parameters; the loop breaks only after batch index
# num_batches, i.e. num_batches + 1 meta-updates.
# Adaptation: torchmeta is not installed, so MetaModule (meta_named_parameters, get_subdict), MetaSequential,
# MetaConv2d, MetaLinear, MetaBatchNorm2d and gradient_update_parameters are copied from the package; Omniglot via
# BatchMetaDataLoader replaced by a task sampler over 100 synthetic 1x16x16 "characters" (binary strokes + shift +
# noise), 5-way 5-shot with 15 query shots as in the script; hidden_size 64 -> 16, batch of tasks 16 -> 4,
# num_batches 100 -> 60; tqdm, logging and saving left out; 5-way accuracy after one inner step on 40 tasks from 20
# held-out characters printed before and after meta-training; cpu; seeds fixed.
import re
import warnings
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm


# ---------------------------------------------------------------- torchmeta/modules
class MetaModule(nn.Module):
    """
    Base class for PyTorch meta-learning modules. These modules accept an
    additional argument `params` in their `forward` method.

    Notes
    -----
    Objects inherited from `MetaModule` are fully compatible with PyTorch
    modules from `torch.nn.Module`. The argument `params` is a dictionary of
    tensors, with full support of the computation graph (for differentiation).
    """
    def __init__(self):
        super(MetaModule, self).__init__()
        self._children_modules_parameters_cache = dict()

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

        all_names = tuple(params.keys())
        if (key, all_names) not in self._children_modules_parameters_cache:
            if key is None:
                self._children_modules_parameters_cache[(key, all_names)] = all_names

            else:
                key_escape = re.escape(key)
                key_re = re.compile(r'^{0}\.(.+)'.format(key_escape))

                self._children_modules_parameters_cache[(key, all_names)] = [
                    key_re.sub(r'\1', k) for k in all_names if key_re.match(k) is not None]

        names = self._children_modules_parameters_cache[(key, all_names)]
        if not names:
            warnings.warn('Module `{0}` has no parameter corresponding to the '
                          'submodule named `{1}` in the dictionary `params` '
                          'provided as an argument to `forward()`. Using the '
                          'default parameters for this submodule. The list of '
                          'the parameters in `params`: [{2}].'.format(
                          self.__class__.__name__, key, ', '.join(all_names)),
                          stacklevel=2)
            return None

        return OrderedDict([(name, params[f'{key}.{name}']) for name in names])


class MetaSequential(nn.Sequential, MetaModule):
    __doc__ = nn.Sequential.__doc__

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
    __doc__ = nn.Conv2d.__doc__

    def forward(self, input, params=None):
        if params is None:
            params = OrderedDict(self.named_parameters())
        bias = params.get('bias', None)
        return self._conv_forward(input, params['weight'], bias)


class MetaLinear(nn.Linear, MetaModule):
    __doc__ = nn.Linear.__doc__

    def forward(self, input, params=None):
        if params is None:
            params = OrderedDict(self.named_parameters())
        bias = params.get('bias', None)
        return F.linear(input, params['weight'], bias)

class _MetaBatchNorm(_BatchNorm, MetaModule):
    def forward(self, input, params=None):
        self._check_input_dim(input)
        if params is None:
            params = OrderedDict(self.named_parameters())

        # exponential_average_factor is self.momentum set to
        # (when it is available) only so that if gets updated
        # in ONNX graph when this node is exported to ONNX.
        if self.momentum is None:
            exponential_average_factor = 0.0
        else:
            exponential_average_factor = self.momentum

        if self.training and self.track_running_stats:
            if self.num_batches_tracked is not None:
                self.num_batches_tracked += 1
                if self.momentum is None:  # use cumulative moving average
                    exponential_average_factor = 1.0 / float(self.num_batches_tracked)
                else:  # use exponential moving average
                    exponential_average_factor = self.momentum

        weight = params.get('weight', None)
        bias = params.get('bias', None)

        return F.batch_norm(
            input, self.running_mean, self.running_var, weight, bias,
            self.training or not self.track_running_stats,
            exponential_average_factor, self.eps)

class MetaBatchNorm2d(_MetaBatchNorm):
    __doc__ = nn.BatchNorm2d.__doc__

    def _check_input_dim(self, input):
        if input.dim() != 4:
            raise ValueError('expected 4D input (got {}D input)'
                             .format(input.dim()))

# ---------------------------------------------------------------- torchmeta/utils/gradient_based.py
def gradient_update_parameters(model,
                               loss,
                               params=None,
                               step_size=0.5,
                               first_order=False):
    if not isinstance(model, MetaModule):
        raise ValueError('The model must be an instance of `torchmeta.modules.'
                         'MetaModule`, got `{0}`'.format(type(model)))

    if params is None:
        params = OrderedDict(model.meta_named_parameters())

    grads = torch.autograd.grad(loss,
                                params.values(),
                                create_graph=not first_order)

    updated_params = OrderedDict()

    if isinstance(step_size, (dict, OrderedDict)):
        for (name, param), grad in zip(params.items(), grads):
            updated_params[name] = param - step_size[name] * grad

    else:
        for (name, param), grad in zip(params.items(), grads):
            updated_params[name] = param - step_size * grad

    return updated_params


# ---------------------------------------------------------------- examples/maml/model.py
def conv3x3(in_channels, out_channels, **kwargs):
    return MetaSequential(
        MetaConv2d(in_channels, out_channels, kernel_size=3, padding=1, **kwargs),
        MetaBatchNorm2d(out_channels, momentum=1., track_running_stats=False),
        nn.ReLU(),
        nn.MaxPool2d(2)
    )

class ConvolutionalNeuralNetwork(MetaModule):
    def __init__(self, in_channels, out_features, hidden_size=64):
        super(ConvolutionalNeuralNetwork, self).__init__()
        self.in_channels = in_channels
        self.out_features = out_features
        self.hidden_size = hidden_size

        self.features = MetaSequential(
            conv3x3(in_channels, hidden_size),
            conv3x3(hidden_size, hidden_size),
            conv3x3(hidden_size, hidden_size),
            conv3x3(hidden_size, hidden_size)
        )

        self.classifier = MetaLinear(hidden_size, out_features)

    def forward(self, inputs, params=None):
        features = self.features(inputs, params=self.get_subdict(params, 'features'))
        features = features.view((features.size(0), -1))
        logits = self.classifier(features, params=self.get_subdict(params, 'classifier'))
        return logits


# ---------------------------------------------------------------- examples/maml/utils.py
def get_accuracy(logits, targets):
    _, predictions = torch.max(logits, dim=-1)
    return torch.mean(predictions.eq(targets).float())


# ---------------------------------------------------------------- stand-in for omniglot(...) + BatchMetaDataLoader
class SyntheticCharacters:
    """Each character is a fixed set of strokes on a 16x16 grid; samples are shifted by up to 1 pixel and noised."""

    def __init__(self, num_classes, seed):
        rng = np.random.RandomState(seed)
        self.protos = np.zeros((num_classes, 18, 18), dtype=np.float32)
        for c in range(num_classes):
            for _ in range(4):
                r, q = rng.randint(1, 17, 2)
                if rng.rand() < 0.5:
                    self.protos[c, r, max(1, q - 4):q + 4] = 1
                else:
                    self.protos[c, max(1, r - 4):r + 4, q] = 1
        self.rng = rng

    def sample(self, cls, n):
        out = np.empty((n, 1, 16, 16), dtype=np.float32)
        for i in range(n):
            dx, dy = self.rng.randint(0, 3, 2)
            out[i, 0] = self.protos[cls, dy:dy + 16, dx:dx + 16] + 0.3 * self.rng.randn(16, 16)
        return out

    def batch(self, batch_size, ways, shots, test_shots):
        tr_x, tr_y, te_x, te_y = [], [], [], []
        for _ in range(batch_size):
            classes = self.rng.choice(len(self.protos), ways, replace=False)
            xs = [self.sample(c, shots + test_shots) for c in classes]
            tr_x.append(np.concatenate([x[:shots] for x in xs]))
            te_x.append(np.concatenate([x[shots:] for x in xs]))
            tr_y.append(np.repeat(np.arange(ways), shots))
            te_y.append(np.repeat(np.arange(ways), test_shots))
            perm = self.rng.permutation(ways * shots)
            tr_x[-1], tr_y[-1] = tr_x[-1][perm], tr_y[-1][perm]
        t = torch.from_numpy
        return {'train': (t(np.stack(tr_x)), t(np.stack(tr_y)).long()),
                'test': (t(np.stack(te_x)), t(np.stack(te_y)).long())}


def meta_test_accuracy(model, tasks, args):
    accs = []
    for batch in tasks:
        for x, y, qx, qy in zip(*batch['train'], *batch['test']):
            inner_loss = F.cross_entropy(model(x), y)
            params = gradient_update_parameters(model, inner_loss, step_size=args.step_size, first_order=True)
            with torch.no_grad():
                accs.append(get_accuracy(model(qx, params=params), qy).item())
    return float(np.mean(accs))


# ---------------------------------------------------------------- examples/maml/train.py
def train(args):
    dataset = SyntheticCharacters(100, seed=1)
    heldout = SyntheticCharacters(20, seed=2)
    heldout_tasks = [heldout.batch(8, args.num_ways, args.num_shots, 15) for _ in range(5)]

    model = ConvolutionalNeuralNetwork(1,
                                       args.num_ways,
                                       hidden_size=args.hidden_size)
    model.to(device=args.device)
    model.train()
    meta_optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    before = meta_test_accuracy(model, heldout_tasks, args)
    print('held-out 5-way accuracy after one inner step, before meta-training: {0:.4f}'.format(before))

    # Training loop
    for batch_idx in range(10 ** 9):
        batch = dataset.batch(args.batch_size, args.num_ways, args.num_shots, 15)
        model.zero_grad()

        train_inputs, train_targets = batch['train']
        train_inputs = train_inputs.to(device=args.device)
        train_targets = train_targets.to(device=args.device)

        test_inputs, test_targets = batch['test']
        test_inputs = test_inputs.to(device=args.device)
        test_targets = test_targets.to(device=args.device)

        outer_loss = torch.tensor(0., device=args.device)
        accuracy = torch.tensor(0., device=args.device)
        for task_idx, (train_input, train_target, test_input,
                test_target) in enumerate(zip(train_inputs, train_targets,
                test_inputs, test_targets)):
            train_logit = model(train_input)
            inner_loss = F.cross_entropy(train_logit, train_target)

            model.zero_grad()
            params = gradient_update_parameters(model,
                                                inner_loss,
                                                step_size=args.step_size,
                                                first_order=args.first_order)

            test_logit = model(test_input, params=params)
            outer_loss += F.cross_entropy(test_logit, test_target)

            with torch.no_grad():
                accuracy += get_accuracy(test_logit, test_target)

        outer_loss.div_(args.batch_size)
        accuracy.div_(args.batch_size)

        outer_loss.backward()
        meta_optimizer.step()

        if batch_idx % 10 == 0:
            print('batch {0}: outer loss {1:.4f} accuracy {2:.4f}'.format(batch_idx, outer_loss.item(), accuracy.item()))
        if batch_idx >= args.num_batches:
            break

    after = meta_test_accuracy(model, heldout_tasks, args)
    print('held-out 5-way accuracy after one inner step, after meta-training: {0:.4f}'.format(after))
    print('[summary] held-out query accuracy first={0:.4f} last={1:.4f} increased={2}'.format(before, after, after > before))


if __name__ == '__main__':
    import argparse

    parser = argparse.ArgumentParser('Model-Agnostic Meta-Learning (MAML)')
    parser.add_argument('--num-shots', type=int, default=5)
    parser.add_argument('--num-ways', type=int, default=5)
    parser.add_argument('--first-order', action='store_true')
    parser.add_argument('--step-size', type=float, default=0.4)
    parser.add_argument('--hidden-size', type=int, default=16)
    parser.add_argument('--batch-size', type=int, default=4)
    parser.add_argument('--num-batches', type=int, default=60)
    args = parser.parse_args()
    args.device = torch.device('cpu')

    torch.manual_seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    train(args)
