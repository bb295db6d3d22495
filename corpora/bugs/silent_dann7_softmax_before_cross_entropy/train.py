# Source: NaJaeMin92/pytorch-DANN, model.py (Extractor, Classifier, Discriminator) + train.py (dann) + utils.py (ReverseLayerF, optimizer_scheduler), commit 4bd5a8b0c639829a9bccb4659d809f4e3ca58322
# Report: https://github.com/NaJaeMin92/pytorch-DANN/issues/7
# Domain-adversarial training (DANN), MNIST -> MNIST-M: a conv feature extractor shared by a
# label classifier and a domain discriminator behind a gradient-reversal layer, both trained
# with nn.CrossEntropyLoss, SGD with the DANN learning-rate schedule. MNIST / MNIST-M are
# replaced by synthetic 28x28 10-class glyphs (grey source domain, coloured noisy target
# domain); GPU calls are dropped and the run is shortened to 3 epochs.
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Function


class ReverseLayerF(Function):

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha

        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        output = grad_output.neg() * ctx.alpha

        return output, None


def optimizer_scheduler(optimizer, p):
    for param_group in optimizer.param_groups:
        param_group['lr'] = 0.01 / (1. + 10 * p) ** 0.75

    return optimizer


class Extractor(nn.Module):
    def __init__(self):
        super().__init__()
        self.extractor = nn.Sequential(
            nn.Conv2d(in_channels=3, out_channels=32, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2),

            nn.Conv2d(in_channels=32, out_channels=48, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2)
        )

    def forward(self, x):
        x = self.extractor(x)
        x = x.view(-1, 3 * 28 * 28)
        return x


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.classifier = nn.Sequential(
            nn.Linear(in_features=3 * 28 * 28, out_features=100),
            nn.ReLU(),
            nn.Linear(in_features=100, out_features=100),
            nn.ReLU(),
            nn.Linear(in_features=100, out_features=10)
        )

    def forward(self, x):
        x = self.classifier(x)
        return F.softmax(x, dim=1)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.discriminator = nn.Sequential(
            nn.Linear(in_features=3 * 28 * 28, out_features=100),
            nn.ReLU(),
            nn.Linear(in_features=100, out_features=2)
        )

    def forward(self, input_feature, alpha):
        reversed_input = ReverseLayerF.apply(input_feature, alpha)
        x = self.discriminator(reversed_input)
        return F.softmax(x, dim=1)


def make_glyphs(rng):
    protos = np.zeros((10, 28, 28), dtype=np.float32)
    for c in range(10):
        for _ in range(4):
            r0, c0 = rng.randint(4, 20, size=2)
            if rng.rand() < 0.5:
                protos[c, r0:r0 + 4, c0:c0 + rng.randint(6, 10)] = 1.0
            else:
                protos[c, r0:r0 + rng.randint(6, 10), c0:c0 + 4] = 1.0
    return protos


def make_domain(protos, n, rng, target):
    labels = rng.randint(10, size=n)
    imgs = np.zeros((n, 3, 28, 28), dtype=np.float32)
    for i, y in enumerate(labels):
        g = np.roll(protos[y], shift=tuple(rng.randint(-1, 2, size=2)), axis=(0, 1))
        g = np.clip(g + 0.1 * rng.randn(28, 28), 0, 1)
        if target:
            bg = rng.rand(3, 1, 1) * 0.6
            fg = rng.rand(3, 1, 1)
            img = bg * (1 - g) + fg * g + 0.1 * rng.randn(3, 28, 28)
        else:
            img = np.repeat(g[None], 3, axis=0)
        imgs[i] = (img - 0.5) / 0.5
    return torch.from_numpy(imgs), torch.from_numpy(labels).long()


def loader(x, y, batch_size, rng):
    perm = rng.permutation(len(x))
    return [(x[perm[i:i + batch_size]], y[perm[i:i + batch_size]]) for i in range(0, len(x) - batch_size + 1, batch_size)]


def tester(encoder, classifier, discriminator, source, target):
    encoder.eval()
    classifier.eval()
    discriminator.eval()
    with torch.no_grad():
        s_pred = classifier(encoder(source[0])).argmax(1)
        t_pred = classifier(encoder(target[0])).argmax(1)
        d_pred = discriminator(encoder(torch.cat((source[0], target[0]), 0)), 0.0).argmax(1)
    d_true = torch.cat((torch.zeros(len(source[0])), torch.ones(len(target[0])))).long()
    return ((s_pred == source[1]).float().mean().item(), (t_pred == target[1]).float().mean().item(),
            (d_pred == d_true).float().mean().item())


def dann(encoder, classifier, discriminator, source_train, target_train, source_test, target_test, epochs, rng):
    for epoch in range(epochs):
        encoder = encoder.train()
        classifier = classifier.train()
        discriminator = discriminator.train()

        classifier_criterion = nn.CrossEntropyLoss()
        discriminator_criterion = nn.CrossEntropyLoss()

        source_train_loader = loader(*source_train, 32, rng)
        target_train_loader = loader(*target_train, 32, rng)
        start_steps = epoch * len(source_train_loader)
        total_steps = epochs * len(target_train_loader)
        losses = []

        optimizer = optim.SGD(
            list(encoder.parameters()) +
            list(classifier.parameters()) +
            list(discriminator.parameters()),
            lr=0.01,
            momentum=0.9)

        for batch_idx, (source_data, target_data) in enumerate(zip(source_train_loader, target_train_loader)):

            source_image, source_label = source_data
            target_image, target_label = target_data

            p = float(batch_idx + start_steps) / total_steps
            alpha = 2. / (1. + np.exp(-10 * p)) - 1

            combined_image = torch.cat((source_image, target_image), 0)

            optimizer = optimizer_scheduler(optimizer=optimizer, p=p)
            optimizer.zero_grad()

            combined_feature = encoder(combined_image)
            source_feature = encoder(source_image)

            # 1.Classification loss
            class_pred = classifier(source_feature)
            class_loss = classifier_criterion(class_pred, source_label)

            # 2. Domain loss
            domain_pred = discriminator(combined_feature, alpha)

            domain_source_labels = torch.zeros(source_label.shape[0]).type(torch.LongTensor)
            domain_target_labels = torch.ones(target_label.shape[0]).type(torch.LongTensor)
            domain_combined_label = torch.cat((domain_source_labels, domain_target_labels), 0)
            domain_loss = discriminator_criterion(domain_pred, domain_combined_label)

            total_loss = class_loss + domain_loss
            total_loss.backward()
            optimizer.step()
            losses.append((class_loss.item(), domain_loss.item()))

        s_acc, t_acc, d_acc = tester(encoder, classifier, discriminator, source_test, target_test)
        cl, dl = np.mean(losses, axis=0)
        print('Epoch %d class_loss %.4f domain_loss %.4f source_acc %.4f target_acc %.4f domain_acc %.4f'
              % (epoch + 1, cl, dl, s_acc, t_acc, d_acc))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    protos = make_glyphs(rng)
    source_train = make_domain(protos, 640, rng, target=False)
    target_train = make_domain(protos, 640, rng, target=True)
    source_test = make_domain(protos, 300, rng, target=False)
    target_test = make_domain(protos, 300, rng, target=True)
    encoder, classifier, discriminator = Extractor(), Classifier(), Discriminator()
    t0 = time.time()
    dann(encoder, classifier, discriminator, source_train, target_train, source_test, target_test, 3, rng)
    print('done in %.1fs' % (time.time() - t0))


if __name__ == '__main__':
    main()
