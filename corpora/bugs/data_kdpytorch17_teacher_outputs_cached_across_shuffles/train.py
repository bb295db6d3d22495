# Source: haitongli/knowledge-distillation-pytorch, train.py (fetch_teacher_outputs, train_kd, train_and_evaluate_kd), model/net.py (Net, loss_fn_kd, accuracy), model/data_loader.py, commit e4c40132fed5a45e39a6ef7a77b15e5d389186f8
# Report: https://github.com/haitongli/knowledge-distillation-pytorch/pull/17
# Knowledge distillation on CIFAR-10: a pretrained teacher's logits are distilled into a small
# CNN student with loss_fn_kd (KL at temperature T, weighted alpha * T^2, plus (1 - alpha) CE).
# The teacher's outputs are computed once before training to save time, then looked up by batch
# index in every epoch. CIFAR-10 is replaced by synthetic 3x16x16 images of 10 classes (a class
# template plus noise, random horizontal flips as augmentation); the ResNet-18 teacher checkpoint
# is replaced by a small CNN trained for a few epochs at the start; the student is net.Net reduced.
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


class Params:
    model_version = "cnn_distill"
    alpha = 0.9
    temperature = 20
    learning_rate = 1e-3
    batch_size = 64
    num_epochs = 6
    dropout_rate = 0.5
    num_channels = 8
    save_summary_steps = 1
    cuda = False


class SyntheticCIFAR(Dataset):
    def __init__(self, n, templates, seed, train):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.images = templates[self.labels] + 1.2 * torch.randn(n, 3, 16, 16, generator=g)
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        img = self.images[idx]
        if self.train and float(torch.rand(1)) < 0.5:  # transforms.RandomHorizontalFlip()
            img = img.flip(-1)
        return img, self.labels[idx]


def fetch_dataloader(types, params, templates):
    if types == 'train':
        trainset = SyntheticCIFAR(1024, templates, seed=1, train=True)
        return DataLoader(trainset, batch_size=params.batch_size, shuffle=True)
    devset = SyntheticCIFAR(512, templates, seed=2, train=False)
    return DataLoader(devset, batch_size=params.batch_size, shuffle=False)


class Net(nn.Module):
    def __init__(self, params):
        super(Net, self).__init__()
        self.num_channels = params.num_channels
        self.conv1 = nn.Conv2d(3, self.num_channels, 3, stride=1, padding=1)
        self.bn1 = nn.BatchNorm2d(self.num_channels)
        self.conv2 = nn.Conv2d(self.num_channels, self.num_channels * 2, 3, stride=1, padding=1)
        self.bn2 = nn.BatchNorm2d(self.num_channels * 2)
        self.fc1 = nn.Linear(4 * 4 * self.num_channels * 2, self.num_channels * 2)
        self.fcbn1 = nn.BatchNorm1d(self.num_channels * 2)
        self.fc2 = nn.Linear(self.num_channels * 2, 10)
        self.dropout_rate = params.dropout_rate

    def forward(self, s):
        s = F.relu(F.max_pool2d(self.bn1(self.conv1(s)), 2))
        s = F.relu(F.max_pool2d(self.bn2(self.conv2(s)), 2))
        s = s.view(-1, 4 * 4 * self.num_channels * 2)
        s = F.dropout(F.relu(self.fcbn1(self.fc1(s))), p=self.dropout_rate, training=self.training)
        return self.fc2(s)


class Teacher(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                      nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x):
        return self.features(x)


def loss_fn_kd(outputs, labels, teacher_outputs, params):
    alpha = params.alpha
    T = params.temperature
    KD_loss = nn.KLDivLoss(reduction='batchmean')(F.log_softmax(outputs / T, dim=1),
                                                  F.softmax(teacher_outputs / T, dim=1)) * (alpha * T * T) + \
        F.cross_entropy(outputs, labels) * (1. - alpha)
    return KD_loss


def accuracy(outputs, labels):
    outputs = np.argmax(outputs, axis=1)
    return np.sum(outputs == labels) / float(labels.size)


def evaluate_kd(model, dataloader, params):
    model.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for data_batch, labels_batch in dataloader:
            output_batch = model(data_batch)
            correct += (output_batch.argmax(1) == labels_batch).sum().item()
            total += len(labels_batch)
    return {'accuracy': correct / total}


