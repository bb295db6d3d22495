# Source: MichiganCOG/ViP, train.py (train, valid), models/c3d/c3d.py (C3D), losses.py (Losses), commit 38278f08d3810df5c4f1af18eb8b957e5d6c9b42
# Report: https://github.com/MichiganCOG/ViP/issues/7
# ViP video-platform training loop: C3D action recognition with "pseudo batches" (gradients of
# pseudo_batch_loop mini-batches accumulated, the loss multiplied by batch_size and the sum
# normalised before optimizer.step), MultiStepLR, validation accuracy each epoch. The
# pretrained C3D's first convolutions are frozen for fine-tuning (requires_grad=False, the
# optimizer gets only trainable params). C3D is reduced (8-32 channels, 8x16x16 clips);
# the clips are synthetic moving blobs whose direction is the action label.
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import MultiStepLR


class C3D(nn.Module):
    """
    The C3D network.
    """
    def __init__(self, **kwargs):
        super(C3D, self).__init__()
        self.conv1 = nn.Conv3d(3, 8, kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.pool1 = nn.MaxPool3d(kernel_size=(1, 2, 2), stride=(1, 2, 2))
        self.conv2 = nn.Conv3d(8, 16, kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.pool2 = nn.MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2))
        self.conv3a = nn.Conv3d(16, 32, kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.conv3b = nn.Conv3d(32, 32, kernel_size=(3, 3, 3), padding=(1, 1, 1))
        self.pool3 = nn.MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2))
        self.fc6 = nn.Linear(256, 64)
        self.fc7 = nn.Linear(64, 64)
        self.fc8 = nn.Linear(64, kwargs['labels'])
        self.dropout = nn.Dropout(p=0.5)
        self.relu = nn.ReLU()

    def forward(self, x, labels=False):
        x = self.relu(self.conv1(x))
        x = self.pool1(x)
        x = self.relu(self.conv2(x))
        x = self.pool2(x)
        x = self.relu(self.conv3a(x))
        x = self.relu(self.conv3b(x))
        x = self.pool3(x)
        x = x.view(-1, 256)
        x = self.relu(self.fc6(x))
        x = self.dropout(x)
        x = self.relu(self.fc7(x))
        x = self.dropout(x)
        logits = self.fc8(x)
        if labels:
            logits = F.softmax(logits, dim=1)
        return logits


def create_model_object(**args):
    model = C3D(**args)
    # fine-tune: keep the pretrained low-level filters fixed
    for name in args['frozen_layers']:
        for p in getattr(model, name).parameters():
            p.requires_grad = False
    return model


class Losses(object):
    def __init__(self, *args, **kwargs):
        self.loss_type = kwargs['loss_type']
        self.device = kwargs['device']
        self.loss_object = nn.CrossEntropyLoss(reduction='mean')

    def loss(self, predictions, data, **kwargs):
        return self.loss_object(predictions, data['labels'].to(self.device))


class Metrics(object):
    def get_accuracy(self, predictions, targets):
        return (predictions.argmax(1) == targets['labels']).float().mean().item()


def data_loader(**args):
    """Synthetic clips (3, 8, 16, 16): a bright blob moving in one of `labels` directions."""
    g = torch.Generator().manual_seed(0)

    def clips(n):
        y = torch.randint(0, args['labels'], (n,), generator=g)
        dirs = torch.tensor([[0, 1], [0, -1], [1, 0], [-1, 0]], dtype=torch.float)
        yy, xx = torch.meshgrid(torch.arange(16.), torch.arange(16.), indexing="ij")
        x = 0.2 * torch.randn(n, 3, 8, 16, 16, generator=g)
        for i in range(n):
            start = 4 + 8 * torch.rand(2, generator=g)
            for t in range(8):
                c = start + dirs[y[i]] * (t - 4)
                x[i, :, t] += torch.exp(-((yy - c[0]) ** 2 + (xx - c[1]) ** 2) / 4.0)
        return [{'data': x[i:i + args['batch_size']], 'annots': {'labels': y[i:i + args['batch_size']]}}
                for i in range(0, n, args['batch_size'])]
    return {'train': clips(256), 'valid': clips(128)}


