# Source: yaringal/ConcreteDropout, concrete-dropout-pytorch.ipynb, commit 0cb396d07696e537d831fba0102920d927c91750
# https://github.com/yaringal/ConcreteDropout
#
# Concrete dropout for heteroscedastic regression: each layer's dropout probability is a learned
# parameter p = sigmoid(p_logit) trained through a relaxed-Bernoulli mask (temperature 0.1); the
# regulariser (weight L2 / (1 - p) plus the dropout entropy term) is written into a torch.empty(5)
# buffer by index assignment and summed into the loss; nn.Sequential wrappers are built inside forward
# around existing layers; the noise is drawn on every call, so after model.eval() the K_test forward passes
# are still stochastic MC samples ON PURPOSE (epistemic uncertainty = variance over samples); the
# heteroscedastic loss learns a per-point log-variance; the test predictive log-likelihood is a
# logsumexp over MC samples.
# Adaptation: .cuda() removed; pylab plots and the pickle dump removed; nb_features 1024 -> 256;
# Ns [10, 25, 50, 100, 1000, 10000] / nb_epochs [2000, 1000, 500, 200, 20, 2] -> Ns [20, 200] /
# [400, 40]; nb_reps 3 -> 1; fit_model prints the loss of the first and last epoch; the notebook never
# advances old_batch (every minibatch is a growing prefix X[0:20*b]), here it is advanced so that the
# minibatches partition the data; the notebook's cells are wrapped in main().
import torch
from torch import nn
from torch.nn import functional as F
from torch import optim
from torch.autograd import Variable

import numpy as np

np.random.seed(0)
torch.manual_seed(0)


class ConcreteDropout(nn.Module):
    def __init__(self, weight_regularizer=1e-6,
                 dropout_regularizer=1e-5, init_min=0.1, init_max=0.1):
        super(ConcreteDropout, self).__init__()


        self.weight_regularizer = weight_regularizer
        self.dropout_regularizer = dropout_regularizer

        init_min = np.log(init_min) - np.log(1. - init_min)
        init_max = np.log(init_max) - np.log(1. - init_max)

        self.p_logit = nn.Parameter(torch.empty(1).uniform_(init_min, init_max))

    def forward(self, x, layer):
        p = torch.sigmoid(self.p_logit)

        out = layer(self._concrete_dropout(x, p))

        sum_of_square = 0
        for param in layer.parameters():
            sum_of_square += torch.sum(torch.pow(param, 2))

        weights_regularizer = self.weight_regularizer * sum_of_square / (1 - p)

        dropout_regularizer = p * torch.log(p)
        dropout_regularizer += (1. - p) * torch.log(1. - p)

        input_dimensionality = x[0].numel() # Number of elements of first item in batch
        dropout_regularizer *= self.dropout_regularizer * input_dimensionality

        regularization = weights_regularizer + dropout_regularizer
        return out, regularization

    def _concrete_dropout(self, x, p):
        eps = 1e-7
        temp = 0.1

        unif_noise = torch.rand_like(x)

        drop_prob = (torch.log(p + eps)
                    - torch.log(1 - p + eps)
                    + torch.log(unif_noise + eps)
                    - torch.log(1 - unif_noise + eps))

        drop_prob = torch.sigmoid(drop_prob / temp)
        random_tensor = 1 - drop_prob
        retain_prob = 1 - p

        x  = torch.mul(x, random_tensor)
        x /= retain_prob

        return x


class Model(nn.Module):
    def __init__(self, nb_features, weight_regularizer, dropout_regularizer):
        super(Model, self).__init__()
        self.linear1 = nn.Linear(1, nb_features)
        self.linear2 = nn.Linear(nb_features, nb_features)
        self.linear3 = nn.Linear(nb_features, nb_features)

        self.linear4_mu = nn.Linear(nb_features, 1)
        self.linear4_logvar = nn.Linear(nb_features, 1)

        self.conc_drop1 = ConcreteDropout(weight_regularizer=weight_regularizer,
                                          dropout_regularizer=dropout_regularizer)
        self.conc_drop2 = ConcreteDropout(weight_regularizer=weight_regularizer,
                                          dropout_regularizer=dropout_regularizer)
        self.conc_drop3 = ConcreteDropout(weight_regularizer=weight_regularizer,
                                          dropout_regularizer=dropout_regularizer)
        self.conc_drop_mu = ConcreteDropout(weight_regularizer=weight_regularizer,
                                             dropout_regularizer=dropout_regularizer)
        self.conc_drop_logvar = ConcreteDropout(weight_regularizer=weight_regularizer,
                                                 dropout_regularizer=dropout_regularizer)

        self.relu = nn.ReLU()

    def forward(self, x):
        regularization = torch.empty(5, device=x.device)

        x1, regularization[0] = self.conc_drop1(x, nn.Sequential(self.linear1, self.relu))
        x2, regularization[1] = self.conc_drop2(x1, nn.Sequential(self.linear2, self.relu))
        x3, regularization[2] = self.conc_drop3(x2, nn.Sequential(self.linear3, self.relu))

        mean, regularization[3] = self.conc_drop_mu(x3, self.linear4_mu)
        log_var, regularization[4] = self.conc_drop_logvar(x3, self.linear4_logvar)

        return mean, log_var, regularization.sum()

