# Source: gabrielhuang/reptile-pytorch, train_omniglot.py + models.py + omniglot.py, commit 4c85a5da189498994b414de7fe7a401125345a62
# https://github.com/gabrielhuang/reptile-pytorch
#
# Reptile on N-way K-shot Omniglot: each meta-iteration clones the meta-net (state_dict copy), trains the
# clone for a few steps with its own Adam(betas=(0, 0.999)) whose state is carried over from the previous
# task's optimizer, then writes meta_net.grad = meta - fast by hand (point_grad_to) and takes an SGD step
# with lr 1 decayed linearly (set by hand in param_groups); no loss is ever backpropagated into the
# meta-net; the model ends in LogSoftmax + NLLLoss; evaluation fine-tunes a clone, then eval() on 1 batch.
# Adaptation: Python 2 -> 3 (print, xrange, .next(), loss.data[0] -> .item(), dict views); the Omniglot
# folders are replaced by 400 synthetic 28x28 characters in memory (3 random strokes each, 20 drawings
# shifted by up to 2 pixels with 15% pixel flips) and the PIL reading / ToTensor by numpy; no tensorboardX /
# logdir / checkpoints (print instead); meta-iterations 100000 -> 121, validate-every 100 -> 40, test-iterations 50 -> 20, cuda 0;
# argparse with parse_args([]); Adam betas (0, 0.999) -> (0., 0.999) (current torch rejects an int beta).
import argparse

import numpy as np
import torch
from torch import nn
from torch.autograd import Variable
from torch.utils import data
from torch.utils.data import DataLoader


# ---------------- models.py ----------------
class ReptileModel(nn.Module):

    def __init__(self):
        nn.Module.__init__(self)

    def point_grad_to(self, target):
        '''
        Set .grad attribute of each parameter to be proportional
        to the difference between self and target
        '''
        for p, target_p in zip(self.parameters(), target.parameters()):
            if p.grad is None:
                if self.is_cuda():
                    p.grad = Variable(torch.zeros(p.size())).cuda()
                else:
                    p.grad = Variable(torch.zeros(p.size()))
            p.grad.data.zero_()  # not sure this is required
            p.grad.data.add_(p.data - target_p.data)

    def is_cuda(self):
        return next(self.parameters()).is_cuda


class OmniglotModel(ReptileModel):
    """
    A model for Omniglot classification.
    """
    def __init__(self, num_classes):
        ReptileModel.__init__(self)

        self.num_classes = num_classes

        self.conv = nn.Sequential(
            # 28 x 28 - 1
            nn.Conv2d(1, 64, 3, 2, 1),
            nn.BatchNorm2d(64),
            nn.ReLU(True),

            # 14 x 14 - 64
            nn.Conv2d(64, 64, 3, 2, 1),
            nn.BatchNorm2d(64),
            nn.ReLU(True),

            # 7 x 7 - 64
            nn.Conv2d(64, 64, 3, 2, 1),
            nn.BatchNorm2d(64),
            nn.ReLU(True),

            # 4 x 4 - 64
            nn.Conv2d(64, 64, 3, 2, 1),
            nn.BatchNorm2d(64),
            nn.ReLU(True),

            # 2 x 2 - 64
        )

        self.classifier = nn.Sequential(
            # 2 x 2 x 64 = 256
            nn.Linear(256, num_classes),
            nn.LogSoftmax(1)
        )

    def forward(self, x):
        out = x.view(-1, 1, 28, 28)
        out = self.conv(out)
        out = out.view(len(out), -1)
        out = self.classifier(out)
        return out

    def predict(self, prob):
        __, argmax = prob.max(1)
        return argmax

    def clone(self):
        clone = OmniglotModel(self.num_classes)
        clone.load_state_dict(self.state_dict())
        if self.is_cuda():
            clone.cuda()
        return clone