def train(**args):
    """
    Evaluate input arguments
    """
    # Set seed
    np.random.seed(args['seed'])
    torch.manual_seed(args['seed'])

    # Check if GPU is available (CUDA)
    device = torch.device("cpu")
    args['device'] = device

    # Load Network
    model = create_model_object(**args).to(device)

    # Load Data
    loader = data_loader(model_obj=model, **args)

    if args['load_type'] == 'train':
        train_loader = loader['train']
        valid_loader = loader['train'] # Run accuracy on train data if only `train` selected

    elif args['load_type'] == 'train_val':
        train_loader = loader['train']
        valid_loader = loader['valid']

    else:
        sys.exit('Invalid environment selection for training, exiting')

    # END IF

    # Training Setup
    params     = [p for p in model.parameters() if p.requires_grad]

    if args['opt'] == 'sgd':
        optimizer  = optim.SGD(params, lr=args['lr'], momentum=args['momentum'], weight_decay=args['weight_decay'])

    elif args['opt'] == 'adam':
        optimizer  = optim.Adam(params, lr=args['lr'], weight_decay=args['weight_decay'])

    else:
        sys.exit('Unsupported optimizer selected. Exiting')

    # END IF

    scheduler  = MultiStepLR(optimizer, milestones=args['milestones'], gamma=args['gamma'])
    start_epoch = 0

    model_loss = Losses(**args)
    acc_metric = Metrics()
    best_val_acc = 0.0

    # Start: Training Loop
    for epoch in range(start_epoch, args['epoch']):
        running_loss = 0.0
        print('Epoch: ', epoch)

        # Setup Model To Train
        model.train()

        # Start: Epoch
        for step, data in enumerate(train_loader):
            if step% args['pseudo_batch_loop'] == 0:
                loss = 0.0
                optimizer.zero_grad()

            # END IF

            x_input       = data['data'].to(device)
            annotations   = data['annots']

            outputs = model(x_input)
            loss    = model_loss.loss(outputs, annotations)
            loss    = loss * args['batch_size']
            loss.backward()

            running_loss += loss.item()

            if ((epoch*len(train_loader) + step+1) % 16 == 0):
                print('Epoch: {}/{}, step: {}/{} | train loss: {:.4f}'.format(epoch, args['epoch'], step+1, len(train_loader), running_loss/float(step+1)/args['batch_size']))

            # END IF

            if (epoch * len(train_loader) + (step+1)) % args['pseudo_batch_loop'] == 0 and step > 0:
                # Apply large mini-batch normalization
                for param in model.parameters():
                    param.grad *= 1./float(args['pseudo_batch_loop']*args['batch_size'])

                # Apply gradient clipping
                if ("grad_max_norm" in args) and float(args['grad_max_norm'] > 0):
                    nn.utils.clip_grad_norm_(model.parameters(),float(args['grad_max_norm']))
                optimizer.step()

            # END IF

        # END FOR: Epoch

        scheduler.step()
        print('Schedulers lr: %f' % scheduler.get_last_lr()[0])

        ## START FOR: Validation Accuracy
        running_acc = []
        running_acc = valid(valid_loader, running_acc, model, device, acc_metric)
        print('Accuracy of the network on the validation set: %f %%\n' % (100.*running_acc[-1]))

        # Save Best Validation Accuracy Model Separately
        if best_val_acc < running_acc[-1]:
            best_val_acc = running_acc[-1]

    # END FOR: Training Loop


def valid(valid_loader, running_acc, model, device, acc_metric):
    model.eval()

    with torch.no_grad():
        accs = []
        for step, data in enumerate(valid_loader):
            x_input     = data['data'].to(device)
            annotations = data['annots']
            outputs     = model(x_input)
            accs.append(acc_metric.get_accuracy(outputs, annotations))

    running_acc.append(float(np.mean(accs)))
    model.train()
    return running_acc


if __name__ == "__main__":
    train(seed=0, labels=4, load_type='train_val', opt='adam', lr=0.002, momentum=0.9, weight_decay=0.0005,
          milestones=[4], gamma=0.1, epoch=5, batch_size=8, pseudo_batch_loop=2, loss_type='M_XENTROPY',
          grad_max_norm=0, frozen_layers=['conv1'])
