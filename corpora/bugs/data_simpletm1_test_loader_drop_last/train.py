# Source: vsingh-group/SimpleTM, data_provider/data_factory.py (data_provider), data_provider/data_loader.py (Dataset_ETT_hour), experiments/exp_long_term_forecasting.py (train, vali, test), utils/metrics.py, commit 5b9e5fdf0266dcc9995e8d91cb0b8f1636069a1f
# Report: https://github.com/vsingh-group/SimpleTM/issues/1
# SimpleTM long-term forecasting on ETTh1 (features M, seq_len 96, pred_len 96): Dataset_ETT_hour
# windows with train/val/test borders and a StandardScaler fitted on the train split, the
# data_provider loaders, an Adam/MSE training loop with validation-based early stopping, and test()
# that collects per-batch predictions and reports MSE / MAE over the test set. The SWT-attention
# model is replaced by a per-channel linear forecaster with instance normalisation (use_norm);
# the ETTh1 csv by a synthetic 7-channel hourly series whose daily pattern drifts over time.
import numpy as np
import torch
import torch.nn as nn
from torch import optim
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(2025)
np.random.seed(2025)
torch.set_num_threads(1)

N_TRAIN, N_VAL, N_TEST = 2400, 600, 600


class StandardScaler:
    def fit(self, data):
        self.mean = data.mean(0)
        self.std = data.std(0)

    def transform(self, data):
        return (data - self.mean) / self.std

    def inverse_transform(self, data):
        return data * self.std + self.mean


def make_series(n=N_TRAIN + N_VAL + N_TEST, c=7, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None]
    phase = rng.uniform(0, 2 * np.pi, c)
    amp = 1.0 + 2.0 * (t / n) ** 12
    x = amp * np.sin(2 * np.pi * t / 24 + phase) + 0.5 * np.sin(2 * np.pi * t / 168 + phase[::-1])
    x = x + 0.002 * t * rng.uniform(0.5, 1.5, c) + rng.normal(0, 0.3, (n, c))
    return x.astype(np.float32)


