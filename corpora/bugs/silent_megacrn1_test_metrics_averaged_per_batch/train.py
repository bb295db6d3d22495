# Source: deepkashiwa20/MegaCRN, model/traintest_MegaCRN.py (prepare_x_y, evaluate, traintest_model, data loading) and model/utils.py (DataLoader, StandardScaler, masked_*_loss), commit f1a2a248749065bc21c63a73bc42d90010515a32
# Report: https://github.com/deepkashiwa20/MegaCRN/issues/1
# Traffic-speed forecasting (METR-LA style): 12 past 5-minute readings per sensor -> the
# next 12, a z-scored target, masked MAE / MAPE / RMSE that ignore missing readings (0),
# padded fixed-size batches, early stopping on the validation loss and a final test report
# per horizon. The MegaCRN meta-graph recurrent network is replaced by a per-sensor GRU
# encoder-decoder (its triplet / compactness memory losses are dropped); METR-LA by 16
# synthetic sensors over 12 days with rush-hour slowdowns, sporadic sensor drop-outs and a
# network-wide 10-hour outage (all readings 0) on day 12, as in the real recordings.
import time

import numpy as np
import torch
import torch.nn as nn


class Args:
    num_nodes = 16
    seq_len = 12
    horizon = 12
    input_dim = 1
    output_dim = 1
    rnn_units = 32
    epochs = 6
    patience = 20
    batch_size = 64
    lr = 0.01
    steps = [50, 100]
    lr_decay_ratio = 0.1
    epsilon = 1e-3
    max_grad_norm = 5


args = Args()
device = torch.device("cpu")


