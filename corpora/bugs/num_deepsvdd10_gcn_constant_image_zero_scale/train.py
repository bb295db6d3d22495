# Source: lukasruff/Deep-SVDD-PyTorch, src/datasets/preprocessing.py (global_contrast_normalization), src/datasets/mnist.py (MNIST_Dataset transform), src/optim/deepSVDD_trainer.py (DeepSVDDTrainer), src/networks/mnist_LeNet.py (MNIST_LeNet), commit 1901612d595e23675fb75c4ebb563dd0ffebc21e
# Report: https://github.com/lukasruff/Deep-SVDD-PyTorch/issues/10
# One-class Deep SVDD on MNIST-style digits: every image goes through global contrast
# normalization (L1 scale) and min-max scaling, the hypersphere centre c is the mean network
# output over the training data, and the LeNet-type network is trained to pull the normal
# class towards c. MNIST is replaced by synthetic 28x28 images: rings as the normal class,
# bars as anomalies, and a few empty (all-black) frames among the training images, as a
# scanner occasionally delivers.
import logging
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


def global_contrast_normalization(x: torch.tensor, scale='l2'):
    """
    Apply global contrast normalization to tensor, i.e. subtract mean across features (pixels) and normalize by scale,
    which is either the standard deviation, L1- or L2-norm across features (pixels).
    Note this is a *per sample* normalization globally across features (and not across the dataset).
    """

    assert scale in ('l1', 'l2')

    n_features = int(np.prod(x.shape))

    mean = torch.mean(x)  # mean over all features (pixels) per sample
    x -= mean

    if scale == 'l1':
        x_scale = torch.mean(torch.abs(x))

    if scale == 'l2':
        x_scale = torch.sqrt(torch.sum(x ** 2)) / n_features

    x /= x_scale

    return x


def make_digits(n_rings, n_bars, n_blank, rng):
    yy, xx = np.mgrid[0:28, 0:28]
    imgs, labels = [], []
    for _ in range(n_rings):
        cy, cx, r = rng.uniform(11, 17), rng.uniform(11, 17), rng.uniform(6, 9)
        d = np.abs(np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2) - r)
        imgs.append(np.clip(1.5 - d, 0, 1) * 255)
        labels.append(0)
    for _ in range(n_bars):
        c = int(rng.uniform(10, 18))
        img = np.zeros((28, 28))
        img[4:24, c - 1:c + 2] = 255
        imgs.append(img)
        labels.append(1)
    for _ in range(n_blank):
        imgs.append(np.zeros((28, 28)))
        labels.append(0)
    order = rng.permutation(len(imgs))
    return [imgs[i].astype(np.uint8) for i in order], [labels[i] for i in order]


class MyMNIST(Dataset):
    """Returns (img, target, index) like the repository's MyMNIST."""

    def __init__(self, images, targets, transform):
        self.images, self.targets, self.transform = images, targets, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        img = torch.from_numpy(self.images[index]).float().div(255).unsqueeze(0)  # transforms.ToTensor()
        img = self.transform(img)
        return img, self.targets[index], index


class MNIST_Dataset:
    def __init__(self, normal_class=0):
        # Pre-computed min and max values (after applying GCN) from train data per class
        min_max = [(-0.8826567065619495, 9.001545489292527)]

        # MNIST preprocessing: GCN (with L1 norm) and min-max feature scaling to [0,1]
        def transform(x):
            x = global_contrast_normalization(x, scale='l1')
            return (x - min_max[normal_class][0]) / (min_max[normal_class][1] - min_max[normal_class][0])

        rng = np.random.RandomState(0)
        train_imgs, train_labels = make_digits(200, 0, 2, rng)
        test_imgs, test_labels = make_digits(60, 60, 0, rng)
        self.train_set = MyMNIST(train_imgs, train_labels, transform)
        self.test_set = MyMNIST(test_imgs, test_labels, transform)

    def loaders(self, batch_size, shuffle_train=True, shuffle_test=False, num_workers=0):
        train_loader = DataLoader(dataset=self.train_set, batch_size=batch_size, shuffle=shuffle_train,
                                  num_workers=num_workers)
        test_loader = DataLoader(dataset=self.test_set, batch_size=batch_size, shuffle=shuffle_test,
                                 num_workers=num_workers)
        return train_loader, test_loader