# ---------------- omniglot.py (synthetic characters instead of image folders) ----------------
def _draw_character(rng):
    img = np.zeros((28, 28), dtype=np.float32)
    for _ in range(3):
        x0, y0, x1, y1 = rng.randint(4, 24, size=4)
        for t in np.linspace(0, 1, 40):
            x, y = int(round(x0 + t * (x1 - x0))), int(round(y0 + t * (y1 - y0)))
            img[max(y - 1, 0):y + 1, max(x - 1, 0):x + 1] = 1.0
    return img


IMAGES = {}


def read_image(path, size=None):
    return IMAGES[path]


class ImageCache(object):
    def __init__(self):
        self.cache = {}

    def read_image(self, path, size=None):
        key = (path, size)
        if key not in self.cache:
            self.cache[key] = read_image(path, size)
        else:
            pass  #print 'reusing cache', key
        return self.cache[key]


class FewShot(data.Dataset):
    '''
    Dataset for K-shot N-way classification
    '''
    def __init__(self, paths, meta=None, parent=None):
        self.paths = paths
        self.meta = {} if meta is None else meta
        self.parent = parent

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, idx):
        path = self.paths[idx]['path']
        if self.parent.cache is None:
            image = read_image(path, self.parent.size)
        else:
            image = self.parent.cache.read_image(path, self.parent.size)
        if self.parent.transform_image is not None:
            image = self.parent.transform_image(image)
        label = self.paths[idx]
        if self.parent.transform_label is not None:
            label = self.parent.transform_label(label)
        return image, label


class AbstractMetaOmniglot(object):

    def __init__(self, characters_list, cache=None, size=(28, 28),
                 transform_image=None, transform_label=None):
        self.characters_list = characters_list
        self.cache = cache
        self.size = size
        self.transform_image = transform_image
        self.transform_label = transform_label

    def __len__(self):
        return len(self.characters_list)

    def __getitem__(self, idx):
        return self.characters_list[idx]

    def get_random_task(self, N=5, K=1):
        train_task, __ = self.get_random_task_split(N, train_K=K, test_K=0)
        return train_task

    def get_random_task_split(self, N=5, train_K=1, test_K=1):
        train_samples = []
        test_samples = []
        character_indices = np.random.choice(len(self), N, replace=False)
        for base_idx, idx in enumerate(character_indices):
            character, paths = self.characters_list[idx]
            for i, path in enumerate(np.random.choice(paths, train_K + test_K, replace=False)):
                new_path = {}
                new_path.update(path)
                new_path['base_idx'] = base_idx
                if i < train_K:
                    train_samples.append(new_path)
                else:
                    test_samples.append(new_path)
        train_task = FewShot(train_samples,
                            meta={'characters': character_indices, 'split': 'train'},
                            parent=self
                            )
        test_task = FewShot(test_samples,
                             meta={'characters': character_indices, 'split': 'test'},
                             parent=self
                             )
        return train_task, test_task