def heteroscedastic_loss(true, mean, log_var):
    precision = torch.exp(-log_var)
    return torch.mean(torch.sum(precision * (true - mean)**2 + log_var, 1), 0)


Ns = [20, 200] # Number of data points
Ns = np.array(Ns)
nb_epochs = [400, 40]
nb_val_size = 1000 # Validation size
nb_features = 256 # Hidden layer size
Q = 1 # Data dimensionality
D = 1 # One mean, one log_var
K_test = 20 # Number of MC samples
nb_reps = 1 # Number of times to repeat experiment
batch_size = 20
l = 1e-4 # Lengthscale


def gen_data(N):
    """
    Function to generate data
    """
    sigma = 1e0  # ground truth
    X = np.random.randn(N, Q)
    w = 2.
    b = 8.
    Y = X.dot(w) + b + sigma * np.random.randn(N, D)
    return X, Y


def fit_model(nb_epoch, X, Y):
    N = X.shape[0]
    wr = l**2. / N
    dr = 2. / N
    model = Model(nb_features, wr, dr)
    optimizer = optim.Adam(model.parameters())

    for i in range(nb_epoch):
        old_batch = 0
        for batch in range(int(np.ceil(X.shape[0]/batch_size))):
            batch = (batch + 1)
            _x = X[old_batch: batch_size*batch]
            _y = Y[old_batch: batch_size*batch]

            x = Variable(torch.FloatTensor(_x))
            y = Variable(torch.FloatTensor(_y))

            mean, log_var, regularization = model(x)

            loss = heteroscedastic_loss(y, mean, log_var) + regularization

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            old_batch = batch_size*batch
        if i == 0 or i == nb_epoch - 1:
            print('  epoch %d loss %.4f' % (i, loss.item()))

    return model


def logsumexp(a):
    a_max = a.max(axis=0)
    return np.log(np.sum(np.exp(a - a_max), axis=0)) + a_max

def test(Y_true, K_test, means, logvar):
    """
    Estimate predictive log likelihood:
    log p(y|x, D) = log int p(y|x, w) p(w|D) dw
                 ~= log int p(y|x, w) q(w) dw
                 ~= log 1/K sum p(y|x, w_k) with w_k sim q(w)
                  = LogSumExp log p(y|x, w_k) - log K
    :Y_true: a 2D array of size N x dim
    :MC_samples: a 3D array of size samples K x N x 2*D
    """
    k = K_test
    N = Y_true.shape[0]
    mean = means
    logvar = logvar
    test_ll = -0.5 * np.exp(-logvar) * (mean - Y_val.squeeze())**2. - 0.5 * logvar - 0.5 * np.log(2 * np.pi) #Y_true[None]
    test_ll = np.sum(np.sum(test_ll, -1), -1)
    test_ll = logsumexp(test_ll) - np.log(k)
    pppp = test_ll / N  # per point predictive probability
    rmse = np.mean((np.mean(mean, 0) - Y_val.squeeze())**2.)**0.5
    return pppp, rmse


def main():
    global Y_val
    results = []
    for N, nb_epoch in zip(Ns, nb_epochs):
        rep_results = []
        print(nb_epoch)
        for i in range(nb_reps):
            X, Y = gen_data(N + nb_val_size)
            X_train, Y_train = X[:N], Y[:N]
            X_val, Y_val = X[N:], Y[N:]
            model = fit_model(nb_epoch, X_train, Y_train)
            model.eval()
            MC_samples = [model(Variable(torch.FloatTensor(X_val))) for _ in range(K_test)]
            means = torch.stack([tup[0] for tup in MC_samples]).view(K_test, X_val.shape[0]).cpu().data.numpy()
            logvar = torch.stack([tup[1] for tup in MC_samples]).view(K_test, X_val.shape[0]).cpu().data.numpy()
            pppp, rmse = test(Y_val, K_test, means, logvar)
            epistemic_uncertainty = np.var(means, 0).mean(0)
            logvar = np.mean(logvar, 0)
            aleatoric_uncertainty = np.exp(logvar).mean(0)
            ps = np.array([torch.sigmoid(module.p_logit).cpu().data.numpy()[0] for module in model.modules() if hasattr(module, 'p_logit')])
            print('  val predictive log-likelihood per point %.3f rmse %.3f' % (pppp, rmse))
            rep_results += [(rmse, ps, aleatoric_uncertainty, epistemic_uncertainty)]
        test_mean = np.mean([r[0] for r in rep_results])
        test_std_err = np.std([r[0] for r in rep_results]) / np.sqrt(nb_reps)
        ps = np.mean([r[1] for r in rep_results], 0)
        aleatoric_uncertainty = np.mean([r[2] for r in rep_results])
        epistemic_uncertainty = np.mean([r[3] for r in rep_results])
        print(N, nb_epoch, '-', test_mean, test_std_err, ps, ' - ', aleatoric_uncertainty**0.5, epistemic_uncertainty**0.5)
        results += [rep_results]

    best_tests = np.array([[r[0] for r in result] for result in results]).T
    best_ps = np.array([[r[1] for r in result] for result in results])
    print(best_tests.mean(0))
    print(best_ps.mean(1))


if __name__ == '__main__':
    main()
