# Source: oscarknagg/few-shot, few_shot/maml.py + few_shot/core.py + few_shot/models.py + few_shot/train.py +
# few_shot/callbacks.py + few_shot/metrics.py + experiments/maml.py, commit 672de83a853cc2d5e9fe304dc100b4a735c10c15
# https://github.com/oscarknagg/few-shot
#
# First-order MAML as written in this repo: fast weights are an OrderedDict built from named_parameters and
# updated with torch.autograd.grad (no optimizer), the query loss is backpropagated per task with
# retain_graph=True, the mean task gradients are then installed on the meta-parameters by register_hook hooks
# that REPLACE whatever gradient arrives, during a dummy forward/backward on an all-zeros batch; the hooks are
# removed after optimiser.step(). The model runs in float64, BatchNorm is functional with training=True (no
# running stats), an episodic NShotTaskSampler (pandas) is the DataLoader's batch_sampler, and evaluation calls
# the same function with train=False (3 inner steps, gradients are still computed and left on .grad).
# Adaptation: Omniglot is replaced by 40 background + 20 evaluation synthetic 28x28 "character" classes (10
# images each, random strokes + shift + noise); conv width 64 -> 16 (final layer 64 -> 16); q 1 -> 5,
# meta_batch_size 32 -> 4, epochs 50 -> 5, epoch_len 100 -> 10, eval_batches 20 -> 2, meta_lr 1e-3 -> 3e-3;
# num_workers 8 -> 0; ModelCheckpoint/ReduceLROnPlateau/CSVLogger/tqdm progress bar are not used; cuda -> cpu.
from collections import OrderedDict
from typing import Callable, Union

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import Module
from torch.optim import Optimizer
from torch.utils.data import DataLoader, Dataset, Sampler

device = torch.device('cpu')


# ------------------------------------------------------------------------------------------- metrics.py
def categorical_accuracy(y, y_pred):
    return torch.eq(y_pred.argmax(dim=-1), y).sum().item() / y_pred.shape[0]


NAMED_METRICS = {
    'categorical_accuracy': categorical_accuracy
}


# ------------------------------------------------------------------------------------------ callbacks.py
class Callback(object):
    def __init__(self):
        self.model = None

    def set_params(self, params):
        self.params = params

    def set_model(self, model):
        self.model = model

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_batch_end(self, batch, logs=None):
        pass

    def on_train_begin(self, logs=None):
        pass


class CallbackList(object):
    def __init__(self, callbacks):
        self.callbacks = [c for c in callbacks]

    def set_params(self, params):
        for callback in self.callbacks:
            callback.set_params(params)

    def set_model(self, model):
        for callback in self.callbacks:
            callback.set_model(model)

    def on_epoch_begin(self, epoch, logs=None):
        logs = logs or {}
        for callback in self.callbacks:
            callback.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        for callback in self.callbacks:
            callback.on_epoch_end(epoch, logs)

    def on_batch_end(self, batch, logs=None):
        logs = logs or {}
        for callback in self.callbacks:
            callback.on_batch_end(batch, logs)

    def on_train_begin(self, logs=None):
        logs = logs or {}
        for callback in self.callbacks:
            callback.on_train_begin(logs)


class DefaultCallback(Callback):
    """Records metrics over epochs by averaging over each batch."""
    def on_epoch_begin(self, batch, logs=None):
        self.seen = 0
        self.totals = {}
        self.metrics = ['loss'] + self.params['metrics']

    def on_batch_end(self, batch, logs=None):
        logs = logs or {}
        batch_size = logs.get('size', 1) or 1
        self.seen += batch_size

        for k, v in logs.items():
            if k in self.totals:
                self.totals[k] += v * batch_size
            else:
                self.totals[k] = v * batch_size

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            for k in self.metrics:
                if k in self.totals:
                    # Make value available to next callbacks.
                    logs[k] = self.totals[k] / self.seen


class PrintLogger(Callback):
    """Stands in for ProgressBarLogger: one line per epoch."""
    def __init__(self):
        super().__init__()
        self.history = []

    def on_epoch_end(self, epoch, logs=None):
        print(f"Epoch {epoch}: " + ", ".join(f"{k}={v:.4f}" for k, v in logs.items()))
        self.history.append(dict(logs))


