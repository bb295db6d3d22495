# Source: AshwinRJ/Federated-Learning-PyTorch, src/federated_main.py, src/update.py, src/utils.py, src/models.py, src/sampling.py, src/options.py, commit 26eaec40fa8beb56777feb89756f6401c28c4736
# https://github.com/AshwinRJ/Federated-Learning-PyTorch
#
# FedAvg (McMahan et al.): each round a random fraction of users is drawn; every user trains a deepcopy of the
# global model with a FRESH SGD(momentum 0.5) optimizer for local_ep epochs on its own 80 % split, returns
# model.state_dict(); the server deep-copies the local state dicts, averages them key by key (in place on a
# deepcopy of the first) and load_state_dict()s the average into the global model, whose own parameters are
# never given to any optimizer; model.zero_grad() instead of optimizer.zero_grad(); CNNMnist with Dropout2d and
# functional dropout, log_softmax + NLLLoss; DatasetSplit re-wraps items with torch.tensor().
# Adaptation: torchvision/tensorboardX/tqdm are not installed: MNIST -> 2400 synthetic 28x28 digits-like images of
# 10 classes (+ 400 test), normalised as transforms.Normalize((0.1307,), (0.3081,)); the SummaryWriter is a no-op
# stub; args as a namespace with the repository defaults (model cnn, iid, SGD lr 0.01, local_bs 10) except
# num_users 100 -> 20, frac 0.1 -> 0.25, local_ep 10 -> 2, epochs 10 -> 6, verbose 0; the per-round "train
# accuracy" loop over users (which evaluates one user's split) is replaced by test_inference on the test set;
# pickle/plots dropped.
import copy
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


# ---------------------------------------------------------------- src/models.py
class CNNMnist(nn.Module):
    def __init__(self, args):
        super(CNNMnist, self).__init__()
        self.conv1 = nn.Conv2d(args.num_channels, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, args.num_classes)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, x.shape[1]*x.shape[2]*x.shape[3])
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)



# ---------------------------------------------------------------- src/sampling.py
def mnist_iid(dataset, num_users):
    """
    Sample I.I.D. client data from MNIST dataset
    :param dataset:
    :param num_users:
    :return: dict of image index
    """
    num_items = int(len(dataset)/num_users)
    dict_users, all_idxs = {}, [i for i in range(len(dataset))]
    for i in range(num_users):
        dict_users[i] = set(np.random.choice(all_idxs, num_items,
                                             replace=False))
        all_idxs = list(set(all_idxs) - dict_users[i])
    return dict_users


# ---------------------------------------------------------------- src/utils.py
def average_weights(w):
    """
    Returns the average of the weights.
    """
    w_avg = copy.deepcopy(w[0])
    for key in w_avg.keys():
        for i in range(1, len(w)):
            w_avg[key] += w[i][key]
        w_avg[key] = torch.div(w_avg[key], len(w))
    return w_avg


# ---------------------------------------------------------------- src/update.py
class DatasetSplit(Dataset):
    """An abstract Dataset class wrapped around Pytorch Dataset class.
    """

    def __init__(self, dataset, idxs):
        self.dataset = dataset
        self.idxs = [int(i) for i in idxs]

    def __len__(self):
        return len(self.idxs)

    def __getitem__(self, item):
        image, label = self.dataset[self.idxs[item]]
        return torch.tensor(image), torch.tensor(label)


