"""Transfer learning, "ConvNet as fixed feature extractor": every backbone parameter frozen with
requires_grad = False, a new fc head (requires_grad by default) optimized alone with SGD +
momentum and StepLR, the train / val phases of train_model() switching train() / eval() and
torch.set_grad_enabled(phase == 'train'), running corrects from torch.max(outputs, 1), and the
best weights kept with copy.deepcopy(model.state_dict()).

Source: pytorch/tutorials, beginner_source/transfer_learning_tutorial.py,
commit 74ba612b95095bf8f77828989e9cdac609d2bd1b.
Reduced: a toy-width ResNet (_nets.py) for the pretrained resnet18, 16x16 images, 2 classes,
2 train batches and 1 val batch, 1 epoch. Expected: one info (gradient.frozen) for the backbone.

Mutation: the freezing loop moved below the head replacement, so the new `fc` is frozen too: nothing requires grad.
Expected: error gradient.loss_no_grad_fn (cause: every parameter has requires_grad=False), at `loss.backward()`.
"""

import copy

import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim import lr_scheduler

from corpus._nets import resnet


def build():
    torch.manual_seed(0)
    dataloaders = {"train": [(torch.randn(4, 3, 16, 16), torch.randint(0, 2, (4,))) for _ in range(2)],
                   "val": [(torch.randn(4, 3, 16, 16), torch.randint(0, 2, (4,)))]}
    model_conv = resnet(num_classes=1000)
    num_ftrs = model_conv.fc.in_features
    model_conv.fc = nn.Linear(num_ftrs, 2)
    for param in model_conv.parameters():
        param.requires_grad = False
    criterion = nn.CrossEntropyLoss()
    optimizer_conv = optim.SGD(model_conv.fc.parameters(), lr=0.001, momentum=0.9)
    exp_lr_scheduler = lr_scheduler.StepLR(optimizer_conv, step_size=7, gamma=0.1)

    def train_model(model, criterion, optimizer, scheduler, num_epochs=1):
        best_model_wts = copy.deepcopy(model.state_dict())
        best_acc = 0.0
        for epoch in range(num_epochs):
            for phase in ["train", "val"]:
                if phase == "train":
                    model.train()
                else:
                    model.eval()
                running_loss, running_corrects = 0.0, 0
                for inputs, labels in dataloaders[phase]:
                    optimizer.zero_grad()
                    with torch.set_grad_enabled(phase == "train"):
                        outputs = model(inputs)
                        _, preds = torch.max(outputs, 1)
                        loss = criterion(outputs, labels)
                        if phase == "train":
                            loss.backward()  # <- bug
                            optimizer.step()
                    running_loss += loss.item() * inputs.size(0)
                    running_corrects += torch.sum(preds == labels.data)
                if phase == "train":
                    scheduler.step()
                epoch_acc = running_corrects.double() / 4
                if phase == "val" and epoch_acc > best_acc:
                    best_acc = epoch_acc
                    best_model_wts = copy.deepcopy(model.state_dict())
        model.load_state_dict(best_model_wts)
        return model

    def train():
        return train_model(model_conv, criterion, optimizer_conv, exp_lr_scheduler)

    return [model_conv], [optimizer_conv], train


if __name__ == "__main__":
    build()[2]()
