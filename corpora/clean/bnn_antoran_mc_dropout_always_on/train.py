# Source: JavierAntoran/Bayesian-Neural-Networks, src/MC_dropout/model.py (MC_dropout, Linear_2L, MC_drop_net) + src/base_net.py
# (BaseNet) + train_MCDropout_MNIST.py (training/dev loop), commit 49a02f188ba08d1069f33859f5caf0be6622f3cd
# MC dropout as approximate variational inference: dropout masks are applied in training AND in evaluation
# (mask = self.training or sample, sample=True by default), the weight decay is the Gaussian prior precision, and the
# predictive distribution averages Nsamples stochastic forward passes.
# Suspicious-looking but correct patterns kept from the original:
#   - F.dropout(..., training=mask, inplace=True) with mask True even after model.eval(): evaluation is stochastic
#     by design (MC dropout); two dev passes give different error rates
#   - the network has no nn.Dropout modules, so model.eval()/train() change nothing; MC_drop_net (a plain object
#     wrapping the model, not an nn.Module) defines its own eval(x, y) that computes the dev loss
#   - loss = F.cross_entropy(..., reduction='sum') with SGD(lr=1e-3, momentum=0.5, weight_decay=1): the per-example
#     sum makes the effective step ~batch_size times larger; weight_decay=1 is the prior precision, not a typo
#   - the dev pass runs without torch.no_grad() and reads .data; sample_predict writes outputs that require grad into
#     a tensor made with x.data.new(...) (predictions[i] = y)
#   - in-place dropout directly on the Linear output, then an in-place ReLU
#   - the whole model and optimizer objects are pickled with torch.save at every dev improvement
# Adaptation: MNIST replaced by synthetic 28x28 class templates + noise (1200 train / 400 dev); n_hid 1200 -> 256,
# 60 -> 5 epochs; CUDA and matplotlib plots removed; Variable wrappers (to_variable) reduced to tensors; model files
# written to a temporary directory; the final MC (10-sample) evaluation uses sample_eval.
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data


def to_variable(var=(), cuda=True, volatile=False):
    out = []
    for v in var:
        if isinstance(v, np.ndarray):
            v = torch.from_numpy(v).type(torch.FloatTensor)
        out.append(v)
    return out


def MC_dropout(act_vec, p=0.5, mask=True):
    return F.dropout(act_vec, p=p, training=mask, inplace=True)


class Linear_2L(nn.Module):
    def __init__(self, input_dim, output_dim, n_hid):
        super(Linear_2L, self).__init__()

        self.pdrop = 0.5

        self.input_dim = input_dim
        self.output_dim = output_dim

        self.fc1 = nn.Linear(input_dim, n_hid)
        self.fc2 = nn.Linear(n_hid, n_hid)
        self.fc3 = nn.Linear(n_hid, output_dim)

        # choose your non linearity
        self.act = nn.ReLU(inplace=True)

    def forward(self, x, sample=True):
        mask = self.training or sample  # if training or sampling, mc dropout will apply random binary mask
        # Otherwise, for regular test set evaluation, we can just scale activations

        x = x.view(-1, self.input_dim)  # view(batch_size, input_dim)
        # -----------------
        x = self.fc1(x)
        x = MC_dropout(x, p=self.pdrop, mask=mask)
        # -----------------
        x = self.act(x)
        # -----------------
        x = self.fc2(x)
        x = MC_dropout(x, p=self.pdrop, mask=mask)
        # -----------------
        x = self.act(x)
        # -----------------
        y = self.fc3(x)

        return y

    def sample_predict(self, x, Nsamples):
        # Just copies type from x, initializes new vector
        predictions = x.data.new(Nsamples, x.shape[0], self.output_dim)

        for i in range(Nsamples):
            y = self.forward(x, sample=True)
            predictions[i] = y

        return predictions


class BaseNet(object):
    def __init__(self):
        print('\nNet:')

    def get_nb_parameters(self):
        return np.sum([p.numel() for p in self.model.parameters()])

    def set_mode_train(self, train=True):
        if train:
            self.model.train()
        else:
            self.model.eval()

    def save(self, filename):
        torch.save({
            'epoch': self.epoch,
            'lr': self.lr,
            'model': self.model,
            'optimizer': self.optimizer}, filename)