class LocalUpdate(object):
    def __init__(self, args, dataset, idxs, logger):
        self.args = args
        self.logger = logger
        self.trainloader, self.validloader, self.testloader = self.train_val_test(
            dataset, list(idxs))
        self.device = 'cuda' if args.gpu else 'cpu'
        # Default criterion set to NLL loss function
        self.criterion = nn.NLLLoss().to(self.device)

    def train_val_test(self, dataset, idxs):
        """
        Returns train, validation and test dataloaders for a given dataset
        and user indexes.
        """
        # split indexes for train, validation, and test (80, 10, 10)
        idxs_train = idxs[:int(0.8*len(idxs))]
        idxs_val = idxs[int(0.8*len(idxs)):int(0.9*len(idxs))]
        idxs_test = idxs[int(0.9*len(idxs)):]

        trainloader = DataLoader(DatasetSplit(dataset, idxs_train),
                                 batch_size=self.args.local_bs, shuffle=True)
        validloader = DataLoader(DatasetSplit(dataset, idxs_val),
                                 batch_size=int(len(idxs_val)/10), shuffle=False)
        testloader = DataLoader(DatasetSplit(dataset, idxs_test),
                                batch_size=int(len(idxs_test)/10), shuffle=False)
        return trainloader, validloader, testloader

    def update_weights(self, model, global_round):
        # Set mode to train model
        model.train()
        epoch_loss = []

        # Set optimizer for the local updates
        if self.args.optimizer == 'sgd':
            optimizer = torch.optim.SGD(model.parameters(), lr=self.args.lr,
                                        momentum=0.5)
        elif self.args.optimizer == 'adam':
            optimizer = torch.optim.Adam(model.parameters(), lr=self.args.lr,
                                         weight_decay=1e-4)

        for iter in range(self.args.local_ep):
            batch_loss = []
            for batch_idx, (images, labels) in enumerate(self.trainloader):
                images, labels = images.to(self.device), labels.to(self.device)

                model.zero_grad()
                log_probs = model(images)
                loss = self.criterion(log_probs, labels)
                loss.backward()
                optimizer.step()

                if self.args.verbose and (batch_idx % 10 == 0):
                    print('| Global Round : {} | Local Epoch : {} | [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                        global_round, iter, batch_idx * len(images),
                        len(self.trainloader.dataset),
                        100. * batch_idx / len(self.trainloader), loss.item()))
                self.logger.add_scalar('loss', loss.item())
                batch_loss.append(loss.item())
            epoch_loss.append(sum(batch_loss)/len(batch_loss))

        return model.state_dict(), sum(epoch_loss) / len(epoch_loss)

    def inference(self, model):
        """ Returns the inference accuracy and loss.
        """

        model.eval()
        loss, total, correct = 0.0, 0.0, 0.0

        for batch_idx, (images, labels) in enumerate(self.testloader):
            images, labels = images.to(self.device), labels.to(self.device)

            # Inference
            outputs = model(images)
            batch_loss = self.criterion(outputs, labels)
            loss += batch_loss.item()

            # Prediction
            _, pred_labels = torch.max(outputs, 1)
            pred_labels = pred_labels.view(-1)
            correct += torch.sum(torch.eq(pred_labels, labels)).item()
            total += len(labels)

        accuracy = correct/total
        return accuracy, loss


def test_inference(args, model, test_dataset):
    """ Returns the test accuracy and loss.
    """

    model.eval()
    loss, total, correct = 0.0, 0.0, 0.0

    device = 'cuda' if args.gpu else 'cpu'
    criterion = nn.NLLLoss().to(device)
    testloader = DataLoader(test_dataset, batch_size=128,
                            shuffle=False)

    for batch_idx, (images, labels) in enumerate(testloader):
        images, labels = images.to(device), labels.to(device)

        # Inference
        outputs = model(images)
        batch_loss = criterion(outputs, labels)
        loss += batch_loss.item()

        # Prediction
        _, pred_labels = torch.max(outputs, 1)
        pred_labels = pred_labels.view(-1)
        correct += torch.sum(torch.eq(pred_labels, labels)).item()
        total += len(labels)

    accuracy = correct/total
    return accuracy, loss


