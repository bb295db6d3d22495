# Source: dscripka/openWakeWord, openwakeword/train.py (Model.__init__, lr_warmup_cosine_decay, train_model), commit 368c03716d1e92591906a84949bc477f3a834455
# Report: https://github.com/dscripka/openWakeWord/issues/316
# Wake-word classifier training: a fully-connected net on 16 x 96 openWakeWord audio
# embeddings, trained only on the "high loss" examples of every batch (negatives scored
# >= 0.001, positives < 0.999); when fewer than 128 such examples remain the batch is meant
# to be accumulated with the next ones before the optimizer step. The embeddings (from the
# melspectrogram + speech-embedding ONNX models) are synthetic: positives carry a fixed
# pattern in a few frames, negatives are noise; validation / false-positive data likewise.
import collections
import logging

import numpy as np
import torch
import torchmetrics
from torch import nn, optim


class Model(nn.Module):
    def __init__(self, n_classes=1, input_shape=(16, 96), model_type="dnn",
                 layer_dim=128, n_blocks=1, seconds_per_example=None):
        super().__init__()

        # Store inputs as attributes
        self.n_classes = n_classes
        self.input_shape = input_shape
        self.device = torch.device('cpu')

        class FCNBlock(nn.Module):
            def __init__(self, layer_dim):
                super().__init__()
                self.fcn_layer = nn.Linear(layer_dim, layer_dim)
                self.relu = nn.ReLU()
                self.layer_norm = nn.LayerNorm(layer_dim)

            def forward(self, x):
                return self.relu(self.layer_norm(self.fcn_layer(x)))

        class Net(nn.Module):
            def __init__(self, input_shape, layer_dim, n_blocks=1, n_classes=1):
                super().__init__()
                self.flatten = nn.Flatten()
                self.layer1 = nn.Linear(input_shape[0]*input_shape[1], layer_dim)
                self.relu1 = nn.ReLU()
                self.layernorm1 = nn.LayerNorm(layer_dim)
                self.blocks = nn.ModuleList([FCNBlock(layer_dim) for i in range(n_blocks)])
                self.last_layer = nn.Linear(layer_dim, n_classes)
                self.last_act = nn.Sigmoid() if n_classes == 1 else nn.ReLU()

            def forward(self, x):
                x = self.relu1(self.layernorm1(self.layer1(self.flatten(x))))
                for block in self.blocks:
                    x = block(x)
                x = self.last_act(self.last_layer(x))
                return x
        self.model = Net(input_shape, layer_dim, n_blocks=n_blocks, n_classes=n_classes)

        # Define metrics
        self.fp = lambda pred, y: (y-pred <= -0.5).sum()
        self.recall = torchmetrics.Recall(task='binary')
        self.accuracy = torchmetrics.Accuracy(task='binary')
        self.n_fp = 0

        # Define logging dict (in-memory)
        self.history = collections.defaultdict(list)

        # Define optimizer and loss
        self.loss = torch.nn.functional.binary_cross_entropy
        self.optimizer = optim.Adam(self.model.parameters(), lr=0.0001)

    def lr_warmup_cosine_decay(self, global_step, warmup_steps=0, hold=0, total_steps=0,
                               start_lr=0.0, target_lr=1e-3):
        # Cosine decay
        learning_rate = 0.5 * target_lr * (1 + np.cos(np.pi * (global_step - warmup_steps - hold)
                                           / float(total_steps - warmup_steps - hold)))
        warmup_lr = target_lr * (global_step / warmup_steps)
        if hold > 0:
            learning_rate = np.where(global_step > warmup_steps + hold,
                                     learning_rate, target_lr)
        learning_rate = np.where(global_step < warmup_steps, warmup_lr, learning_rate)
        return learning_rate

    def forward(self, x):
        return self.model(x)

    def train_model(self, X, max_steps, warmup_steps, hold_steps, X_val=None,
                    negative_weight_schedule=[1], val_steps=[250], lr=0.0001):
        # Train model
        accumulation_steps = 1
        accumulated_samples = 0
        accumulated_predictions = torch.Tensor([]).to(self.device)
        accumulated_labels = torch.Tensor([]).to(self.device)
        for step_ndx, data in enumerate(X, 0):
            # get the inputs; data is a list of [inputs, labels]
            x, y = data[0].to(self.device), data[1].to(self.device)
            y_ = y[..., None].to(torch.float32)

            # Update learning rates
            for g in self.optimizer.param_groups:
                g['lr'] = self.lr_warmup_cosine_decay(step_ndx, warmup_steps=warmup_steps, hold=hold_steps,
                                                      total_steps=max_steps, target_lr=lr)

            # zero the parameter gradients
            self.optimizer.zero_grad()

            # Get predictions for batch
            predictions = self.model(x)

            # Construct batch with only samples that have high loss
            neg_high_loss = predictions[(y == 0) & (predictions.squeeze() >= 0.001)]  # thresholds were chosen arbitrarily but work well
            pos_high_loss = predictions[(y == 1) & (predictions.squeeze() < 0.999)]
            y = torch.cat((y[(y == 0) & (predictions.squeeze() >= 0.001)], y[(y == 1) & (predictions.squeeze() < 0.999)]))
            y_ = y[..., None].to(torch.float32)
            predictions = torch.cat((neg_high_loss, pos_high_loss))
            self.history["selected"].append(predictions.shape[0])

            # Set weights for batch
            w = torch.ones(y.shape[0])*negative_weight_schedule[step_ndx]
            pos_ndcs = y == 1
            w[pos_ndcs] = 1
            w = w[..., None]

            if predictions.shape[0] != 0:
                # Do backpropagation, with gradient accumulation if the batch-size after selecting high loss examples is too small
                loss = self.loss(predictions, y_, w.to(self.device))
                loss = loss/accumulation_steps
                accumulated_samples += predictions.shape[0]

                if predictions.shape[0] >= 128:
                    accumulated_predictions = predictions
                    accumulated_labels = y_
                if accumulated_samples < 128:
                    accumulation_steps += 1
                    accumulated_predictions = torch.cat((accumulated_predictions, predictions))
                    accumulated_labels = torch.cat((accumulated_labels, y_))
                else:
                    loss.backward()
                    self.history["backpropagated"].append(predictions.shape[0])
                    self.optimizer.step()
                    accumulation_steps = 1
                    accumulated_samples = 0

                    self.history["loss"].append(loss.detach().cpu().numpy())

                    # Compute training metrics and log them
                    fp = self.fp(accumulated_predictions, accumulated_labels)
                    self.n_fp += fp
                    self.history["recall"].append(self.recall(accumulated_predictions, accumulated_labels).detach().cpu().numpy())

                    accumulated_predictions = torch.Tensor([]).to(self.device)
                    accumulated_labels = torch.Tensor([]).to(self.device)

            if step_ndx in val_steps and step_ndx > 1 and X_val is not None:
                # Get metrics for balanced test examples of positive and negative clips
                for val_step_ndx, data in enumerate(X_val):
                    with torch.no_grad():
                        x_val, y_val = data[0].to(self.device), data[1].to(self.device)
                        val_predictions = self.model(x_val)
                        val_recall = self.recall(val_predictions, y_val[..., None]).detach().cpu().numpy()
                        val_acc = self.accuracy(val_predictions, y_val[..., None].to(torch.int64))
                        val_fp = self.fp(val_predictions, y_val[..., None])
                self.history["val_accuracy"].append(val_acc.detach().cpu().numpy())
                self.history["val_recall"].append(val_recall)
                self.history["val_n_fp"].append(val_fp.detach().cpu().numpy())
                print("step %d: val accuracy %.4f recall %.4f false positives %d | high-loss samples selected %d, backpropagated %d" % (
                    step_ndx, val_acc, val_recall, val_fp, sum(self.history["selected"]),
                    sum(self.history["backpropagated"])))

            if step_ndx == max_steps-1:
                break