class MC_drop_net(BaseNet):
    eps = 1e-6

    def __init__(self, lr=1e-3, channels_in=3, side_in=28, cuda=True, classes=10, batch_size=128, weight_decay=0, n_hid=1200):
        super(MC_drop_net, self).__init__()
        self.lr = lr
        self.schedule = None  # [] #[50,200,400,600]
        self.cuda = cuda
        self.channels_in = channels_in
        self.weight_decay = weight_decay
        self.classes = classes
        self.n_hid = n_hid
        self.batch_size = batch_size
        self.side_in = side_in
        self.create_net()
        self.create_opt()
        self.epoch = 0

        self.test = False

    def create_net(self):
        torch.manual_seed(42)

        self.model = Linear_2L(input_dim=self.channels_in * self.side_in * self.side_in, output_dim=self.classes,
                               n_hid=self.n_hid)

        print('    Total params: %.2fM' % (self.get_nb_parameters() / 1000000.0))

    def create_opt(self):
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.lr, momentum=0.5,
                                         weight_decay=self.weight_decay)

    def fit(self, x, y):
        x, y = to_variable(var=(x, y.long()), cuda=self.cuda)

        self.optimizer.zero_grad()

        out = self.model(x)
        loss = F.cross_entropy(out, y, reduction='sum')

        loss.backward()
        self.optimizer.step()

        # out: (batch_size, out_channels, out_caps_dims)
        pred = out.data.max(dim=1, keepdim=False)[1]  # get the index of the max log-probability
        err = pred.ne(y.data).sum()

        return loss.data, err

    def eval(self, x, y, train=False):
        x, y = to_variable(var=(x, y.long()), cuda=self.cuda)

        out = self.model(x)

        loss = F.cross_entropy(out, y, reduction='sum')

        probs = F.softmax(out, dim=1).data.cpu()

        pred = out.data.max(dim=1, keepdim=False)[1]  # get the index of the max log-probability
        err = pred.ne(y.data).sum()

        return loss.data, err, probs

    def sample_eval(self, x, y, Nsamples, logits=True, train=False):
        x, y = to_variable(var=(x, y.long()), cuda=self.cuda)

        out = self.model.sample_predict(x, Nsamples)

        if logits:
            mean_out = out.mean(dim=0, keepdim=False)
            loss = F.cross_entropy(mean_out, y, reduction='sum')
            probs = F.softmax(mean_out, dim=1).data.cpu()

        else:
            mean_out = F.softmax(out, dim=2).mean(dim=0, keepdim=False)
            probs = mean_out.data.cpu()

            log_mean_probs_out = torch.log(mean_out)
            loss = F.nll_loss(log_mean_probs_out, y, reduction='sum')

        pred = mean_out.data.max(dim=1, keepdim=False)[1]  # get the index of the max log-probability
        err = pred.ne(y.data).sum()

        return loss.data, err, probs


def synthetic_mnist(n, seed):
    g = torch.Generator().manual_seed(123)
    templates = (torch.rand(10, 1, 7, 7, generator=g) > 0.6).float()
    templates = F.interpolate(templates, size=(28, 28), mode='nearest')
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    X = (templates[y] * 0.7 + 0.6 * torch.rand(n, 1, 28, 28, generator=g)).clamp(0, 1)
    return torch.utils.data.TensorDataset((X - 0.1307) / 0.3081, y)


def main():
    models_dir = tempfile.mkdtemp(prefix='MCdrop_models-')
    batch_size = 128
    nb_epochs = 5
    trainset = synthetic_mnist(1200, seed=1)
    valset = synthetic_mnist(400, seed=2)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=batch_size, shuffle=True, num_workers=0)
    valloader = torch.utils.data.DataLoader(valset, batch_size=batch_size, shuffle=False, num_workers=0)

    net = MC_drop_net(lr=1e-3, channels_in=1, side_in=28, cuda=False, classes=10, batch_size=batch_size,
                      weight_decay=1, n_hid=256)

    def dev_error():
        net.set_mode_train(False)
        nb_samples, err_total = 0, 0
        for j, (x, y) in enumerate(valloader):
            cost, err, probs = net.eval(x, y)
            err_total += err
            nb_samples += len(x)
        return float(err_total) / nb_samples

    err0 = dev_error()
    print('dev err before training: %.3f' % err0)
    pred_cost_train = np.zeros(nb_epochs)
    err_train = np.zeros(nb_epochs)
    err_dev = np.zeros(nb_epochs)
    best_err = np.inf
    for i in range(0, nb_epochs):
        net.set_mode_train(True)
        tic = time.time()
        nb_samples = 0
        for x, y in trainloader:
            cost_pred, err = net.fit(x, y)
            err_train[i] += err
            pred_cost_train[i] += cost_pred
            nb_samples += len(x)
        pred_cost_train[i] /= nb_samples
        err_train[i] /= nb_samples
        net.epoch = i
        err_dev[i] = dev_error()
        print("it %d/%d, Jtr_pred = %f, err = %f, dev err = %f, %.2fs" % (
            i, nb_epochs, pred_cost_train[i], err_train[i], err_dev[i], time.time() - tic))
        if err_dev[i] < best_err:
            best_err = err_dev[i]
            net.save(models_dir+'/theta_best.dat')

    net.set_mode_train(False)
    x, y = valset.tensors
    cost, err, probs = net.sample_eval(x, y, Nsamples=10, logits=False)
    print('MC dropout (10 samples) dev err: %.3f, NLL: %.4f' % (float(err) / len(x), float(cost) / len(x)))
    print('[summary] dev_error first=%.3f last=%.3f decreased=%s' % (err0, err_dev[-1], err_dev[-1] < err0))


if __name__ == '__main__':
    main()
