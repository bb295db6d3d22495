# Source: kuc2477/pytorch-ewc, main.py + train.py + model.py + utils.py + data.py, commit 4afaa6666d6b4f1a91a110caf69e7b77f049dc08
# https://github.com/kuc2477/pytorch-ewc
#
# Elastic weight consolidation on permuted "MNIST": after each task the diagonal Fisher is estimated from
# per-sample log-likelihood gradients (one autograd.grad per sample with retain_graph on all but the last,
# model still in train mode with dropout), and the parameters and Fisher are stored as BUFFERS named
# '<param>_mean' / '<param>_fisher' (re-registered after every task); the EWC penalty reads them back with
# getattr and returns a zeros(1) tensor via an AttributeError fallback before the first consolidation;
# one SGD over all parameters for every task; validation switches train(False) and back without no_grad.
# Adaptation: torchvision MNIST -> synthetic 28x28 digit-like images (10 class templates of strokes +
# noise), padded to 32x32 and normalised with the MNIST mean/std like the original transforms, one pixel
# permutation per task (data.py's _permutate_image_pixels kept); 1024 train / 256 test images per task (--test-size 256);
# --task-number 8 -> 3, --epochs-per-task 3 -> 2, --fisher-estimation-sample-size 1024 -> 256, --lr 0.1 -> 0.05, hidden
# size 400 kept; --consolidate on; visdom/tqdm replaced by printed precisions and losses at the
# original log intervals (250 -> 8 iterations); cpu.
from functools import reduce

import numpy as np
import torch
from torch import autograd
from torch import nn
from torch import optim
from torch.autograd import Variable
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import default_collate


# ---------------- utils.py ----------------
def get_data_loader(dataset, batch_size, cuda=False, collate_fn=None):

    return DataLoader(
        dataset, batch_size=batch_size,
        shuffle=True, collate_fn=(collate_fn or default_collate),
        **({'num_workers': 2, 'pin_memory': True} if cuda else {})
    )


def validate(model, dataset, test_size=256, batch_size=32,
             cuda=False, verbose=True):
    mode = model.training
    model.train(mode=False)
    data_loader = get_data_loader(dataset, batch_size, cuda=cuda)
    total_tested = 0
    total_correct = 0
    for x, y in data_loader:
        # break on test size.
        if total_tested >= test_size:
            break
        # test the model.
        x = x.view(batch_size, -1)
        x = Variable(x).cuda() if cuda else Variable(x)
        y = Variable(y).cuda() if cuda else Variable(y)
        scores = model(x)
        _, predicted = scores.max(1)
        # update statistics.
        total_correct += int((predicted == y).sum())
        total_tested += len(x)
    model.train(mode=mode)
    precision = total_correct / total_tested
    if verbose:
        print('=> precision: {:.3f}'.format(precision))
    return precision



class utils(object):
    get_data_loader = staticmethod(get_data_loader)
    validate = staticmethod(validate)


# ---------------- data.py (synthetic MNIST instead of torchvision) ----------------
def _permutate_image_pixels(image, permutation):
    if permutation is None:
        return image

    c, h, w = image.size()
    image = image.view(-1, c)
    image = image[permutation, :]
    image.view(c, h, w)
    return image


_TEMPLATES = None


def _templates():
    global _TEMPLATES
    if _TEMPLATES is None:
        g = np.random.RandomState(123)
        t = np.zeros((10, 28, 28), dtype=np.float32)
        for k in range(10):
            for _ in range(3):
                x0, y0, x1, y1 = g.randint(5, 23, size=4)
                for s in np.linspace(0, 1, 30):
                    x, y = int(round(x0 + s * (x1 - x0))), int(round(y0 + s * (y1 - y0)))
                    t[k, y - 1:y + 2, x - 1:x + 2] = 1.0
        _TEMPLATES = t
    return _TEMPLATES


class SyntheticMNIST(Dataset):
    def __init__(self, train, transform):
        g = np.random.RandomState(1 if train else 2)
        n = 1024 if train else 256
        self.targets = g.randint(0, 10, size=n)
        imgs = _templates()[self.targets] + 0.6 * g.rand(n, 28, 28).astype(np.float32)
        self.data = np.clip(imgs, 0, 1)
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        x = torch.from_numpy(self.data[i]).unsqueeze(0)
        return self.transform(x), int(self.targets[i])


