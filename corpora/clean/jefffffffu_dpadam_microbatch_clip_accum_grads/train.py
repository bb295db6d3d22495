# Source: JeffffffFu/Awesome-Differential-Privacy-and-Meachine-Learning, SGD_and_DP/DPSGD.py + optimizer/dp_optimizer.py (e7295e45e77ae5c889d55e67cc9860c9ac4eaca2) + train_and_validation/train_with_dp.py (2ebbe536f3de4fe260e92dfa2a45dd3bab30a414) + train_and_validation/validation.py + data/util/sampling.py, commit e7295e45e77ae5c889d55e67cc9860c9ac4eaca2
# https://github.com/JeffffffFu/Awesome-Differential-Privacy-and-Meachine-Learning
#
# DP-SGD by hand: make_optimizer_class wraps Adam into DPAdam with per-parameter 'accum_grads' buffers
# stored in the param groups; each sampled lot is split into single examples (TensorDataset), each gets
# zero_grad + forward + backward, microbatch_step() clips that example's whole gradient to l2_norm_clip
# and adds it to accum_grads; step() overwrites param.grad.data with accum + N(0, (C*sigma)^2) noise,
# scales by microbatch/minibatch size and calls Adam.step; one uniformly sampled lot per "epoch"; the
# training loss/accuracy is measured on the whole lot afterwards, still in train mode and with autograd on.
# Adaptation: MNIST -> synthetic 1x14x14 digit-like images (10 classes, class templates + noise); CNN
# smaller (two 3x3 conv + tanh, one linear); batch_size 256 -> 64, numEpoch 1500 -> 40, learning_rate
# 0.002 -> 0.01 (fewer steps), sigma 1.1, max_norm 0.1 kept; the RDP accountant and openpyxl result sheet dropped (epsilon not
# printed); sampling helper reduced to uniform sampling without replacement of one lot; cpu.
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import SGD, Adam
from torch.utils.data import DataLoader, TensorDataset


def make_optimizer_class(cls):
    class DPOptimizerClass(cls):
        def __init__(self, l2_norm_clip, noise_multiplier, minibatch_size, microbatch_size, *args, **kwargs):

            super(DPOptimizerClass, self).__init__(*args, **kwargs)

            self.l2_norm_clip = l2_norm_clip
            self.noise_multiplier = noise_multiplier
            self.microbatch_size = microbatch_size
            self.minibatch_size = minibatch_size  #batch_size

            for id,group in enumerate(self.param_groups):
                group['accum_grads'] = [torch.zeros_like(param.data) if param.requires_grad else None for param in group['params']]

        def zero_microbatch_grad(self):
            super(DPOptimizerClass, self).zero_grad()

        def microbatch_step(self):
            total_norm = 0.
            for group in self.param_groups:
                for param in group['params']:
                    if param.requires_grad:
                        total_norm += param.grad.data.norm(2).item() ** 2.

            total_norm = total_norm ** .5
            clip_coef = min(self.l2_norm_clip / (total_norm+ 1e-6), 1.)
            for group in self.param_groups:
                for param, accum_grad in zip(group['params'], group['accum_grads']):
                    if param.requires_grad:
                        accum_grad.add_(param.grad.data.mul(clip_coef))

            return total_norm

        def zero_accum_grad(self):
            for group in self.param_groups:
                for accum_grad in group['accum_grads']:
                    if accum_grad is not None:
                        accum_grad.zero_()

        def step(self, *args, **kwargs):
            for group in self.param_groups:
                for param, accum_grad in zip(group['params'],
                                             group['accum_grads']):
                    if param.requires_grad:

                        param.grad.data = accum_grad.clone()

                        param.grad.data.add_(self.l2_norm_clip * self.noise_multiplier * torch.randn_like(param.grad.data))

                        param.grad.data.mul_(self.microbatch_size / self.minibatch_size)

            super(DPOptimizerClass, self).step(*args, **kwargs)

    return DPOptimizerClass


DPAdam = make_optimizer_class(Adam)
DPSGD = make_optimizer_class(SGD)


class CNN(nn.Module):
    def __init__(self):
        super(CNN, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1, 1)
        self.fc1 = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x):
        x = torch.tanh(self.conv1(x))
        x = F.max_pool2d(x, 2, 2)
        x = torch.tanh(self.conv2(x))
        x = F.max_pool2d(x, 2, 2)
        x = x.view(x.size(0), -1)
        x = self.fc1(x)
        return x