# ----------------------------------------------------------------------------------------------- core.py
class NShotTaskSampler(Sampler):
    def __init__(self, dataset, episodes_per_epoch=None, n=None, k=None, q=None, num_tasks=1, fixed_tasks=None):
        super(NShotTaskSampler, self).__init__()
        self.episodes_per_epoch = episodes_per_epoch
        self.dataset = dataset
        if num_tasks < 1:
            raise ValueError('num_tasks must be > 1.')

        self.num_tasks = num_tasks
        self.k = k
        self.n = n
        self.q = q
        self.fixed_tasks = fixed_tasks

        self.i_task = 0

    def __len__(self):
        return self.episodes_per_epoch

    def __iter__(self):
        for _ in range(self.episodes_per_epoch):
            batch = []

            for task in range(self.num_tasks):
                if self.fixed_tasks is None:
                    # Get random classes
                    episode_classes = np.random.choice(self.dataset.df['class_id'].unique(), size=self.k, replace=False)
                else:
                    # Loop through classes in fixed_tasks
                    episode_classes = self.fixed_tasks[self.i_task % len(self.fixed_tasks)]
                    self.i_task += 1

                df = self.dataset.df[self.dataset.df['class_id'].isin(episode_classes)]

                support_k = {k: None for k in episode_classes}
                for k in episode_classes:
                    # Select support examples
                    support = df[df['class_id'] == k].sample(self.n)
                    support_k[k] = support

                    for i, s in support.iterrows():
                        batch.append(s['id'])

                for k in episode_classes:
                    query = df[(df['class_id'] == k) & (~df['id'].isin(support_k[k]['id']))].sample(self.q)
                    for i, q in query.iterrows():
                        batch.append(q['id'])

            yield np.stack(batch)


class EvaluateFewShot(Callback):
    def __init__(self, eval_fn, num_tasks, n_shot, k_way, q_queries, taskloader, prepare_batch, prefix='val_',
                 **kwargs):
        super(EvaluateFewShot, self).__init__()
        self.eval_fn = eval_fn
        self.num_tasks = num_tasks
        self.n_shot = n_shot
        self.k_way = k_way
        self.q_queries = q_queries
        self.taskloader = taskloader
        self.prepare_batch = prepare_batch
        self.prefix = prefix
        self.kwargs = kwargs
        self.metric_name = f'{self.prefix}{self.n_shot}-shot_{self.k_way}-way_acc'

    def on_train_begin(self, logs=None):
        self.loss_fn = self.params['loss_fn']
        self.optimiser = self.params['optimiser']

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        seen = 0
        totals = {'loss': 0, self.metric_name: 0}
        for batch_index, batch in enumerate(self.taskloader):
            x, y = self.prepare_batch(batch)

            loss, y_pred = self.eval_fn(
                self.model,
                self.optimiser,
                self.loss_fn,
                x,
                y,
                n_shot=self.n_shot,
                k_way=self.k_way,
                q_queries=self.q_queries,
                train=False,
                **self.kwargs
            )

            seen += y_pred.shape[0]

            totals['loss'] += loss.item() * y_pred.shape[0]
            totals[self.metric_name] += categorical_accuracy(y, y_pred) * y_pred.shape[0]

        logs[self.prefix + 'loss'] = totals['loss'] / seen
        logs[self.metric_name] = totals[self.metric_name] / seen


def create_nshot_task_label(k: int, q: int) -> torch.Tensor:
    y = torch.arange(0, k, 1 / q).long()
    return y


# --------------------------------------------------------------------------------------------- models.py
def conv_block(in_channels: int, out_channels: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(),
        nn.MaxPool2d(kernel_size=2, stride=2)
    )


def functional_conv_block(x, weights, biases, bn_weights, bn_biases) -> torch.Tensor:
    x = F.conv2d(x, weights, biases, padding=1)
    x = F.batch_norm(x, running_mean=None, running_var=None, weight=bn_weights, bias=bn_biases, training=True)
    x = F.relu(x)
    x = F.max_pool2d(x, kernel_size=2, stride=2)
    return x