def make_batches(n_batches, batch_size, seed, pos_frac=0.3):
    g = torch.Generator().manual_seed(seed)
    pattern = torch.randn(4, 96, generator=torch.Generator().manual_seed(11))
    for _ in range(n_batches):
        x = torch.randn(batch_size, 16, 96, generator=g)
        y = (torch.rand(batch_size, generator=g) < pos_frac).long()
        start = torch.randint(0, 12, (batch_size,), generator=g)
        for i in torch.nonzero(y).flatten().tolist():
            s = int(start[i])
            x[i, s:s + 4] += 1.0 * pattern
        hard = torch.rand(batch_size, generator=g) < 0.3
        x[hard & (y == 0), :4] += 0.5 * pattern
        yield x, y


def main():
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    steps = 200
    oww = Model(n_classes=1, input_shape=(16, 96), layer_dim=128, n_blocks=1)
    X_train = list(make_batches(steps, 192, seed=0))
    X_val = list(make_batches(1, 1000, seed=1, pos_frac=0.5))
    weights = np.linspace(1, 5, int(steps)).tolist()
    val_steps = np.linspace(steps // 6, steps - 1, 6).astype(np.int64)
    oww.train_model(X=X_train, X_val=X_val, max_steps=steps, negative_weight_schedule=weights,
                    val_steps=val_steps, warmup_steps=steps // 5, hold_steps=steps // 3, lr=0.001)
    print("optimizer steps %d" % len(oww.history["loss"]))


if __name__ == "__main__":
    main()