def get_data_loaders_uniform_without_replace(minibatch_size, microbatch_size, iterations):
    def minibatch_loader(dataset):
        idx = np.random.choice(len(dataset), minibatch_size * iterations, replace=False)
        data, target = dataset.tensors
        return DataLoader(TensorDataset(data[idx], target[idx]), batch_size=minibatch_size)

    def microbatch_loader(minibatch):
        return DataLoader(minibatch, batch_size=microbatch_size)

    return minibatch_loader, microbatch_loader


def train_dynamic_add_noise(model, train_loader, criterion, optimizer):
    model.train()
    train_loss = 0.0
    correct = 0
    train_acc=0.
    i=0
    for id,(data, target) in enumerate(train_loader):
        optimizer.zero_accum_grad()

        for iid,(X_microbatch, y_microbatch) in enumerate(TensorDataset(data, target)):

            optimizer.zero_microbatch_grad()
            output = model(torch.unsqueeze(X_microbatch.to(torch.float32), 0))
            loss = criterion(output, torch.unsqueeze(y_microbatch, 0))

            loss.backward()
            optimizer.microbatch_step()

        optimizer.step()

        train_output=model(data.to(torch.float32))
        train_loss=criterion(train_output,target).item()
        prediction = train_output.argmax(dim=1, keepdim=True)
        correct = prediction.eq(target.view_as(prediction)).sum().item()
        train_acc=100. * correct/len(data)
        i+=1

    return train_loss, train_acc


def validation(model, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.cross_entropy(output, target, reduction='sum').item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)
    test_acc = 100. * correct / len(test_loader.dataset)
    return test_loss, test_acc


def get_data(n_train=2000, n_test=500):
    rng = np.random.RandomState(0)
    templates = rng.rand(10, 1, 14, 14).astype(np.float32) > 0.6

    def make(n):
        y = rng.randint(0, 10, size=n)
        x = templates[y].astype(np.float32) + 0.5 * rng.randn(n, 1, 14, 14).astype(np.float32)
        return TensorDataset(torch.from_numpy(x), torch.from_numpy(y).long())
    return make(n_train), make(n_test)


def centralization_train_dynamic_add_noise(train_data, test_data, model,batch_size, numEpoch, learning_rate,momentum,delta,max_norm,sigma):

    optimizer = DPAdam(
        l2_norm_clip=max_norm,
        noise_multiplier=sigma,
        minibatch_size=batch_size,
        microbatch_size=1,
        params=model.parameters(),
        lr=learning_rate,
        # momentum=momentum
    )
    centralized_criterion = nn.CrossEntropyLoss()

    minibatch_size = batch_size
    microbatch_size = 1
    iterations = 1
    minibatch_loader, microbatch_loader = get_data_loaders_uniform_without_replace(minibatch_size, microbatch_size, iterations)

    test_dl = torch.utils.data.DataLoader(
        test_data, batch_size=batch_size, shuffle=False)

    print("------ Centralized Model ------")
    result_loss_list=[]
    result_acc_list=[]
    for epoch in range(numEpoch):

        train_dl = minibatch_loader(train_data)

        central_train_loss, central_train_accuracy = train_dynamic_add_noise(model, train_dl, centralized_criterion, optimizer)

        central_test_loss, central_test_accuracy = validation(model, test_dl)

        result_loss_list.append(central_test_loss)
        result_acc_list.append(central_test_accuracy)

        if epoch % 10 == 0 or epoch == numEpoch - 1:
            print("epoch: {:3.0f}".format(epoch + 1) + " | train loss: {:7.4f}".format(central_train_loss)
                  + " | test loss: {:7.4f}".format(central_test_loss) + " | test acc: {:6.2f}".format(central_test_accuracy))

    print("------ Training finished ------")


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    train_data, test_data = get_data()
    model = CNN()
    batch_size = 64
    learning_rate = 0.01
    numEpoch = 40
    sigma = 1.1
    momentum = 0.9
    delta = 10 ** (-5)
    max_norm = 0.1
    centralization_train_dynamic_add_noise(train_data, test_data, model,batch_size, numEpoch, learning_rate,momentum,delta,max_norm,sigma)


if __name__ == "__main__":
    main()