# ---------------------------------------------------------------- stand-ins: MNIST and tensorboardX
class SyntheticMNIST(Dataset):
    def __init__(self, n, seed, protos):
        g = torch.Generator().manual_seed(seed)
        self.targets = torch.randint(0, 10, (n,), generator=g)
        shift = torch.randint(-2, 3, (n, 2), generator=g)
        imgs = protos[self.targets]
        imgs = torch.stack([torch.roll(im, (int(s[0]), int(s[1])), dims=(1, 2)) for im, s in zip(imgs, shift)])
        imgs = (imgs + 0.35 * torch.rand(imgs.shape, generator=g)).clamp(0, 1)
        self.data = (imgs - 0.1307) / 0.3081

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.data[i], int(self.targets[i])


class SummaryWriter:
    def __init__(self, *a, **k):
        pass

    def add_scalar(self, *a, **k):
        pass


def get_dataset(args):
    g = torch.Generator().manual_seed(1234)
    protos = (F.avg_pool2d(torch.rand(10, 1, 32, 32, generator=g), 5, 1, 0) > 0.5).float()
    train_dataset = SyntheticMNIST(2400, 1, protos)
    test_dataset = SyntheticMNIST(400, 2, protos)
    user_groups = mnist_iid(train_dataset, args.num_users)
    return train_dataset, test_dataset, user_groups


# ---------------------------------------------------------------- src/federated_main.py
def main():
    start_time = time.time()
    logger = SummaryWriter('../logs')

    args = SimpleNamespace(epochs=6, num_users=20, frac=0.25, local_ep=2, local_bs=10, lr=0.01, momentum=0.5,
                           model='cnn', num_channels=1, dataset='mnist', num_classes=10, gpu=None,
                           optimizer='sgd', iid=1, unequal=0, verbose=0, seed=1)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = 'cuda' if args.gpu else 'cpu'

    # load dataset and user groups
    train_dataset, test_dataset, user_groups = get_dataset(args)

    # BUILD MODEL
    global_model = CNNMnist(args=args)

    # Set the model to train and send it to device.
    global_model.to(device)
    global_model.train()
    print(global_model)

    # copy weights
    global_weights = global_model.state_dict()

    test_acc0, _ = test_inference(args, global_model, test_dataset)
    print("Test Accuracy before training: {:.2f}%".format(100*test_acc0))

    # Training
    train_loss, test_accuracy = [], []
    print_every = 2

    for epoch in range(args.epochs):
        local_weights, local_losses = [], []
        print(f'\n | Global Training Round : {epoch+1} |\n')

        global_model.train()
        m = max(int(args.frac * args.num_users), 1)
        idxs_users = np.random.choice(range(args.num_users), m, replace=False)

        for idx in idxs_users:
            local_model = LocalUpdate(args=args, dataset=train_dataset,
                                      idxs=user_groups[idx], logger=logger)
            w, loss = local_model.update_weights(
                model=copy.deepcopy(global_model), global_round=epoch)
            local_weights.append(copy.deepcopy(w))
            local_losses.append(copy.deepcopy(loss))

        # update global weights
        global_weights = average_weights(local_weights)

        # update global weights
        global_model.load_state_dict(global_weights)

        loss_avg = sum(local_losses) / len(local_losses)
        train_loss.append(loss_avg)

        acc, _ = test_inference(args, global_model, test_dataset)
        test_accuracy.append(acc)

        # print global training loss after every 'i' rounds
        if (epoch+1) % print_every == 0:
            print(f' \nAvg Training Stats after {epoch+1} global rounds:')
            print(f'Training Loss : {np.mean(np.array(train_loss))}')
            print('Test Accuracy: {:.2f}% \n'.format(100*test_accuracy[-1]))

    # Test inference after completion of training
    test_acc, test_loss = test_inference(args, global_model, test_dataset)

    print(f' \n Results after {args.epochs} global rounds of training:')
    print("|---- Test Accuracy: {:.2f}%".format(100*test_acc))
    print('\n Total Run Time: {0:0.4f}'.format(time.time()-start_time))
    print(f"[summary] test_acc first={test_acc0:.3f} last={test_acc:.3f} local_loss first={train_loss[0]:.4f} "
          f"last={train_loss[-1]:.4f} increased={test_acc > test_acc0}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