class FewShotClassifier(nn.Module):
    def __init__(self, num_input_channels: int, k_way: int, final_layer_size: int = 64, width: int = 16):
        super(FewShotClassifier, self).__init__()
        self.conv1 = conv_block(num_input_channels, width)
        self.conv2 = conv_block(width, width)
        self.conv3 = conv_block(width, width)
        self.conv4 = conv_block(width, width)

        self.logits = nn.Linear(final_layer_size, k_way)

    def forward(self, x):
        x = self.conv1(x)
        x = self.conv2(x)
        x = self.conv3(x)
        x = self.conv4(x)

        x = x.view(x.size(0), -1)

        return self.logits(x)

    def functional_forward(self, x, weights):
        """Applies the same forward pass using PyTorch functional operators using a specified set of weights."""

        for block in [1, 2, 3, 4]:
            x = functional_conv_block(x, weights[f'conv{block}.0.weight'], weights[f'conv{block}.0.bias'],
                                      weights.get(f'conv{block}.1.weight'), weights.get(f'conv{block}.1.bias'))

        x = x.view(x.size(0), -1)

        x = F.linear(x, weights['logits.weight'], weights['logits.bias'])

        return x


# ----------------------------------------------------------------------------------------------- maml.py
def replace_grad(parameter_gradients, parameter_name):
    def replace_grad_(module):
        return parameter_gradients[parameter_name]

    return replace_grad_


def meta_gradient_step(model: Module,
                       optimiser: Optimizer,
                       loss_fn: Callable,
                       x: torch.Tensor,
                       y: torch.Tensor,
                       n_shot: int,
                       k_way: int,
                       q_queries: int,
                       order: int,
                       inner_train_steps: int,
                       inner_lr: float,
                       train: bool,
                       device: Union[str, torch.device]):
    data_shape = x.shape[2:]
    create_graph = (True if order == 2 else False) and train

    task_gradients = []
    task_losses = []
    task_predictions = []
    for meta_batch in x:
        # By construction x is a 5D tensor of shape: (meta_batch_size, n*k + q*k, channels, width, height)
        # Hence when we iterate over the first  dimension we are iterating through the meta batches
        x_task_train = meta_batch[:n_shot * k_way]
        x_task_val = meta_batch[n_shot * k_way:]

        # Create a fast model using the current meta model weights
        fast_weights = OrderedDict(model.named_parameters())

        # Train the model for `inner_train_steps` iterations
        for inner_batch in range(inner_train_steps):
            # Perform update of model weights
            y = create_nshot_task_label(k_way, n_shot).to(device)
            logits = model.functional_forward(x_task_train, fast_weights)
            loss = loss_fn(logits, y)
            gradients = torch.autograd.grad(loss, fast_weights.values(), create_graph=create_graph)

            # Update weights manually
            fast_weights = OrderedDict(
                (name, param - inner_lr * grad)
                for ((name, param), grad) in zip(fast_weights.items(), gradients)
            )

        # Do a pass of the model on the validation data from the current task
        y = create_nshot_task_label(k_way, q_queries).to(device)
        logits = model.functional_forward(x_task_val, fast_weights)
        loss = loss_fn(logits, y)
        loss.backward(retain_graph=True)

        # Get post-update accuracies
        y_pred = logits.softmax(dim=1)
        task_predictions.append(y_pred)

        # Accumulate losses and gradients
        task_losses.append(loss)
        gradients = torch.autograd.grad(loss, fast_weights.values(), create_graph=create_graph)
        named_grads = {name: g for ((name, _), g) in zip(fast_weights.items(), gradients)}
        task_gradients.append(named_grads)

    if order == 1:
        if train:
            sum_task_gradients = {k: torch.stack([grad[k] for grad in task_gradients]).mean(dim=0)
                                  for k in task_gradients[0].keys()}
            hooks = []
            for name, param in model.named_parameters():
                hooks.append(
                    param.register_hook(replace_grad(sum_task_gradients, name))
                )

            model.train()
            optimiser.zero_grad()
            # Dummy pass in order to create `loss` variable
            # Replace dummy gradients with mean task gradients using hooks
            logits = model(torch.zeros((k_way, ) + data_shape).to(device, dtype=torch.double))
            loss = loss_fn(logits, create_nshot_task_label(k_way, 1).to(device))
            loss.backward()
            optimiser.step()

            for h in hooks:
                h.remove()

        return torch.stack(task_losses).mean(), torch.cat(task_predictions)

    elif order == 2:
        model.train()
        optimiser.zero_grad()
        meta_batch_loss = torch.stack(task_losses).mean()

        if train:
            meta_batch_loss.backward()
            optimiser.step()

        return meta_batch_loss, torch.cat(task_predictions)
    else:
        raise ValueError('Order must be either 1 or 2.')