def get_dataset(name, train=True, download=True, permutation=None):
    def dataset_transform(x):
        x = F.pad(x, (2, 2, 2, 2))                      # Pad(2)
        x = (x - 0.1307) / 0.3081                       # Normalize((0.1307,), (0.3081,))
        return _permutate_image_pixels(x, permutation)

    return SyntheticMNIST(train=train, transform=dataset_transform)


# ---------------- model.py ----------------

class MLP(nn.Module):
    def __init__(self, input_size, output_size,
                 hidden_size=400,
                 hidden_layer_num=2,
                 hidden_dropout_prob=.5,
                 input_dropout_prob=.2,
                 lamda=40):
        # Configurations.
        super().__init__()
        self.input_size = input_size
        self.input_dropout_prob = input_dropout_prob
        self.hidden_size = hidden_size
        self.hidden_layer_num = hidden_layer_num
        self.hidden_dropout_prob = hidden_dropout_prob
        self.output_size = output_size
        self.lamda = lamda

        # Layers.
        self.layers = nn.ModuleList([
            # input
            nn.Linear(self.input_size, self.hidden_size), nn.ReLU(),
            nn.Dropout(self.input_dropout_prob),
            # hidden
            *((nn.Linear(self.hidden_size, self.hidden_size), nn.ReLU(),
               nn.Dropout(self.hidden_dropout_prob)) * self.hidden_layer_num),
            # output
            nn.Linear(self.hidden_size, self.output_size)
        ])

    @property
    def name(self):
        return (
            'MLP'
            '-lambda{lamda}'
            '-in{input_size}-out{output_size}'
            '-h{hidden_size}x{hidden_layer_num}'
            '-dropout_in{input_dropout_prob}_hidden{hidden_dropout_prob}'
        ).format(
            lamda=self.lamda,
            input_size=self.input_size,
            output_size=self.output_size,
            hidden_size=self.hidden_size,
            hidden_layer_num=self.hidden_layer_num,
            input_dropout_prob=self.input_dropout_prob,
            hidden_dropout_prob=self.hidden_dropout_prob,
        )

    def forward(self, x):
        return reduce(lambda x, l: l(x), self.layers, x)

    def estimate_fisher(self, dataset, sample_size, batch_size=32):
        # sample loglikelihoods from the dataset.
        data_loader = get_data_loader(dataset, batch_size)
        loglikelihoods = []
        for x, y in data_loader:
            x = x.view(batch_size, -1)
            x = Variable(x).cuda() if self._is_on_cuda() else Variable(x)
            y = Variable(y).cuda() if self._is_on_cuda() else Variable(y)
            loglikelihoods.append(
                F.log_softmax(self(x), dim=1)[range(batch_size), y.data]
            )
            if len(loglikelihoods) >= sample_size // batch_size:
                break
        # estimate the fisher information of the parameters.
        loglikelihoods = torch.cat(loglikelihoods).unbind()
        loglikelihood_grads = zip(*[autograd.grad(
            l, self.parameters(),
            retain_graph=(i < len(loglikelihoods))
        ) for i, l in enumerate(loglikelihoods, 1)])
        loglikelihood_grads = [torch.stack(gs) for gs in loglikelihood_grads]
        fisher_diagonals = [(g ** 2).mean(0) for g in loglikelihood_grads]
        param_names = [
            n.replace('.', '__') for n, p in self.named_parameters()
        ]
        return {n: f.detach() for n, f in zip(param_names, fisher_diagonals)}

    def consolidate(self, fisher):
        for n, p in self.named_parameters():
            n = n.replace('.', '__')
            self.register_buffer('{}_mean'.format(n), p.data.clone())
            self.register_buffer('{}_fisher'
                                 .format(n), fisher[n].data.clone())

    def ewc_loss(self, cuda=False):
        try:
            losses = []
            for n, p in self.named_parameters():
                # retrieve the consolidated mean and fisher information.
                n = n.replace('.', '__')
                mean = getattr(self, '{}_mean'.format(n))
                fisher = getattr(self, '{}_fisher'.format(n))
                # wrap mean and fisher in variables.
                mean = Variable(mean)
                fisher = Variable(fisher)
                # calculate a ewc loss. (assumes the parameter's prior as
                # gaussian distribution with the estimated mean and the
                # estimated cramer-rao lower bound variance, which is
                # equivalent to the inverse of fisher information)
                losses.append((fisher * (p-mean)**2).sum())
            return (self.lamda/2)*sum(losses)
        except AttributeError:
            # ewc loss is 0 if there's no consolidated parameters.
            return (
                Variable(torch.zeros(1)).cuda() if cuda else
                Variable(torch.zeros(1))
            )

    def _is_on_cuda(self):
        return next(self.parameters()).is_cuda