# Helper function: get [batch_idx, teacher_outputs] list by running teacher model once
def fetch_teacher_outputs(teacher_model, dataloader, params):
    # set teacher_model to evaluation mode
    teacher_model.eval()
    teacher_outputs = []
    for i, (data_batch, labels_batch) in enumerate(dataloader):
        with torch.no_grad():
            output_teacher_batch = teacher_model(data_batch).data.cpu().numpy()
        teacher_outputs.append(output_teacher_batch)
    return teacher_outputs


def train_kd(model, teacher_outputs, optimizer, loss_fn_kd, dataloader, params):
    # set model to training mode
    model.train()
    summ = []
    for i, (train_batch, labels_batch) in enumerate(dataloader):
        # compute model output, fetch teacher output, and compute KD loss
        output_batch = model(train_batch)

        # get one batch output from teacher_outputs list
        output_teacher_batch = torch.from_numpy(teacher_outputs[i])

        loss = loss_fn_kd(output_batch, labels_batch, output_teacher_batch, params)

        # clear previous gradients, compute gradients of all variables wrt loss
        optimizer.zero_grad()
        loss.backward()

        # performs updates using calculated gradients
        optimizer.step()

        # Evaluate summaries only once in a while
        if i % params.save_summary_steps == 0:
            output_np = output_batch.data.cpu().numpy()
            labels_np = labels_batch.data.cpu().numpy()
            summary_batch = {'accuracy': accuracy(output_np, labels_np),
                             'teacher_accuracy': accuracy(output_teacher_batch.numpy(), labels_np),
                             'loss': loss.item()}
            summ.append(summary_batch)
    metrics_mean = {metric: np.mean([x[metric] for x in summ]) for metric in summ[0]}
    return metrics_mean


def train_and_evaluate_kd(model, teacher_model, train_dataloader, val_dataloader, optimizer, loss_fn_kd, params):
    best_val_acc = 0.0
    # fetch teacher outputs using teacher_model under eval() mode
    loading_start = time.time()
    teacher_model.eval()
    teacher_outputs = fetch_teacher_outputs(teacher_model, train_dataloader, params)
    elapsed_time = math.ceil(time.time() - loading_start)
    print("- Finished computing teacher outputs after {} secs..".format(elapsed_time))

    for epoch in range(params.num_epochs):
        train_metrics = train_kd(model, teacher_outputs, optimizer, loss_fn_kd, train_dataloader, params)
        val_metrics = evaluate_kd(model, val_dataloader, params)
        val_acc = val_metrics['accuracy']
        if val_acc >= best_val_acc:
            best_val_acc = val_acc
        print("Epoch {}/{}: train loss {:.3f} acc {:.3f} | teacher acc on its batch outputs {:.3f} | val acc {:.3f}".format(
            epoch + 1, params.num_epochs, train_metrics['loss'], train_metrics['accuracy'],
            train_metrics['teacher_accuracy'], val_acc))
    print("best val acc {:.3f}".format(best_val_acc))


def pretrain_teacher(teacher_model, train_dl, dev_dl):
    # stands in for loading experiments/base_resnet18/best.pth.tar
    opt = optim.Adam(teacher_model.parameters(), lr=3e-3)
    for _ in range(4):
        teacher_model.train()
        for x, y in train_dl:
            opt.zero_grad()
            F.cross_entropy(teacher_model(x), y).backward()
            opt.step()
    print("teacher val acc {:.3f}".format(evaluate_kd(teacher_model, dev_dl, None)['accuracy']))


if __name__ == '__main__':
    params = Params()
    torch.manual_seed(230)
    templates = torch.randn(10, 3, 16, 16)
    train_dl = fetch_dataloader('train', params, templates)
    dev_dl = fetch_dataloader('dev', params, templates)

    teacher_model = Teacher()
    pretrain_teacher(teacher_model, train_dl, dev_dl)

    model = Net(params)
    optimizer = optim.Adam(model.parameters(), lr=params.learning_rate)
    train_and_evaluate_kd(model, teacher_model, train_dl, dev_dl, optimizer, loss_fn_kd, params)