class MetaOmniglotFolder(AbstractMetaOmniglot):

    def __init__(self, root='omniglot', *args, **kwargs):
        rng = np.random.RandomState(0)
        self.root = root
        self._characters = {}
        for character_idx in range(400):
            full_character = '%s/alphabet%02d/character%02d' % (root, character_idx // 20, character_idx % 20)
            proto = _draw_character(rng)
            self._characters[full_character] = []
            for k in range(20):
                dx, dy = rng.randint(-2, 3, size=2)
                im = np.roll(np.roll(proto, dx, axis=1), dy, axis=0).copy()
                flip = rng.rand(28, 28) < 0.15
                im[flip] = 1.0 - im[flip]
                path = '%s/%02d.png' % (full_character, k)
                IMAGES[path] = im
                self._characters[full_character].append({
                    'path': path,
                    'character_idx': character_idx
                })
        characters_list = np.empty(len(self._characters), dtype=object)
        characters_list[:] = list(self._characters.items())
        AbstractMetaOmniglot.__init__(self, characters_list, *args, **kwargs)


class MetaOmniglotSplit(AbstractMetaOmniglot):

    pass


def split_omniglot(meta_omniglot, validation=0.1):
    '''
    Split meta-omniglot into two meta-datasets of tasks (disjoint characters)
    '''
    n_val = int(validation * len(meta_omniglot))
    indices = np.arange(len(meta_omniglot))
    np.random.shuffle(indices)
    train_characters = meta_omniglot[indices[:-n_val]]
    test_characters = meta_omniglot[indices[-n_val:]]
    train = MetaOmniglotSplit(train_characters, cache=meta_omniglot.cache, size=meta_omniglot.size,
                              transform_image=meta_omniglot.transform_image, transform_label=meta_omniglot.transform_label)
    test = MetaOmniglotSplit(test_characters, cache=meta_omniglot.cache, size=meta_omniglot.size,
                             transform_image=meta_omniglot.transform_image, transform_label=meta_omniglot.transform_label)
    return train, test


# Default transforms
def transform_image(image):
    return torch.from_numpy(image).unsqueeze(0)


def transform_label(paths):
    return paths['base_idx']


# ---------------- train_omniglot.py ----------------
def make_infinite(dataloader):
    while True:
        for x in dataloader:
            yield x

def Variable_(tensor, *args_, **kwargs):
    '''
    Make variable cuda depending on the arguments
    '''
    # Unroll list or tuple
    if type(tensor) in (list, tuple):
        return [Variable_(t, *args_, **kwargs) for t in tensor]
    # Unroll dictionary
    if isinstance(tensor, dict):
        return {key: Variable_(v, *args_, **kwargs) for key, v in tensor.items()}
    # Normal tensor
    variable = Variable(tensor, *args_, **kwargs)
    if args.cuda:
        variable = variable.cuda()
    return variable

# Parsing
parser = argparse.ArgumentParser('Train reptile on omniglot')

# - Training params
parser.add_argument('--classes', default=5, type=int, help='classes in base-task (N-way)')
parser.add_argument('--shots', default=5, type=int, help='shots per class (K-shot)')
parser.add_argument('--train-shots', default=10, type=int, help='train shots')
parser.add_argument('--meta-iterations', default=121, type=int, help='number of meta iterations')
parser.add_argument('--start-meta-iteration', default=0, type=int, help='start iteration')
parser.add_argument('--iterations', default=5, type=int, help='number of base iterations')
parser.add_argument('--test-iterations', default=20, type=int, help='number of base iterations')
parser.add_argument('--batch', default=10, type=int, help='minibatch size in base task')
parser.add_argument('--meta-lr', default=1., type=float, help='meta learning rate')
parser.add_argument('--lr', default=1e-3, type=float, help='base learning rate')

# - General params
parser.add_argument('--validation', default=0.1, type=float, help='Percentage of validation')
parser.add_argument('--validate-every', default=40, type=int, help='Meta-evaluation every ... base-tasks')
parser.add_argument('--input', default='omniglot', help='Path to omniglot dataset')
parser.add_argument('--cuda', default=0, type=int, help='Use cuda')

args = parser.parse_args([])

# Loss
cross_entropy = nn.NLLLoss()
def get_loss(prediction, labels):
    return cross_entropy(prediction, labels)


def do_learning(net, optimizer, train_iter, iterations):

    net.train()
    for iteration in range(iterations):
        # Sample minibatch
        data, labels = Variable_(next(train_iter))

        # Forward pass
        prediction = net(data)

        # Get loss
        loss = get_loss(prediction, labels)

        # Backward pass - Update fast net
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return loss.item()


def do_evaluation(net, test_iter, iterations):

    losses = []
    accuracies = []
    net.eval()
    for iteration in range(iterations):
        # Sample minibatch
        data, labels = Variable_(next(test_iter))

        # Forward pass
        prediction = net(data)

        # Get loss
        loss = get_loss(prediction, labels)

        # Get accuracy
        argmax = net.predict(prediction)
        accuracy = (argmax == labels).float().mean()

        losses.append(loss.item())
        accuracies.append(accuracy.item())

    return np.mean(losses), np.mean(accuracies)


def get_optimizer(net, state=None):
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr, betas=(0., 0.999))
    if state is not None:
        optimizer.load_state_dict(state)
    return optimizer


