# Source: srinidhiPY/SSL_CR_Histo, eval_BreastPathQ_SSL.py + models/net.py, commit adc301ec74b69defc51cfe2ab3effccc7c1f60c5
# Report: https://github.com/srinidhiPY/SSL_CR_Histo/issues/5
# Fine-tuning a pretrained encoder to regress the tumour cellularity score (in [0, 1]) of BreastPathQ
# patches with MSELoss; the best checkpoint is chosen by validation loss. The ResNet-18 is reduced to a
# small CNN and the patches are synthetic 32x32 images whose cellularity is the fraction of dark nuclei.
import copy

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


class AverageMeter(object):
    def __init__(self):
        self.reset()

    def reset(self):
        self.val, self.avg, self.sum, self.count = 0, 0, 0, 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class TripletNet_Finetune(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                     nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                                     nn.Flatten(), nn.Linear(512, 256 * 3), nn.ReLU())

    def forward(self, x):
        return self.encoder(x)


class FinetuneResNet(nn.Module):

    def __init__(self, num_classes):
        super(FinetuneResNet, self).__init__()
        self.classifier = nn.Sequential(nn.Linear(256*3, num_classes))  # (256 * 3) - 3 way siamese model

    def forward(self, x):
        y = self.classifier(x)
        return y


def train(model, classifier, train_loader, criterion, optimizer, epoch):
    model.train()
    classifier.train()
    losses = AverageMeter()
    for batch_idx, (input1, target) in enumerate(train_loader):

        # Get inputs and target
        input1, target = input1.float(), target.float()

        # Reshape augmented tensors
        input1, target = input1.reshape(-1, 3, 32, 32), target.reshape(-1, )

        # compute output ###############################
        feats = model(input1)
        output = classifier(feats)

        # BreastPathQ dataset
        output = output.view(-1, 1).reshape(-1, )

        ######
        loss = criterion(output, target)

        # compute gradient and do SGD step #############
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        batch_size = target.size(0)
        losses.update(loss.item(), batch_size)
    return losses.avg


def validate(model, classifier, val_loader, criterion, epoch):

    # switch to evaluate mode
    model.eval()
    classifier.eval()
    losses = AverageMeter()

    with torch.no_grad():
        for batch_idx, (input1, target) in enumerate(val_loader):

            # Get inputs and target
            input1, target = input1.float(), target.long()

            # compute output ###############################
            feats = model(input1)
            output = classifier(feats)
            loss = criterion(output, target.view(-1, 1))

            batch_size = target.size(0)
            losses.update(loss.item(), batch_size)

    return losses.avg


def test(model, classifier, images, scores):
    model.eval()
    classifier.eval()
    with torch.no_grad():
        output = classifier(model(images)).view(-1)
    return ((output - scores) ** 2).mean().item()


def make_patches(n, gen):
    cellularity = torch.rand(n, generator=gen)
    nuclei = (torch.rand(n, 1, 32, 32, generator=gen) < cellularity.view(-1, 1, 1, 1)).float()
    stroma = torch.tensor([0.9, 0.6, 0.8]).view(1, 3, 1, 1)
    nucleus = torch.tensor([0.3, 0.1, 0.5]).view(1, 3, 1, 1)
    images = stroma * (1 - nuclei) + nucleus * nuclei + 0.05 * torch.randn(n, 3, 32, 32, generator=gen)
    return images, cellularity


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    train_x, train_y = make_patches(768, gen)
    val_x, val_y = make_patches(256, gen)
    test_x, test_y = make_patches(256, gen)
    train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=32, shuffle=True)
    val_loader = DataLoader(TensorDataset(val_x, val_y), batch_size=64, shuffle=False)

    model = TripletNet_Finetune()
    classifier = FinetuneResNet(1)
    criterion = nn.MSELoss()
    optimizer = optim.Adam(filter(lambda p: p.requires_grad, list(model.parameters()) + list(classifier.parameters())), lr=1e-3,
                           betas=(0.9, 0.999), weight_decay=1e-4)

    prev_best_val_loss = float('inf')
    best_state, best_epoch = None, None
    for epoch in range(1, 9):
        train_losses = train(model, classifier, train_loader, criterion, optimizer, epoch)
        val_losses = validate(model, classifier, val_loader, criterion, epoch)
        print('epoch %d train_loss %.4f val_loss %.4f test_mse %.4f' % (
            epoch, train_losses, val_losses, test(model, classifier, test_x, test_y)))

        # Save model for the best val
        if (val_losses < prev_best_val_loss) & (epoch > 1):
            print('==> Saving...')
            best_state = (copy.deepcopy(model.state_dict()), copy.deepcopy(classifier.state_dict()))
            best_epoch = epoch
            prev_best_val_loss = val_losses

    model.load_state_dict(best_state[0])
    classifier.load_state_dict(best_state[1])
    print('best checkpoint: epoch %d, test MSE %.4f' % (best_epoch, test(model, classifier, test_x, test_y)))


if __name__ == "__main__":
    main()