class MNIST_LeNet(nn.Module):

    def __init__(self):
        super().__init__()

        self.rep_dim = 32
        self.pool = nn.MaxPool2d(2, 2)

        self.conv1 = nn.Conv2d(1, 8, 5, bias=False, padding=2)
        self.bn1 = nn.BatchNorm2d(8, eps=1e-04, affine=False)
        self.conv2 = nn.Conv2d(8, 4, 5, bias=False, padding=2)
        self.bn2 = nn.BatchNorm2d(4, eps=1e-04, affine=False)
        self.fc1 = nn.Linear(4 * 7 * 7, self.rep_dim, bias=False)

    def forward(self, x):
        x = self.conv1(x)
        x = self.pool(F.leaky_relu(self.bn1(x)))
        x = self.conv2(x)
        x = self.pool(F.leaky_relu(self.bn2(x)))
        x = x.view(x.size(0), -1)
        x = self.fc1(x)
        return x


class DeepSVDDTrainer:

    def __init__(self, objective, R, c, nu: float, optimizer_name: str = 'adam', lr: float = 0.001, n_epochs: int = 150,
                 lr_milestones: tuple = (), batch_size: int = 128, weight_decay: float = 1e-6, device: str = 'cpu'):
        self.optimizer_name, self.lr, self.n_epochs = optimizer_name, lr, n_epochs
        self.lr_milestones, self.batch_size, self.weight_decay, self.device = lr_milestones, batch_size, weight_decay, device
        self.objective = objective
        self.R = torch.tensor(R, device=self.device)  # radius R initialized with 0 by default.
        self.c = torch.tensor(c, device=self.device) if c is not None else None
        self.nu = nu

    def train(self, dataset, net):
        logger = logging.getLogger()
        net = net.to(self.device)
        train_loader, _ = dataset.loaders(batch_size=self.batch_size)
        optimizer = optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay,
                               amsgrad=self.optimizer_name == 'amsgrad')
        scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=self.lr_milestones, gamma=0.1)

        # Initialize hypersphere center c (if c not loaded)
        if self.c is None:
            logger.info('Initializing center c...')
            self.c = self.init_center_c(train_loader, net)
            logger.info('Center c initialized.')

        logger.info('Starting training...')
        start_time = time.time()
        net.train()
        for epoch in range(self.n_epochs):
            loss_epoch = 0.0
            n_batches = 0
            epoch_start_time = time.time()
            for data in train_loader:
                inputs, _, _ = data
                inputs = inputs.to(self.device)

                optimizer.zero_grad()

                outputs = net(inputs)
                dist = torch.sum((outputs - self.c) ** 2, dim=1)
                loss = torch.mean(dist)
                loss.backward()
                optimizer.step()

                loss_epoch += loss.item()
                n_batches += 1
            scheduler.step()

            epoch_train_time = time.time() - epoch_start_time
            logger.info('  Epoch {}/{}\t Time: {:.3f}\t Loss: {:.8f}'
                        .format(epoch + 1, self.n_epochs, epoch_train_time, loss_epoch / n_batches))
        logger.info('Training time: %.3f' % (time.time() - start_time))
        return net

    def test(self, dataset, net):
        logger = logging.getLogger()
        _, test_loader = dataset.loaders(batch_size=self.batch_size)
        labels, scores = [], []
        net.eval()
        with torch.no_grad():
            for inputs, label, idx in test_loader:
                outputs = net(inputs.to(self.device))
                scores.append(torch.sum((outputs - self.c) ** 2, dim=1))
                labels.append(label)
        scores, labels = torch.cat(scores), torch.cat(labels)
        # rank-based AUC (share of (anomaly, normal) pairs ranked correctly)
        pos, neg = scores[labels == 1], scores[labels == 0]
        auc = (pos[:, None] > neg[None, :]).float().mean().item()
        logger.info('Test set mean score normal {:.4f} anomalous {:.4f} AUC {:.2f}%'.format(
            neg.mean().item(), pos.mean().item(), 100. * auc))

    def init_center_c(self, train_loader, net, eps=0.1):
        """Initialize hypersphere center c as the mean from an initial forward pass on the data."""
        n_samples = 0
        c = torch.zeros(net.rep_dim, device=self.device)

        net.eval()
        with torch.no_grad():
            for data in train_loader:
                inputs, _, _ = data
                inputs = inputs.to(self.device)
                outputs = net(inputs)
                n_samples += outputs.shape[0]
                c += torch.sum(outputs, dim=0)

        c /= n_samples

        # If c_i is too close to 0, set to +-eps. Reason: a zero unit can be trivially matched with zero weights.
        c[(abs(c) < eps) & (c < 0)] = -eps
        c[(abs(c) < eps) & (c > 0)] = eps

        return c


if __name__ == '__main__':
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dataset = MNIST_Dataset(normal_class=0)
    net = MNIST_LeNet()
    trainer = DeepSVDDTrainer('one-class', 0.0, None, 0.1, lr=1e-4, n_epochs=10, batch_size=32)
    net = trainer.train(dataset, net)
    trainer.test(dataset, net)