def set_learning_rate(optimizer, lr):
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def main():
    print(args)
    np.random.seed(0)
    torch.manual_seed(0)

    # Load data
    # Resize is done by the MetaDataset because the result can be easily cached
    omniglot = MetaOmniglotFolder(args.input, size=(28, 28), cache=ImageCache(),
                                  transform_image=transform_image,
                                  transform_label=transform_label)
    meta_train, meta_test = split_omniglot(omniglot, args.validation)

    print('Meta-Train characters', len(meta_train))
    print('Meta-Test characters', len(meta_test))

    # Build model, optimizer, and set states
    meta_net = OmniglotModel(args.classes)
    if args.cuda:
        meta_net.cuda()
    meta_optimizer = torch.optim.SGD(meta_net.parameters(), lr=args.meta_lr)
    info = {}
    state = None

    # Main loop
    for meta_iteration in range(args.start_meta_iteration, args.meta_iterations):

        # Update learning rate
        meta_lr = args.meta_lr * (1. - meta_iteration/float(args.meta_iterations))
        set_learning_rate(meta_optimizer, meta_lr)

        # Clone model
        net = meta_net.clone()
        optimizer = get_optimizer(net, state)
        # load state of base optimizer?

        # Sample base task from Meta-Train
        train = meta_train.get_random_task(args.classes, args.train_shots or args.shots)
        train_iter = make_infinite(DataLoader(train, args.batch, shuffle=True))

        # Update fast net
        loss = do_learning(net, optimizer, train_iter, args.iterations)
        state = optimizer.state_dict()  # save optimizer state

        # Update slow net
        meta_net.point_grad_to(net)
        meta_optimizer.step()

        # Meta-Evaluation
        if meta_iteration % args.validate_every == 0:
            print('\n\nMeta-iteration', meta_iteration)
            print('(started at {})'.format(args.start_meta_iteration))
            print('Meta LR', meta_lr)

            for (meta_dataset, mode) in [(meta_train, 'train'), (meta_test, 'val')]:

                train, test = meta_dataset.get_random_task_split(args.classes, train_K=args.shots, test_K=5)  # is that 5 ok?
                train_iter = make_infinite(DataLoader(train, args.batch, shuffle=True))
                test_iter = make_infinite(DataLoader(test, args.batch, shuffle=True))

                # Base-train
                net = meta_net.clone()
                optimizer = get_optimizer(net, state)  # do not save state of optimizer
                loss = do_learning(net, optimizer, train_iter, args.test_iterations)

                # Base-test: compute meta-loss, which is base-validation error
                meta_loss, meta_accuracy = do_evaluation(net, test_iter, 1)  # only one iteration for eval

                # (Logging)
                loss_ = '{}_loss'.format(mode)
                accuracy_ = '{}_accuracy'.format(mode)
                meta_lr_ = 'meta_lr'
                info.setdefault(loss_, {})
                info.setdefault(accuracy_, {})
                info.setdefault(meta_lr_, {})
                info[loss_][meta_iteration] = meta_loss
                info[accuracy_][meta_iteration] = meta_accuracy
                info[meta_lr_][meta_iteration] = meta_lr
                print('\nMeta-{}'.format(mode))
                print('metaloss', meta_loss, 'accuracy', meta_accuracy)
                print('average metaloss', np.mean(list(info[loss_].values())))
                print('average accuracy', np.mean(list(info[accuracy_].values())))


if __name__ == '__main__':
    main()