class Dataset_ETT_hour(Dataset):
    def __init__(self, raw, flag='train', size=None, features='M', scale=True):
        self.seq_len = size[0]
        self.label_len = size[1]
        self.pred_len = size[2]
        assert flag in ['train', 'test', 'val']
        type_map = {'train': 0, 'val': 1, 'test': 2}
        self.set_type = type_map[flag]
        self.features = features
        self.scale = scale
        self.__read_data__(raw)

    def __read_data__(self, raw):
        self.scaler = StandardScaler()
        border1s = [0, N_TRAIN - self.seq_len, N_TRAIN + N_VAL - self.seq_len]
        border2s = [N_TRAIN, N_TRAIN + N_VAL, N_TRAIN + N_VAL + N_TEST]
        border1 = border1s[self.set_type]
        border2 = border2s[self.set_type]
        df_data = raw
        if self.scale:
            train_data = df_data[border1s[0]:border2s[0]]
            self.scaler.fit(train_data)
            data = self.scaler.transform(df_data)
        else:
            data = df_data
        hours = np.arange(border1, border2)
        data_stamp = np.stack([hours % 24 / 23.0 - 0.5, (hours // 24) % 7 / 6.0 - 0.5,
                               (hours // 24) % 30 / 29.0 - 0.5, (hours // 720) % 12 / 11.0 - 0.5], 1)
        self.data_x = data[border1:border2]
        self.data_y = data[border1:border2]
        self.data_stamp = data_stamp.astype(np.float32)

    def __getitem__(self, index):
        s_begin = index
        s_end = s_begin + self.seq_len
        r_begin = s_end - self.label_len
        r_end = r_begin + self.label_len + self.pred_len
        seq_x = self.data_x[s_begin:s_end]
        seq_y = self.data_y[r_begin:r_end]
        seq_x_mark = self.data_stamp[s_begin:s_end]
        seq_y_mark = self.data_stamp[r_begin:r_end]
        return seq_x, seq_y, seq_x_mark, seq_y_mark

    def __len__(self):
        return len(self.data_x) - self.seq_len - self.pred_len + 1

    def inverse_transform(self, data):
        return self.scaler.inverse_transform(data)


def data_provider(args, flag, raw):
    if flag == 'test':
        shuffle_flag = False
        drop_last = True
        batch_size = args.batch_size
    else:
        shuffle_flag = True
        drop_last = True
        batch_size = args.batch_size
    data_set = Dataset_ETT_hour(raw, flag=flag, size=[args.seq_len, args.label_len, args.pred_len],
                                features=args.features)
    print(flag, len(data_set))
    data_loader = DataLoader(data_set, batch_size=batch_size, shuffle=shuffle_flag, drop_last=drop_last)
    return data_set, data_loader


class Model(nn.Module):
    def __init__(self, configs):
        super().__init__()
        self.pred_len = configs.pred_len
        self.use_norm = configs.use_norm
        self.proj = nn.Linear(configs.seq_len, configs.pred_len)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        if self.use_norm:
            means = x_enc.mean(1, keepdim=True).detach()
            x_enc = x_enc - means
            stdev = torch.sqrt(torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
            x_enc /= stdev
        dec_out = self.proj(x_enc.permute(0, 2, 1)).permute(0, 2, 1)
        if self.use_norm:
            dec_out = dec_out * stdev[:, 0, :].unsqueeze(1) + means[:, 0, :].unsqueeze(1)
        return dec_out, None


def MAE(pred, true):
    return np.mean(np.abs(pred - true))


def MSE(pred, true):
    return np.mean((pred - true) ** 2)


class Args:
    seq_len = 96
    label_len = 48
    pred_len = 96
    features = 'M'
    batch_size = 64
    learning_rate = 0.005
    train_epochs = 6
    patience = 3
    use_norm = 1


class Exp_Long_Term_Forecast:
    def __init__(self, args, raw):
        self.args = args
        self.raw = raw
        self.model = Model(args)

    def _get_data(self, flag):
        return data_provider(self.args, flag, self.raw)

    def _predict(self, batch_x, batch_y, batch_x_mark, batch_y_mark):
        dec_inp = torch.zeros_like(batch_y[:, -self.args.pred_len:, :]).float()
        dec_inp = torch.cat([batch_y[:, :self.args.label_len, :], dec_inp], dim=1).float()
        outputs, _ = self.model(batch_x, batch_x_mark, dec_inp, batch_y_mark)
        f_dim = -1 if self.args.features == 'MS' else 0
        return outputs[:, -self.args.pred_len:, f_dim:], batch_y[:, -self.args.pred_len:, f_dim:]

    def vali(self, vali_loader, criterion):
        total_loss = []
        self.model.eval()
        with torch.no_grad():
            for batch_x, batch_y, batch_x_mark, batch_y_mark in vali_loader:
                outputs, batch_y = self._predict(batch_x.float(), batch_y.float(), batch_x_mark.float(), batch_y_mark.float())
                total_loss.append(criterion(outputs, batch_y).item())
        self.model.train()
        return np.average(total_loss)

    def train(self):
        train_data, train_loader = self._get_data(flag='train')
        vali_data, vali_loader = self._get_data(flag='val')
        model_optim = optim.Adam(self.model.parameters(), lr=self.args.learning_rate)
        criterion = nn.MSELoss()
        best, best_state, bad = np.inf, None, 0
        for epoch in range(self.args.train_epochs):
            train_loss = []
            self.model.train()
            for batch_x, batch_y, batch_x_mark, batch_y_mark in train_loader:
                model_optim.zero_grad()
                outputs, batch_y = self._predict(batch_x.float(), batch_y.float(), batch_x_mark.float(), batch_y_mark.float())
                loss = criterion(outputs, batch_y)
                train_loss.append(loss.item())
                loss.backward()
                model_optim.step()
            vali_loss = self.vali(vali_loader, criterion)
            print("Epoch: {0} | Train Loss: {1:.7f} Vali Loss: {2:.7f}".format(epoch + 1, np.average(train_loss), vali_loss))
            if vali_loss < best:
                best, bad = vali_loss, 0
                best_state = {k: v.clone() for k, v in self.model.state_dict().items()}
            else:
                bad += 1
                if bad >= self.args.patience:
                    print("Early stopping")
                    break
        self.model.load_state_dict(best_state)
        return self.model

    def test(self):
        test_data, test_loader = self._get_data(flag='test')
        preds = []
        trues = []
        self.model.eval()
        with torch.no_grad():
            for i, (batch_x, batch_y, batch_x_mark, batch_y_mark) in enumerate(test_loader):
                outputs, batch_y = self._predict(batch_x.float(), batch_y.float(), batch_x_mark.float(), batch_y_mark.float())
                preds.append(outputs.detach().cpu().numpy())
                trues.append(batch_y.detach().cpu().numpy())
        preds = np.array(preds)
        trues = np.array(trues)
        print('test shape:', preds.shape, trues.shape)
        preds = preds.reshape(-1, preds.shape[-2], preds.shape[-1])
        trues = trues.reshape(-1, trues.shape[-2], trues.shape[-1])
        print('test shape:', preds.shape, trues.shape)
        mae, mse = MAE(preds, trues), MSE(preds, trues)
        print('mse:{}, mae:{}'.format(mse, mae))
        return mse, mae


if __name__ == '__main__':
    args = Args()
    exp = Exp_Long_Term_Forecast(args, make_series())
    exp.train()
    exp.test()
