# Source: microsoft/robustdg, algorithms/algo.py (BaseAlgo.get_opt, get_test_accuracy), algorithms/erm.py (Erm.train), evaluation/base_eval.py, commit 3eee1730ae9efaae2bd763f9835ac540b9bde02a
# Report: https://github.com/microsoft/robustdg/issues/30
# RobustDG's ERM baseline for domain generalisation: the network phi (with BatchNorm) is
# trained on the source domains with SGD (nesterov, weight decay), and after every epoch
# get_test_accuracy('val') and get_test_accuracy('test') measure accuracy on the validation
# and the unseen target domain; the best-validation epoch is saved. The chest X-ray /
# rotated-MNIST loaders are replaced by synthetic 1x16x16 images whose domains differ in
# contrast and offset, DenseNet/LeNet by a small BatchNorm CNN; opacus, the matching
# function and the results files are removed.
import copy
from types import SimpleNamespace

import torch
from torch import nn, optim
from torch.nn import functional as F


class BaseAlgo():
    def __init__(self, args, train_dataset, val_dataset, test_dataset, cuda):
        self.args = args
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.test_dataset = test_dataset
        self.cuda = cuda
        self.phi = self.get_model()
        self.opt = self.get_opt()

        self.final_acc = []
        self.val_acc = []
        self.train_acc = []

    def get_model(self):
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(32, self.args.out_classes))

    def get_opt(self):
        if self.args.opt == 'sgd':
            opt = optim.SGD([
                {'params': filter(lambda p: p.requires_grad, self.phi.parameters())},
            ], lr=self.args.lr, weight_decay=self.args.weight_decay, momentum=0.9, nesterov=True)
        return opt

    def save_model(self):
        self.saved_state = copy.deepcopy(self.phi.state_dict())

    def get_test_accuracy(self, case):
        #Test Env Code
        test_acc = 0.0
        test_size = 0
        if case == 'val':
            dataset = self.val_dataset
        elif case == 'test':
            dataset = self.test_dataset

        for batch_idx, (x_e, y_e, d_e, idx_e, obj_e) in enumerate(dataset):
            with torch.no_grad():

                self.opt.zero_grad()
                x_e = x_e.to(self.cuda)
                y_e = torch.argmax(y_e, dim=1).to(self.cuda)

                #Forward Pass
                out = self.phi(x_e)

                test_acc += torch.sum(torch.argmax(out, dim=1) == y_e).item()
                test_size += y_e.shape[0]

        return 100*test_acc/test_size


class Erm(BaseAlgo):
    def train(self):

        self.max_epoch = -1
        self.max_val_acc = 0.0
        for epoch in range(self.args.epochs):

            penalty_erm = 0
            train_acc = 0.0
            train_size = 0

            #Batch iteration over single epoch
            for batch_idx, (x_e, y_e, d_e, idx_e) in enumerate(self.train_dataset):

                self.opt.zero_grad()
                loss_e = torch.tensor(0.0).to(self.cuda)

                x_e = x_e.to(self.cuda)
                y_e = torch.argmax(y_e, dim=1).to(self.cuda)
                d_e = torch.argmax(d_e, dim=1).numpy()

                #Forward Pass
                out = self.phi(x_e)
                erm_loss = F.cross_entropy(out, y_e.long()).to(self.cuda)
                loss_e += erm_loss
                penalty_erm += float(loss_e.detach())

                #Backprorp
                loss_e.backward(retain_graph=False)
                self.opt.step()

                train_acc += torch.sum(torch.argmax(out, dim=1) == y_e).item()
                train_size += y_e.shape[0]

            #Train Dataset Accuracy
            self.train_acc.append(100*train_acc/train_size)

            #Val Dataset Accuracy
            self.val_acc.append(self.get_test_accuracy('val'))

            #Test Dataset Accuracy
            self.final_acc.append(self.get_test_accuracy('test'))

            print('Epoch %d  Train Loss %.3f  Train Acc %.2f  Val Acc %.2f  Test Acc %.2f' % (
                epoch, penalty_erm, self.train_acc[-1], self.val_acc[-1], self.final_acc[-1]))

            #Save the model if current best epoch as per validation loss
            if self.val_acc[-1] > self.max_val_acc:
                self.max_val_acc = self.val_acc[-1]
                self.max_epoch = epoch
                self.save_model()


def make_domain(n, domain, total_domains, contrast, offset, seed, with_obj=False, batch_size=32):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(16.), torch.arange(16.), indexing='ij')
    vertical = (torch.sin(xx / 1.5) > 0).float()
    horizontal = (torch.sin(yy / 1.5) > 0).float()
    pattern = torch.where(y[:, None, None] == 1, vertical, horizontal)
    x = contrast * (pattern + 2.0 * torch.randn(n, 16, 16, generator=g)) + offset
    x = x.unsqueeze(1)
    y_1hot = F.one_hot(y, 2).float()
    d_1hot = F.one_hot(torch.full((n,), domain), total_domains).float()
    idx = torch.arange(n)
    batches = []
    for s in range(0, n, batch_size):
        item = (x[s:s + batch_size], y_1hot[s:s + batch_size], d_1hot[s:s + batch_size], idx[s:s + batch_size])
        batches.append(item + (idx[s:s + batch_size],) if with_obj else item)
    return batches


def main():
    torch.manual_seed(0)
    args = SimpleNamespace(opt='sgd', lr=0.01, weight_decay=5e-4, epochs=8, out_classes=2, batch_size=32)
    train_dataset = make_domain(384, 0, 3, 1.0, 0.0, seed=1) + make_domain(384, 1, 3, 1.5, 0.5, seed=2)
    train_dataset = [train_dataset[i] for i in torch.randperm(len(train_dataset)).tolist()]
    val_dataset = make_domain(192, 1, 3, 1.5, 0.5, seed=3, with_obj=True)
    test_dataset = make_domain(320, 2, 3, 3.0, -2.0, seed=4, with_obj=True)

    algo = Erm(args, train_dataset, val_dataset, test_dataset, 'cpu')
    algo.train()
    print('Best epoch %d  val acc %.2f  test acc reported %.2f' % (
        algo.max_epoch, algo.max_val_acc, algo.final_acc[algo.max_epoch]))

    # evaluation/base_eval.py: load the saved model and evaluate it in eval mode
    algo.phi.load_state_dict(algo.saved_state)
    algo.phi.eval()
    print('Saved model re-evaluated in eval mode: val acc %.2f  test acc %.2f' % (
        algo.get_test_accuracy('val'), algo.get_test_accuracy('test')))


if __name__ == '__main__':
    main()
