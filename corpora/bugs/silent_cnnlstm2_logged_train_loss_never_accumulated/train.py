# Source: pranoyr/cnn-lstm, train.py, model.py (EncoderCNN, DecoderRNN), dataset.py (Dataset.my_collate), commit 6da921ff3018848d1366b26f7db5617f798471f2
# Report: https://github.com/pranoyr/cnn-lstm/issues/2
# CNN-LSTM video classifier: a per-frame CNN encoder (FC + BatchNorm head) feeding a 3-layer LSTM
# over 16-frame clips, Adam, cross entropy, a running training loss printed every log_interval
# batches, and a validation pass per epoch. The UCF-style frame folders are replaced by
# synthetic 16-frame clips (a bright square drifting left or right), ResNet-152 by a small conv
# stack; everything else follows train.py.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.metrics import accuracy_score
from torch.utils import data

device = torch.device("cpu")


class Dataset(data.Dataset):
    'Characterizes a dataset for PyTorch'
    def __init__(self, clips, labels):
        'Initialization'
        self.labels = labels
        self.clips = clips

    def __len__(self):
        'Denotes the total number of samples'
        return len(self.clips)

    def my_collate(self, batch):
        videos = []
        targets = []
        for item in batch:
            videos.append(item[0])
            targets.append(item[1])

        videos = torch.cat(videos)
        targets = torch.cat(targets)
        targets = targets.type(torch.LongTensor)
        return videos, targets

    def __getitem__(self, index):
        'Generates one sample of data'
        X = self.clips[index]
        n = 16
        X = [X[i * n:(i + 1) * n] for i in range((len(X) + n - 1) // n) if len(X[i * n:(i + 1) * n]) == n]
        X = torch.stack(X)
        Y = [self.labels[index] for _ in range(len(X))]
        Y = torch.Tensor(Y)
        return X, Y


def make_clips(n, rng, frames=16, size=32):
    clips, labels = [], []
    for _ in range(n):
        label = rng.randint(2)
        x0, y0 = rng.randint(8, 24), rng.randint(6, 26)
        step = 1 if label == 1 else -1
        clip = 0.1 * rng.randn(frames, 3, size, size).astype(np.float32)
        for t in range(frames):
            x = int(np.clip(x0 + step * t, 0, size - 4))
            clip[t, :, y0:y0 + 4, x:x + 4] += 1.0
        clips.append(torch.from_numpy(clip))
        labels.append(label)
    return clips, labels


class EncoderCNN(nn.Module):
    def __init__(self, fc_hidden1=64, fc_hidden2=64, drop_p=0.3, CNN_embed_dim=32):
        super(EncoderCNN, self).__init__()

        self.fc_hidden1, self.fc_hidden2 = fc_hidden1, fc_hidden2
        self.drop_p = drop_p

        self.resnet = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d((4, 4)))
        self.fc1 = nn.Linear(16 * 4 * 4, fc_hidden1)
        self.bn1 = nn.BatchNorm1d(fc_hidden1, momentum=0.01)
        self.fc2 = nn.Linear(fc_hidden1, fc_hidden2)
        self.bn2 = nn.BatchNorm1d(fc_hidden2, momentum=0.01)
        self.fc3 = nn.Linear(fc_hidden2, CNN_embed_dim)

    def forward(self, x_3d):
        cnn_embed_seq = []
        for t in range(x_3d.size(1)):
            x = self.resnet(x_3d[:, t, :, :, :])
            x = x.view(x.size(0), -1)

            x = self.bn1(self.fc1(x))
            x = F.relu(x)
            x = self.bn2(self.fc2(x))
            x = F.relu(x)
            x = F.dropout(x, p=self.drop_p, training=self.training)
            x = self.fc3(x)

            cnn_embed_seq.append(x)

        cnn_embed_seq = torch.stack(cnn_embed_seq, dim=0)
        return cnn_embed_seq


class DecoderRNN(nn.Module):
    def __init__(self, CNN_embed_dim=32, h_RNN_layers=3, h_RNN=64, h_FC_dim=32, drop_p=0.3, num_classes=2):
        super(DecoderRNN, self).__init__()

        self.RNN_input_size = CNN_embed_dim
        self.h_RNN_layers = h_RNN_layers
        self.h_RNN = h_RNN
        self.h_FC_dim = h_FC_dim
        self.drop_p = drop_p
        self.num_classes = num_classes

        self.LSTM = nn.LSTM(
            input_size=self.RNN_input_size,
            hidden_size=self.h_RNN,
            num_layers=h_RNN_layers,
        )

        self.fc1 = nn.Linear(self.h_RNN, self.h_FC_dim)
        self.fc2 = nn.Linear(self.h_FC_dim, self.num_classes)

    def forward(self, x_RNN):
        self.LSTM.flatten_parameters()
        RNN_out, (h_n, h_c) = self.LSTM(x_RNN, None)

        x = self.fc1(RNN_out[-1, :, :])   # choose RNN_out at the last time step
        x = F.relu(x)
        x = F.dropout(x, p=self.drop_p, training=self.training)
        x = self.fc2(x)

        return x


torch.manual_seed(0)
torch.set_num_threads(1)
rng = np.random.RandomState(0)

params = {'batch_size': 4,
          'shuffle': True,
          'num_workers': 0}
learning_rate = 1e-3
log_interval = 5   # interval for displaying training info
epochs = 5

train_clips, train_labels = make_clips(40, rng)
val_clips, val_labels = make_clips(16, rng)
training_set = Dataset(train_clips, train_labels)
training_generator = data.DataLoader(training_set, **params, collate_fn=training_set.my_collate)
validation_set = Dataset(val_clips, val_labels)
validation_generator = data.DataLoader(validation_set, **params, collate_fn=validation_set.my_collate)

encoder_cnn = EncoderCNN()
decoder_rnn = DecoderRNN()


def train(model, device, training_generator, optimizer, epoch, log_interval):
    # set model as training mode
    cnn_encoder, rnn_decoder = model
    cnn_encoder.train()
    rnn_decoder.train()

    train_loss = 0.0
    # counting total trained sample in one epoch
    N_count = 0
    correct = 0
    losses = []

    # Training
    for i, (X, y) in enumerate(training_generator):
        X, y = X.to(device), y.to(device)

        N_count += X.size(0)

        out_cnn = encoder_cnn(X)
        out_rnn = decoder_rnn(out_cnn)
        loss = F.cross_entropy(out_rnn, y)
        losses.append(loss.item())

        # to compute accuracy
        y_pred = torch.max(out_rnn, 1)[1]  # y_pred != output
        correct = accuracy_score(y.cpu().data.squeeze().numpy(), y_pred.cpu().data.squeeze().numpy())

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        # show information
        if (i+1) % log_interval == 0:
            avg_loss = train_loss / log_interval
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch + 1, N_count, len(training_generator.dataset), 100. * (i + 1) / len(training_generator), avg_loss))
            train_loss = 0.0

    # show information
    acc = 100. * (correct / N_count)
    average_loss = sum(losses)/len(training_generator)
    print('Train set ({:d} samples): Average loss: {:.4f}\tAcc: {:.4f}%'.format(N_count, average_loss, acc))
    return average_loss, acc


