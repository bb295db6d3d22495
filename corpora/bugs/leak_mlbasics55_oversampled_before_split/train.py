# Source: MicrosoftDocs/ml-basics, 05a - Deep Neural Networks (PyTorch).ipynb, commit 01b128a6214aa28ae5777c09bff8f6db708b1483
# Report: https://github.com/MicrosoftDocs/ml-basics/issues/55
# Deep learning with PyTorch: classify penguins into species from their culmen length/depth,
# flipper length and body mass with a 3-layer fully connected network, Adam, CrossEntropyLoss,
# 70/30 train_test_split and per-epoch validation. The Palmer penguins CSV is replaced by a
# synthetic table with the same columns, scales and class proportions; the matplotlib plots are
# removed. At the end the model is also scored on freshly measured penguins.
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.utils.data as td
from sklearn.model_selection import train_test_split

torch.set_num_threads(1)
rng = np.random.default_rng(0)

# species: mean and spread of (CulmenLength, CulmenDepth, FlipperLength, BodyMass)
SPECIES = [
    ((38.8, 18.3, 190.0, 3700.0), (2.7, 1.2, 6.5, 460.0), 146),
    ((47.5, 15.0, 217.0, 5076.0), (3.1, 1.0, 6.5, 504.0), 119),
    ((48.8, 18.4, 196.0, 3733.0), (3.3, 1.1, 7.1, 384.0), 68),
]


def measure_penguins(scale=1.0, count_scale=1.0):
    rows = []
    for label, (mean, std, n) in enumerate(SPECIES):
        n = int(n * count_scale)
        x = rng.normal(mean, np.array(std) * 2.2 * scale, size=(n, 4))
        rows.append(np.column_stack([x, np.full(n, label)]))
    df = pd.DataFrame(np.concatenate(rows), columns=['CulmenLength', 'CulmenDepth', 'FlipperLength', 'BodyMass', 'Species'])
    df['Species'] = df['Species'].astype(int)
    return df.sample(frac=1.0, random_state=0).reset_index(drop=True)


def load_penguins():
    penguins = measure_penguins()
    # Deep Learning models work best when features are on similar scales
    penguins['FlipperLength'] = penguins['FlipperLength']/10
    penguins['BodyMass'] = penguins['BodyMass']/100

    # The dataset is too small to be useful for deep learning
    # So we'll oversample it to triple its size
    for i in range(1,3):
        penguins = pd.concat([penguins, penguins])
    return penguins


penguin_classes = ['Amelie', 'Gentoo', 'Chinstrap']
features = ['CulmenLength','CulmenDepth','FlipperLength','BodyMass']
label = 'Species'

# Number of hidden layer nodes
hl = 10


# Define the neural network
class PenguinNet(nn.Module):
    def __init__(self):
        super(PenguinNet, self).__init__()
        self.fc1 = nn.Linear(len(features), hl)
        self.fc2 = nn.Linear(hl, hl)
        self.fc3 = nn.Linear(hl, len(penguin_classes))

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        x = torch.softmax(self.fc3(x),dim=1)
        return x


def train(model, data_loader, optimizer):
    # Set the model to training mode
    model.train()
    train_loss = 0

    for batch, tensor in enumerate(data_loader):
        data, target = tensor
        #feedforward
        optimizer.zero_grad()
        out = model(data)
        loss = loss_criteria(out, target)
        train_loss += loss.item()

        # backpropagate
        loss.backward()
        optimizer.step()

    #Return average loss
    avg_loss = train_loss / (batch+1)
    return avg_loss


def test(model, data_loader):
    # Switch the model to evaluation mode (so we don't backpropagate)
    model.eval()
    test_loss = 0
    correct = 0

    with torch.no_grad():
        batch_count = 0
        for batch, tensor in enumerate(data_loader):
            batch_count += 1
            data, target = tensor
            # Get the predictions
            out = model(data)

            # calculate the loss
            test_loss += loss_criteria(out, target).item()

            # Calculate the accuracy
            _, predicted = torch.max(out.data, 1)
            correct += torch.sum(target==predicted).item()

    # Calculate the average loss and total accuracy for this epoch
    avg_loss = test_loss/batch_count
    return avg_loss, correct / len(data_loader.dataset)


# Specify the loss criteria (CrossEntropyLoss for multi-class classification)
loss_criteria = nn.CrossEntropyLoss()


def main():
    t0 = time.time()
    torch.manual_seed(0)
    penguins = load_penguins()

    # Split data 70%-30% into training set and test set
    x_train, x_test, y_train, y_test = train_test_split(penguins[features].values,
                                                        penguins[label].values,
                                                        test_size=0.30,
                                                        random_state=0)
    seen = {tuple(r) for r in np.round(x_train, 6)}
    shared = sum(tuple(r) in seen for r in np.round(x_test, 6))
    print('Training Set: %d, Test Set: %d, test rows also in training set: %d' % (len(x_train), len(x_test), shared))

    # Create a dataset and loader for the training data and labels
    train_x = torch.Tensor(x_train).float()
    train_y = torch.Tensor(y_train).long()
    train_ds = td.TensorDataset(train_x,train_y)
    train_loader = td.DataLoader(train_ds, batch_size=20, shuffle=False, num_workers=0)

    # Create a dataset and loader for the test data and labels
    test_x = torch.Tensor(x_test).float()
    test_y = torch.Tensor(y_test).long()
    test_ds = td.TensorDataset(test_x,test_y)
    test_loader = td.DataLoader(test_ds, batch_size=20, shuffle=False, num_workers=0)

    model = PenguinNet()
    learning_rate = 0.001
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    optimizer.zero_grad()

    epochs = 50
    for epoch in range(1, epochs + 1):
        train_loss = train(model, train_loader, optimizer)
        test_loss, acc = test(model, test_loader)
        if epoch % (epochs // 5) == 0:
            print('Epoch: {} Training loss: {:.4f} Validation loss: {:.4f}, Accuracy: {:.1f}%'.format(
                epoch, train_loss, test_loss, 100. * acc))

    fresh = measure_penguins(count_scale=3.0)
    fresh['FlipperLength'] = fresh['FlipperLength']/10
    fresh['BodyMass'] = fresh['BodyMass']/100
    fresh_ds = td.TensorDataset(torch.Tensor(fresh[features].to_numpy(copy=True)).float(), torch.Tensor(fresh[label].to_numpy(copy=True)).long())
    _, fresh_acc = test(model, td.DataLoader(fresh_ds, batch_size=20))
    print('reported test accuracy {:.1f}% | accuracy on new penguins {:.1f}% | gap {:.1f} points'.format(
        100. * acc, 100. * fresh_acc, 100. * (acc - fresh_acc)))
    print('done in %.1fs' % (time.time() - t0))


if __name__ == "__main__":
    main()