# ---------------------------------------------------------------------------------------------- train.py
def batch_metrics(model, y_pred, y, metrics, batch_logs):
    model.eval()
    for m in metrics:
        if isinstance(m, str):
            batch_logs[m] = NAMED_METRICS[m](y, y_pred)
        else:
            batch_logs = m(y, y_pred)

    return batch_logs


def fit(model, optimiser, loss_fn, epochs, dataloader, prepare_batch, metrics=None, callbacks=None, verbose=True,
        fit_function=None, fit_function_kwargs={}):
    num_batches = len(dataloader)
    batch_size = dataloader.batch_size

    callbacks = CallbackList([DefaultCallback(), ] + (callbacks or []))
    callbacks.set_model(model)
    callbacks.set_params({
        'num_batches': num_batches,
        'batch_size': batch_size,
        'verbose': verbose,
        'metrics': (metrics or []),
        'prepare_batch': prepare_batch,
        'loss_fn': loss_fn,
        'optimiser': optimiser
    })

    if verbose:
        print('Begin training...')

    callbacks.on_train_begin()

    for epoch in range(1, epochs+1):
        callbacks.on_epoch_begin(epoch)

        epoch_logs = {}
        for batch_index, batch in enumerate(dataloader):
            batch_logs = dict(batch=batch_index, size=(batch_size or 1))

            x, y = prepare_batch(batch)

            loss, y_pred = fit_function(model, optimiser, loss_fn, x, y, **fit_function_kwargs)
            batch_logs['loss'] = loss.item()

            batch_logs = batch_metrics(model, y_pred, y, metrics, batch_logs)

            callbacks.on_batch_end(batch_index, batch_logs)

        callbacks.on_epoch_end(epoch, epoch_logs)

    if verbose:
        print('Finished.')


# ------------------------------------------------------------------------------------------- datasets.py
class SyntheticOmniglot(Dataset):
    """Omniglot stand-in: each class is a random 'character' of strokes; samples are shifted and noisy."""

    def __init__(self, subset, n_classes, per_class=10):
        rng = np.random.RandomState(0 if subset == 'background' else 1)
        templates = []
        for _ in range(n_classes):
            img = np.zeros((28, 28))
            for _ in range(3):
                r, c = rng.randint(6, 22, 2)
                dr, dc = rng.randint(-1, 2, 2)
                for t in range(8):
                    img[np.clip(r + t * dr, 0, 27), np.clip(c + t * dc, 0, 27)] = 1.0
            templates.append(img)
        rows, images = [], []
        for class_id in range(n_classes):
            for _ in range(per_class):
                shift = rng.randint(-2, 3, 2)
                im = np.roll(templates[class_id], tuple(shift), (0, 1)) + 0.2 * rng.rand(28, 28)
                images.append(im[np.newaxis].astype(np.float64))
                rows.append({'class_name': f'{subset}_{class_id}', 'class_id': class_id})
        self.images = images
        self.df = pd.DataFrame(rows)
        self.df = self.df.assign(id=self.df.index.values)

    def __getitem__(self, item):
        instance = self.images[item]
        instance = (instance - instance.min()) / (instance.max() - instance.min())
        label = int(self.df['class_id'][item])
        return torch.from_numpy(instance), label

    def __len__(self):
        return len(self.df)