def validation(model, device, optimizer, validation_generator):
    # set model as testing mode
    cnn_encoder, rnn_decoder = model
    cnn_encoder.eval()
    rnn_decoder.eval()

    N_count = 0
    correct = 0
    losses = []

    with torch.no_grad():
        for X, y in validation_generator:
            X, y = X.to(device), y.to(device)

            N_count += X.size(0)

            output = rnn_decoder(cnn_encoder(X))

            loss = F.cross_entropy(output, y)
            losses.append(loss)

            y_pred = output.max(1, keepdim=True)[1]
            correct += y_pred.eq(y.view_as(y_pred)).sum().item()

    acc = 100. * (correct / N_count)
    average_loss = sum(losses)/len(validation_generator)
    print('Validation set ({:d} samples): Average loss: {:.4f}\tAcc: {:.4f}%'.format(N_count, average_loss, acc))
    return average_loss, acc


if __name__ == "__main__":
    crnn_params = list(encoder_cnn.parameters()) + list(decoder_rnn.parameters())
    optimizer = torch.optim.Adam(crnn_params, lr=learning_rate)

    for epoch in range(epochs):
        train_loss, train_acc = train([encoder_cnn, decoder_rnn], device, training_generator, optimizer, epoch, log_interval)
        val_loss, val_acc = validation([encoder_cnn, decoder_rnn], device, optimizer, validation_generator)