# ---------------- train.py ----------------
def train(model, train_datasets, test_datasets, epochs_per_task=10,
          batch_size=64, test_size=1024, consolidate=True,
          fisher_estimation_sample_size=1024,
          lr=1e-3, weight_decay=1e-5,
          loss_log_interval=30,
          eval_log_interval=50,
          cuda=False):
    # prepare the loss criteriton and the optimizer.
    criteriton = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=lr,
                          weight_decay=weight_decay)

    # set the model's mode to training mode.
    model.train()

    for task, train_dataset in enumerate(train_datasets, 1):
        for epoch in range(1, epochs_per_task+1):
            # prepare the data loaders.
            data_loader = utils.get_data_loader(
                train_dataset, batch_size=batch_size,
                cuda=cuda
            )
            data_stream = enumerate(data_loader, 1)

            for batch_index, (x, y) in data_stream:
                # where are we?
                data_size = len(x)
                dataset_size = len(data_loader.dataset)
                dataset_batches = len(data_loader)
                previous_task_iteration = sum([
                    epochs_per_task * len(d) // batch_size for d in
                    train_datasets[:task-1]
                ])
                current_task_iteration = (
                    (epoch-1)*dataset_batches + batch_index
                )
                iteration = (
                    previous_task_iteration +
                    current_task_iteration
                )

                # prepare the data.
                x = x.view(data_size, -1)
                x = Variable(x).cuda() if cuda else Variable(x)
                y = Variable(y).cuda() if cuda else Variable(y)

                # run the model and backpropagate the errors.
                optimizer.zero_grad()
                scores = model(x)
                ce_loss = criteriton(scores, y)
                ewc_loss = model.ewc_loss(cuda=cuda)
                loss = ce_loss + ewc_loss
                loss.backward()
                optimizer.step()

                # calculate the training precision.
                _, predicted = scores.max(1)
                precision = (predicted == y).sum().float() / len(x)

                # Print test precision (visdom in the original).
                if iteration % eval_log_interval == 0:
                    precs = [
                        utils.validate(
                            model, test_datasets[i], test_size=test_size,
                            cuda=cuda, verbose=False,
                        ) if i+1 <= task else 0 for i in
                        range(len(train_datasets))
                    ]
                    print('=> task: {task}/{tasks} | epoch: {epoch}/{epochs} | iteration {it} | prec: {prec:.4} | '
                          'loss => ce: {ce:.4} / ewc: {ewc:.4} | test precision per task: {precs}'.format(
                              task=task, tasks=len(train_datasets), epoch=epoch, epochs=epochs_per_task,
                              it=iteration, prec=float(precision), ce=float(ce_loss), ewc=float(ewc_loss),
                              precs=['%.3f' % float(p) for p in precs]))

        if consolidate and task < len(train_datasets):
            # estimate the fisher information of the parameters and consolidate
            # them in the network.
            print(
                '=> Estimating diagonals of the fisher information matrix...',
                flush=True, end='',
            )
            model.consolidate(model.estimate_fisher(
                train_dataset, fisher_estimation_sample_size
            ))
            print(' Done!')


# ---------------- main.py ----------------
def main():
    np.random.seed(0)
    torch.manual_seed(0)
    task_number, epochs_per_task = 3, 2
    # generate permutations for the tasks.
    permutations = [
        np.random.permutation(32**2) for
        _ in range(task_number)
    ]

    # prepare mnist datasets.
    train_datasets = [
        get_dataset('mnist', permutation=p) for p in permutations
    ]
    test_datasets = [
        get_dataset('mnist', train=False, permutation=p) for p in permutations
    ]

    # prepare the model.
    mlp = MLP(
        32**2, 10,
        hidden_size=400,
        hidden_layer_num=2,
        hidden_dropout_prob=.5,
        input_dropout_prob=.2,
        lamda=40,
    )

    # run the experiment.
    train(
        mlp, train_datasets, test_datasets,
        epochs_per_task=epochs_per_task,
        batch_size=128,
        test_size=256,
        consolidate=True,
        fisher_estimation_sample_size=256,
        lr=5e-2,
        weight_decay=0,
        eval_log_interval=8,
        loss_log_interval=8,
        cuda=False
    )


if __name__ == '__main__':
    main()