# ---------------------------------------------------------------------------------------- experiments/maml.py
def main():
    np.random.seed(0)
    torch.manual_seed(0)
    args = dict(n=1, k=5, q=5, inner_train_steps=1, inner_val_steps=3, inner_lr=0.4, meta_lr=0.003,
                meta_batch_size=4, order=1, epochs=5, epoch_len=10, eval_batches=2)
    num_input_channels, fc_layer_size = 1, 16

    background = SyntheticOmniglot('background', 40)
    background_taskloader = DataLoader(
        background,
        batch_sampler=NShotTaskSampler(background, args['epoch_len'], n=args['n'], k=args['k'], q=args['q'],
                                       num_tasks=args['meta_batch_size']),
        num_workers=0
    )
    evaluation = SyntheticOmniglot('evaluation', 20)
    evaluation_taskloader = DataLoader(
        evaluation,
        batch_sampler=NShotTaskSampler(evaluation, args['eval_batches'], n=args['n'], k=args['k'], q=args['q'],
                                       num_tasks=args['meta_batch_size']),
        num_workers=0
    )

    print('Training MAML on synthetic omniglot...')
    meta_model = FewShotClassifier(num_input_channels, args['k'], fc_layer_size).to(device, dtype=torch.double)
    meta_optimiser = torch.optim.Adam(meta_model.parameters(), lr=args['meta_lr'])
    loss_fn = nn.CrossEntropyLoss().to(device)

    def prepare_meta_batch(n, k, q, meta_batch_size):
        def prepare_meta_batch_(batch):
            x, y = batch
            # Reshape to `meta_batch_size` number of tasks. Each task contains
            # n*k support samples to train the fast model on and q*k query samples to
            # evaluate the fast model on and generate meta-gradients
            x = x.reshape(meta_batch_size, n*k + q*k, num_input_channels, x.shape[-2], x.shape[-1])
            # Move to device
            x = x.double().to(device)
            # Create label
            y = create_nshot_task_label(k, q).to(device).repeat(meta_batch_size)
            return x, y

        return prepare_meta_batch_

    evaluator = EvaluateFewShot(
        eval_fn=meta_gradient_step,
        num_tasks=args['eval_batches'],
        n_shot=args['n'],
        k_way=args['k'],
        q_queries=args['q'],
        taskloader=evaluation_taskloader,
        prepare_batch=prepare_meta_batch(args['n'], args['k'], args['q'], args['meta_batch_size']),
        # MAML kwargs
        inner_train_steps=args['inner_val_steps'],
        inner_lr=args['inner_lr'],
        device=device,
        order=args['order'],
    )
    logger = PrintLogger()

    # accuracy of the untrained meta-model on the evaluation tasks
    evaluator.set_params({'loss_fn': loss_fn, 'optimiser': meta_optimiser})
    evaluator.set_model(meta_model)
    evaluator.on_train_begin()
    logs0 = {"epoch": 0}
    evaluator.on_epoch_end(0, logs0)
    print(f"Epoch 0: {evaluator.metric_name}={logs0[evaluator.metric_name]:.4f}")

    fit(
        meta_model,
        meta_optimiser,
        loss_fn,
        epochs=args['epochs'],
        dataloader=background_taskloader,
        prepare_batch=prepare_meta_batch(args['n'], args['k'], args['q'], args['meta_batch_size']),
        callbacks=[evaluator, logger],
        metrics=['categorical_accuracy'],
        fit_function=meta_gradient_step,
        fit_function_kwargs={'n_shot': args['n'], 'k_way': args['k'], 'q_queries': args['q'],
                             'train': True,
                             'order': args['order'], 'device': device,
                             'inner_train_steps': args['inner_train_steps'],
                             'inner_lr': args['inner_lr']},
    )
    first, last = logs0[evaluator.metric_name], logger.history[-1][evaluator.metric_name]
    print(f"[summary] {evaluator.metric_name} first={first:.4f} last={last:.4f} increased={last > first}")


if __name__ == '__main__':
    main()
