# Source: privacytrustlab/ml_privacy_meter, tutorials/shadow_metric.ipynb (preprocess_purchase100, torch_models, criterion, shadow-model training loop), commit fd2e01fa97b0ca33df6e5f3b912cd9e358bade1a
# Report: https://github.com/privacytrustlab/ml_privacy_meter/issues/95
# Shadow-model training for a membership-inference audit on Purchase100: an MLP
# (600 -> 128 tanh -> 100) per data split, Adam, summed cross-entropy, per-epoch train
# accuracy/loss. The purchase dataset download is replaced by synthetic binary purchase
# vectors drawn from 100 class prototypes; only the target model and one shadow model are
# trained (the audit and report cells are left out), and the test split accuracy is added.
from math import ceil

import numpy as np
import torch
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import OneHotEncoder
from torch import nn, optim, Tensor

np.random.seed(1234)
torch.manual_seed(1234)
torch.set_num_threads(1)

n_shadow_models = 1  # Number of shadow models to be trained
epochs = 12           # Number of epochs for each model
batch_size = 32       # Batch size for the trainings


def preprocess_purchase100(n=5000):
    """
    Cf. https://www.cs.cornell.edu/~shmat/shmat_oak17.pdf page 7
    """
    rng = np.random.RandomState(0)
    prototypes = (rng.uniform(size=(100, 600)) < 0.1)
    labels = rng.randint(0, 100, size=n)
    flips = rng.uniform(size=(n, 600)) < 0.3
    x = np.logical_xor(prototypes[labels], flips).astype(np.float32)
    y = labels
    # Make sure the datatype is correct
    x = np.array(x, dtype=np.float32)
    # Convert labels into one hot vectors
    y = OneHotEncoder(sparse_output=False).fit_transform(np.expand_dims(y, axis=1))
    # Split data into train, test sets
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=1234)
    return x_train, y_train, x_test, y_test


x_train, y_train, x_test, y_test = preprocess_purchase100()
splits = np.array_split(np.arange(len(x_train)), n_shadow_models + 1)

torch_models = [
    nn.Sequential(
        nn.Linear(in_features=600, out_features=128),
        nn.Tanh(),
        nn.Linear(in_features=128, out_features=100),
        nn.Softmax(dim=1)
    )
    for _ in range(n_shadow_models + 1)
]

criterion = nn.CrossEntropyLoss(reduction='sum')


def main():
    for k, model in enumerate(torch_models):
        optimizer = optim.Adam(model.parameters())
        x = x_train[splits[k]]
        y = y_train[splits[k]]
        n_samples = x.shape[0]
        n_batches = ceil(n_samples / batch_size)
        x = np.array_split(x, n_batches)
        y = np.array_split(y, n_batches)
        for epoch in range(epochs):
            epoch_loss, acc = 0.0, 0.0
            for b in range(n_batches):
                optimizer.zero_grad()
                y_pred = model(Tensor(x[b]))
                loss = criterion(Tensor(y[b]), y_pred)
                loss.backward()
                optimizer.step()
                epoch_loss += loss.item()
                acc += torch.sum(y_pred.argmax(axis=1) == Tensor(y[b]).argmax(axis=1))
            acc /= n_samples
            epoch_loss /= n_samples
            if epoch % 3 == 2 or epoch == 0:
                with torch.no_grad():
                    p_test = model(Tensor(x_test))
                    test_acc = (p_test.argmax(axis=1) == Tensor(y_test).argmax(axis=1)).float().mean().item()
                print(f'model #{k:02d}, epoch #{epoch:03d}:\ttrain_acc = {acc:.3f}\ttrain_loss = {epoch_loss:.3e}'
                      f'\ttest_acc = {test_acc:.3f}')


if __name__ == '__main__':
    main()
