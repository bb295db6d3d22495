# Source: sgadgil6/cnslab_fmri, net/fmri_lstm.py (fMRI_LSTM) + run_training_lstm.py, commit b516370c6764e25ebae66d1282dc53d94ffe204d
# Report: https://github.com/sgadgil6/cnslab_fmri/issues/4
# LSTM classifier of resting-state fMRI ROI time series (22 ROIs): random windows of W frames
# per subject form a mini-batch, BCE on a sigmoid output, Adam; every T mini-batches the test
# subjects are scored by voting over TS random windows each, evaluated batch by batch. The HCP
# data files are replaced by synthetic subjects whose two classes differ in the coupling and
# rhythm of a few ROIs; iteration counts, window and hidden sizes are reduced for CPU.
import random
import resource
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

torch.set_num_threads(1)
device = torch.device("cpu")


class fMRI_LSTM(nn.Module):
    def __init__(self, hidden_dim, input_dim, target_size, batch_size):
        super(fMRI_LSTM, self).__init__()
        self.hidden_dim = hidden_dim
        self.lstm = nn.LSTM(input_dim, hidden_dim, batch_first=True)
        self.linear = nn.Linear(hidden_dim, 1)
        self.hidden = self.init_hidden(batch_size=batch_size)
        self.dropout = nn.Dropout(p=0.5)
        self.target_size = target_size

    def init_hidden(self, batch_size):
        return (torch.randn(1, batch_size, self.hidden_dim).to(device), torch.randn(1, batch_size, self.hidden_dim).to(device))

    def forward(self, x):
        lstm_out, self.hidden = self.lstm(x, self.hidden)
        lstm_out = lstm_out.squeeze()[:, -1, :]
        out = self.dropout(lstm_out)
        linear_output = self.linear(out)
        final_output = torch.sigmoid(linear_output)
        return final_output


def make_subjects(n, T, rng):
    """(n, 1, T, 22, 1) ROI series; class 1 couples ROIs 0-5 to a slow rhythm."""
    data = rng.randn(n, 1, T, 22, 1).astype('float32')
    label = rng.randint(0, 2, n)
    t = np.arange(T)
    for i in range(n):
        phase = rng.rand() * 2 * np.pi
        drive = np.sin(2 * np.pi * t / (12 if label[i] else 7) + phase)
        data[i, 0, :, :6, 0] += 0.8 * drive[:, None]
    return data, label.astype('float32')


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    t0 = time.time()
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    rng = np.random.RandomState(0)

    ###### **model parameters**
    W = 40  # window size
    TS = 16  # number of voters per test subject

    ###### **training parameters**
    LR = 0.001  # learning rate
    batch_size = 64

    ###### setup model & data
    net = fMRI_LSTM(96, 22, 1, batch_size=batch_size)
    net.to(device)

    criterion = nn.BCELoss()
    optimizer = optim.Adam(net.parameters(), lr=LR, weight_decay=0.001)

    train_data, train_label = make_subjects(256, 120, rng)
    test_data, test_label = make_subjects(128, 120, rng)

    ###### start training model
    training_loss = 0.0
    T_print = 100
    for epoch in range(301):  # number of mini-batches
        # select a random sub-set of subjects
        net.hidden = net.init_hidden(batch_size)
        net.train()
        idx_batch = np.random.permutation(int(train_data.shape[0]))
        idx_batch = idx_batch[:int(batch_size)]

        # construct a mini-batch by sampling a window W for each subject
        train_data_batch = np.zeros((batch_size, 1, W, 22, 1))
        train_label_batch = train_label[idx_batch]

        for i in range(batch_size):
            r1 = random.randint(0, train_data.shape[2] - W)
            train_data_batch[i] = train_data[idx_batch[i], :, r1:r1 + W, :, :]

        train_data_batch_dev = torch.from_numpy(train_data_batch).float().to(device)
        train_label_batch_dev = torch.from_numpy(train_label_batch).float().to(device)
        train_data_batch_dev = train_data_batch_dev.squeeze()
        # forward + backward + optimize
        optimizer.zero_grad()
        outputs = net(train_data_batch_dev)
        loss = criterion(outputs, train_label_batch_dev.unsqueeze(1))
        loss.backward()
        optimizer.step()

        # print training statistics
        training_loss += loss.item()
        if epoch % T_print == 0:
            outputs = outputs.data.cpu().numpy() > 0.5
            train_acc = sum(outputs[:, 0] == train_label_batch) / train_label_batch.shape[0]
            print('[%d] training loss: %.3f training batch acc %f' % (epoch + 1, training_loss / T_print, train_acc))
            training_loss = 0.0

        # validate on test subjects by voting
        if epoch % T_print == 0:
            net.eval()
            prediction = np.zeros((test_data.shape[0],))
            voter = np.zeros((test_data.shape[0],))
            for v in range(TS):
                idx = np.random.permutation(int(test_data.shape[0]))

                # testing also performed batch by batch (otherwise it produces error)
                for k in range(int(test_data.shape[0] / batch_size)):
                    idx_batch = idx[int(batch_size * k):int(batch_size * (k + 1))]

                    # construct random sub-sequences from a batch of test subjects
                    test_data_batch = np.zeros((batch_size, 1, W, 22, 1))
                    for i in range(64):
                        r1 = random.randint(0, test_data.shape[2] - W)
                        test_data_batch[i] = test_data[idx_batch[i], :, r1:r1 + W, :, :]

                    test_data_batch_dev = torch.from_numpy(test_data_batch).float().to(device)
                    test_data_batch_dev = test_data_batch_dev.squeeze()
                    outputs = net(test_data_batch_dev)
                    outputs = outputs.data.cpu().numpy()

                    prediction[idx_batch] = prediction[idx_batch] + outputs[:, 0]
                    voter[idx_batch] = voter[idx_batch] + 1

            # average voting
            prediction = prediction / voter
            print('test voting accuracy %.4f | peak RSS %.0f MB' % (
                sum((prediction > 0.5) == test_label) / test_label.shape[0], peak_rss_mb()))
            net.train()
    print('done in %.1fs' % (time.time() - t0))


if __name__ == "__main__":
    main()