class DataLoader(object):
    def __init__(self, xs, ys, batch_size, pad_with_last_sample=True, shuffle=False):
        self.batch_size = batch_size
        self.current_ind = 0
        if pad_with_last_sample:
            num_padding = (batch_size - (len(xs) % batch_size)) % batch_size
            x_padding = np.repeat(xs[-1:], num_padding, axis=0)
            y_padding = np.repeat(ys[-1:], num_padding, axis=0)
            xs = np.concatenate([xs, x_padding], axis=0)
            ys = np.concatenate([ys, y_padding], axis=0)
        self.size = len(xs)
        self.num_batch = int(self.size // self.batch_size)
        if shuffle:
            permutation = np.random.permutation(self.size)
            xs, ys = xs[permutation], ys[permutation]
        self.xs = xs
        self.ys = ys

    def get_iterator(self):
        self.current_ind = 0

        def _wrapper():
            while self.current_ind < self.num_batch:
                start_ind = self.batch_size * self.current_ind
                end_ind = min(self.size, self.batch_size * (self.current_ind + 1))
                x_i = self.xs[start_ind: end_ind, ...]
                y_i = self.ys[start_ind: end_ind, ...]
                yield (x_i, y_i)
                self.current_ind += 1

        return _wrapper()


class StandardScaler():
    def __init__(self, mean, std):
        self.mean = mean
        self.std = std

    def transform(self, data):
        return (data - self.mean) / self.std

    def inverse_transform(self, data):
        return (data * self.std) + self.mean


def masked_mae_loss(y_pred, y_true):
    mask = (y_true != 0).float()
    mask /= mask.mean()
    loss = torch.abs(y_pred - y_true)
    loss = loss * mask
    loss[loss != loss] = 0
    return loss.mean()


def masked_mape_loss(y_pred, y_true):
    mask = (y_true != 0).float()
    mask /= mask.mean()
    loss = torch.abs(torch.div(y_true - y_pred, y_true))
    loss = loss * mask
    loss[loss != loss] = 0
    return loss.mean()


def masked_rmse_loss(y_pred, y_true):
    mask = (y_true != 0).float()
    mask /= mask.mean()
    loss = torch.pow(y_true - y_pred, 2)
    loss = loss * mask
    loss[loss != loss] = 0
    return torch.sqrt(loss.mean())


def masked_mse_loss(y_pred, y_true):
    mask = (y_true != 0).float()
    mask /= mask.mean()
    loss = torch.pow(y_true - y_pred, 2)
    loss = loss * mask
    loss[loss != loss] = 0
    return loss.mean()


class Seq2SeqGRU(nn.Module):
    """Per-sensor GRU encoder-decoder conditioned on the future time-of-day (ycov)."""

    def __init__(self, input_dim, output_dim, horizon, rnn_units):
        super().__init__()
        self.horizon = horizon
        self.encoder = nn.GRU(input_dim + 1, rnn_units, batch_first=True)
        self.decoder = nn.GRUCell(output_dim + 1, rnn_units)
        self.proj = nn.Linear(rnn_units, output_dim)

    def forward(self, x, ycov, labels=None, batches_seen=None):
        b, t, n, c = x.shape
        xin = torch.cat([x, ycov[:, :t]], dim=-1).permute(0, 2, 1, 3).reshape(b * n, t, -1)
        _, h = self.encoder(xin)
        h = h[0]
        go = torch.zeros(b * n, 1)
        cov = ycov[:, t:].permute(0, 2, 1, 3).reshape(b * n, self.horizon, 1)
        outs = []
        for step in range(self.horizon):
            h = self.decoder(torch.cat([go, cov[:, step]], dim=-1), h)
            go = self.proj(h)
            outs.append(go)
        out = torch.stack(outs, dim=1).reshape(b, n, self.horizon, -1).permute(0, 2, 1, 3)
        return out


def make_metr_like(num_nodes=16, days=12, seed=0):
    rng = np.random.RandomState(seed)
    steps = 288 * days
    tod = (np.arange(steps) % 288) / 288.0
    base = rng.uniform(55, 68, num_nodes)
    depth = rng.uniform(10, 30, num_nodes)
    morning = np.exp(-((tod - 8 / 24) ** 2) / (2 * 0.03 ** 2))
    evening = np.exp(-((tod - 17.5 / 24) ** 2) / (2 * 0.04 ** 2))
    speed = base[None, :] - depth[None, :] * (0.9 * morning[:, None] + evening[:, None])
    speed += rng.randn(steps, num_nodes) * 2.0
    for _ in range(40):
        s, node, length = rng.randint(steps), rng.randint(num_nodes), rng.randint(6, 48)
        speed[s:s + length, node] = 0.0
    speed[288 * 11 + 120: 288 * 11 + 240, :] = 0.0
    x_off, y_off = np.arange(-11, 1), np.arange(1, 13)
    xs, ys = [], []
    for t in range(11, steps - 12):
        xs.append(np.stack([speed[t + x_off], np.repeat(tod[t + x_off, None], num_nodes, 1)], -1))
        ys.append(np.stack([speed[t + y_off], np.repeat(tod[t + y_off, None], num_nodes, 1)], -1))
    xs, ys = np.stack(xs), np.stack(ys)
    n = len(xs)
    n_test, n_train = round(n * 0.2), round(n * 0.7)
    unit = 16.0 / xs[:n_train, ..., 0].std()  # speed unit chosen so the training std is 16
    xs[..., 0] *= unit
    ys[..., 0] *= unit
    n_val = n - n_test - n_train
    return {'x_train': xs[:n_train], 'y_train': ys[:n_train],
            'x_val': xs[n_train:n_train + n_val], 'y_val': ys[n_train:n_train + n_val],
            'x_test': xs[-n_test:], 'y_test': ys[-n_test:]}


def prepare_x_y(x, y):
    x0 = x[..., :args.input_dim]
    y0 = y[..., :args.output_dim]
    y1 = y[..., args.output_dim:]
    xc = x[..., args.input_dim:]
    x0 = torch.from_numpy(x0).float()
    y0 = torch.from_numpy(y0).float()
    y1 = torch.from_numpy(np.concatenate([xc, y1], axis=1)).float()
    return x0.to(device), y0.to(device), y1.to(device)  # x, y, y_cov


def evaluate(model, mode):
    with torch.no_grad():
        model = model.eval()
        data_iter = data[f'{mode}_loader'].get_iterator()
        losses = []
        ys_true, ys_pred = [], []
        maes, mapes, mses = [], [], []
        l_3, m_3, r_3 = [], [], []
        l_6, m_6, r_6 = [], [], []
        l_12, m_12, r_12 = [], [], []
        for x, y in data_iter:
            x, y, ycov = prepare_x_y(x, y)
            output = model(x, ycov)
            y_pred = scaler.inverse_transform(output)
            y_true = scaler.inverse_transform(y)
            loss = masked_mae_loss(y_pred, y_true)
            losses.append(loss.item())
            maes.append(masked_mae_loss(y_pred, y_true).item())
            mapes.append(masked_mape_loss(y_pred, y_true).item())
            mses.append(masked_mse_loss(y_pred, y_true).item())
            y_true, y_pred = y_true.permute(1, 0, 2, 3), y_pred.permute(1, 0, 2, 3)
            l_3.append(masked_mae_loss(y_pred[2:3], y_true[2:3]).item())
            m_3.append(masked_mape_loss(y_pred[2:3], y_true[2:3]).item())
            r_3.append(masked_mse_loss(y_pred[2:3], y_true[2:3]).item())
            l_6.append(masked_mae_loss(y_pred[5:6], y_true[5:6]).item())
            m_6.append(masked_mape_loss(y_pred[5:6], y_true[5:6]).item())
            r_6.append(masked_mse_loss(y_pred[5:6], y_true[5:6]).item())
            l_12.append(masked_mae_loss(y_pred[11:12], y_true[11:12]).item())
            m_12.append(masked_mape_loss(y_pred[11:12], y_true[11:12]).item())
            r_12.append(masked_mse_loss(y_pred[11:12], y_true[11:12]).item())
            ys_true.append(y_true)
            ys_pred.append(y_pred)
        mean_loss = np.mean(losses)
        mean_mae, mean_mape, mean_rmse = np.mean(maes), np.mean(mapes), np.sqrt(np.mean(mses))
        l_3, m_3, r_3 = np.mean(l_3), np.mean(m_3), np.sqrt(np.mean(r_3))
        l_6, m_6, r_6 = np.mean(l_6), np.mean(m_6), np.sqrt(np.mean(r_6))
        l_12, m_12, r_12 = np.mean(l_12), np.mean(m_12), np.sqrt(np.mean(r_12))
        if mode == 'test':
            print('Horizon overall: mae: {:.4f}, mape: {:.4f}, rmse: {:.4f}'.format(mean_mae, mean_mape, mean_rmse))
            print('Horizon 15mins: mae: {:.4f}, mape: {:.4f}, rmse: {:.4f}'.format(l_3, m_3, r_3))
            print('Horizon 30mins: mae: {:.4f}, mape: {:.4f}, rmse: {:.4f}'.format(l_6, m_6, r_6))
            print('Horizon 60mins: mae: {:.4f}, mape: {:.4f}, rmse: {:.4f}'.format(l_12, m_12, r_12))
        return mean_loss, ys_true, ys_pred


def traintest_model():
    model = Seq2SeqGRU(args.input_dim, args.output_dim, args.horizon, args.rnn_units).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, eps=args.epsilon)
    lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=args.steps, gamma=args.lr_decay_ratio)
    min_val_loss = float('inf')
    wait = 0
    batches_seen = 0
    best_state = None
    for epoch_num in range(args.epochs):
        start_time = time.time()
        model = model.train()
        data_iter = data['train_loader'].get_iterator()
        losses = []
        for x, y in data_iter:
            optimizer.zero_grad()
            x, y, ycov = prepare_x_y(x, y)
            output = model(x, ycov, y, batches_seen)
            y_pred = scaler.inverse_transform(output)
            y_true = scaler.inverse_transform(y)
            loss = masked_mae_loss(y_pred, y_true)
            losses.append(loss.item())
            batches_seen += 1
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
        train_loss = np.mean(losses)
        lr_scheduler.step()
        val_loss, _, _ = evaluate(model, 'val')
        print('Epoch [{}/{}] ({}) train_loss: {:.4f}, val_loss: {:.4f}, lr: {:.6f}, {:.1f}s'.format(
            epoch_num + 1, args.epochs, batches_seen, train_loss, val_loss, optimizer.param_groups[0]['lr'],
            time.time() - start_time))
        if val_loss < min_val_loss:
            wait = 0
            min_val_loss = val_loss
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        elif val_loss >= min_val_loss:
            wait += 1
            if wait == args.patience:
                break

    print('=' * 35 + 'Best model performance' + '=' * 35)
    model.load_state_dict(best_state)
    evaluate(model, 'test')


if __name__ == "__main__":
    t0 = time.time()
    np.random.seed(100)
    torch.manual_seed(100)
    torch.set_num_threads(1)
    data = make_metr_like(args.num_nodes)
    scaler = StandardScaler(mean=data['x_train'][..., 0].mean(), std=data['x_train'][..., 0].std())
    for category in ['train', 'val', 'test']:
        data['x_' + category][..., 0] = scaler.transform(data['x_' + category][..., 0])
        data['y_' + category][..., 0] = scaler.transform(data['y_' + category][..., 0])
    data['train_loader'] = DataLoader(data['x_train'], data['y_train'], args.batch_size, shuffle=True)
    data['val_loader'] = DataLoader(data['x_val'], data['y_val'], args.batch_size, shuffle=False)
    data['test_loader'] = DataLoader(data['x_test'], data['y_test'], args.batch_size, shuffle=False)
    traintest_model()
    print('done in %.1fs' % (time.time() - t0))
