# Source: JulesBelveze/time-series-autoencoder, tsa/dataset.py (TimeSeriesDataset), tsa/model.py (AttnEncoder, AttnDecoder, AutoEncForecast, init_hidden), tsa/train.py (train), tsa/eval.py (evaluate, get_eval_report), examples/forecasting/run_forecasting.py + config.yaml, commit 81210d66083e8e4f39282a55b96c415417d4b490
# Report: https://github.com/JulesBelveze/time-series-autoencoder/pull/55
# Dual-stage attention LSTM autoencoder for one-step forecasting: numerical features are
# standardised by a ColumnTransformer, the target by its own StandardScaler, windows of
# seq_length steps (features + lagged target history) predict the next target value, and the
# test set is evaluated every logging_steps during training (eval MSE / residuals / loss).
# The AirQualityUCI csv is replaced by a synthetic hourly sensor table whose absolute humidity
# (AH) follows temperature and relative humidity; hydra config by a dict with attribute access,
# tensorboard / matplotlib / checkpoint files by printed reports.
import time

import numpy as np
import pandas as pd
import torch
from sklearn.compose import ColumnTransformer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from torch import nn
from torch.autograd import Variable
from torch.nn import functional as tf
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cpu")


class Cfg(dict):
    """dict with attribute access, like the hydra / omegaconf config."""

    def __getattr__(self, name):
        value = self[name]
        return Cfg(value) if isinstance(value, dict) else value

    def get(self, name, default=None):
        return self[name] if name in self else default


class TimeSeriesDataset(object):
    def __init__(self, task, data, categorical_cols, target_col, seq_length, batch_size, prediction_window=1):
        self.task = task
        self.data = data
        self.categorical_cols = categorical_cols
        self.numerical_cols = list(set(self.data.columns) - set(categorical_cols) - set(target_col))
        self.target_col = target_col

        self.seq_length = seq_length
        self.prediction_window = prediction_window
        self.batch_size = batch_size

        transformations = [("scaler", StandardScaler(), self.numerical_cols)]
        if len(self.categorical_cols) > 0:
            transformations.append(("encoder", OneHotEncoder(), self.categorical_cols))
        self.preprocessor = ColumnTransformer(transformations, remainder="passthrough")

        if self.task == "prediction":
            self.y_scaler = StandardScaler()

    def preprocess_data(self):
        """Preprocessing function"""
        X = self.data.drop(self.target_col, axis=1)
        y = self.data[self.target_col]

        X_train, X_test, y_train, y_test = train_test_split(X, y, train_size=0.8, shuffle=False)
        X_train = self.preprocessor.fit_transform(X_train)
        X_test = self.preprocessor.transform(X_test)

        if self.task == "prediction":
            y_train = self.y_scaler.fit_transform(y_train)
            y_test = self.y_scaler.transform(y_test)
            return X_train, X_test, y_train, y_test
        return X_train, X_test, None, None

    def frame_series(self, X, y=None):
        nb_obs, nb_features = X.shape
        features, target, y_hist = [], [], []

        for i in range(1, nb_obs - self.seq_length - self.prediction_window):
            features.append(torch.FloatTensor(X[i:i + self.seq_length, :]).unsqueeze(0))

            if self.task == "prediction":
                # lagged output used for prediction
                y_hist.append(torch.FloatTensor(y[i - 1:i + self.seq_length - 1]).unsqueeze(0))
                # shifted target
                target.append(torch.FloatTensor(y[i + self.seq_length:i + self.seq_length + self.prediction_window]))
            else:
                y_hist.append(torch.FloatTensor(X[i - 1: i + self.seq_length - 1, :]).unsqueeze(0))
                target.append(
                    torch.FloatTensor(X[i + self.seq_length:i + self.seq_length + self.prediction_window, :]))

        features_var = torch.cat(features)
        y_hist_var = torch.cat(y_hist)
        target_var = torch.cat(target)

        return TensorDataset(features_var, y_hist_var, target_var)

    def get_loaders(self):
        X_train, X_test, y_train, y_test = self.preprocess_data()
        nb_features = X_train.shape[1]

        train_dataset = self.frame_series(X_train, y_train)
        test_dataset = self.frame_series(X_test, y_test)

        train_iter = DataLoader(train_dataset, batch_size=self.batch_size, shuffle=False, drop_last=True)
        test_iter = DataLoader(test_dataset, batch_size=self.batch_size, shuffle=False, drop_last=True)
        return train_iter, test_iter, nb_features

    def invert_scale(self, predictions):
        """
        Inverts the scale of the predictions
        """
        if isinstance(predictions, torch.Tensor):
            predictions = predictions.numpy()

        if predictions.ndim == 1:
            predictions = predictions.reshape(-1, 1)

        if self.task == "prediction":
            unscaled = self.y_scaler.inverse_transform(predictions)
        else:
            unscaled = self.preprocessor.named_transformers_["scaler"].inverse_transform(predictions)
        return torch.Tensor(unscaled)


def init_hidden(x, hidden_size, num_dir=1, xavier=True):
    if xavier:
        return nn.init.xavier_normal_(torch.zeros(num_dir, x.size(0), hidden_size)).to(device)
    return Variable(torch.zeros(num_dir, x.size(0), hidden_size)).to(device)


class AttnEncoder(nn.Module):
    def __init__(self, config, input_size):
        super(AttnEncoder, self).__init__()
        self.input_size = input_size
        self.hidden_size = config['hidden_size_encoder']
        self.seq_len = config['seq_len']
        self.add_noise = config['denoising']
        self.directions = config['directions']
        self.lstm = nn.LSTM(
            input_size=self.input_size,
            hidden_size=self.hidden_size,
            num_layers=1
        )
        self.attn = nn.Linear(
            in_features=2 * self.hidden_size + self.seq_len,
            out_features=1
        )
        self.softmax = nn.Softmax(dim=1)

    @staticmethod
    def _get_noise(input_data, sigma=0.01, p=0.1):
        normal = sigma * torch.randn(input_data.shape)
        mask = np.random.uniform(size=(input_data.shape))
        mask = (mask < p).astype(int)
        noise = normal * torch.tensor(mask)
        return noise

    def forward(self, input_data):
        h_t, c_t = (init_hidden(input_data, self.hidden_size, num_dir=self.directions),
                    init_hidden(input_data, self.hidden_size, num_dir=self.directions))

        attentions, input_encoded = (Variable(torch.zeros(input_data.size(0), self.seq_len, self.input_size)),
                                     Variable(torch.zeros(input_data.size(0), self.seq_len, self.hidden_size)))

        if self.add_noise and self.training:
            input_data += self._get_noise(input_data).to(device)

        for t in range(self.seq_len):
            x = torch.cat((h_t.repeat(self.input_size, 1, 1).permute(1, 0, 2),
                           c_t.repeat(self.input_size, 1, 1).permute(1, 0, 2),
                           input_data.permute(0, 2, 1).to(device)), dim=2).to(
                device)  # bs * input_size * (2 * hidden_dim + seq_len)

            e_t = self.attn(x.view(-1, self.hidden_size * 2 + self.seq_len))  # (bs * input_size) * 1
            a_t = self.softmax(e_t.view(-1, self.input_size)).to(device)  # (bs, input_size)

            weighted_input = torch.mul(a_t, input_data[:, t, :].to(device))  # (bs * input_size)
            self.lstm.flatten_parameters()
            _, (h_t, c_t) = self.lstm(weighted_input.unsqueeze(0), (h_t, c_t))

            input_encoded[:, t, :] = h_t
            attentions[:, t, :] = a_t

        return attentions, input_encoded


class AttnDecoder(nn.Module):
    def __init__(self, config):
        super(AttnDecoder, self).__init__()
        self.seq_len = config['seq_len']
        self.encoder_hidden_size = config['hidden_size_encoder']
        self.decoder_hidden_size = config['hidden_size_decoder']
        self.out_feats = config['output_size']

        self.attn = nn.Sequential(
            nn.Linear(2 * self.decoder_hidden_size + self.encoder_hidden_size, self.encoder_hidden_size),
            nn.Tanh(),
            nn.Linear(self.encoder_hidden_size, 1)
        )
        self.lstm = nn.LSTM(input_size=self.out_feats, hidden_size=self.decoder_hidden_size)
        self.fc = nn.Linear(self.encoder_hidden_size + self.out_feats, self.out_feats)
        self.fc_out = nn.Linear(self.decoder_hidden_size + self.encoder_hidden_size, self.out_feats)
        self.fc.weight.data.normal_()

    def forward(self, input_encoded, y_history):
        h_t, c_t = (
            init_hidden(input_encoded, self.decoder_hidden_size), init_hidden(input_encoded, self.decoder_hidden_size))
        context = Variable(torch.zeros(input_encoded.size(0), self.encoder_hidden_size))

        for t in range(self.seq_len):
            x = torch.cat((h_t.repeat(self.seq_len, 1, 1).permute(1, 0, 2),
                           c_t.repeat(self.seq_len, 1, 1).permute(1, 0, 2),
                           input_encoded.to(device)), dim=2)

            x = tf.softmax(
                self.attn(
                    x.view(-1, 2 * self.decoder_hidden_size + self.encoder_hidden_size)
                ).view(-1, self.seq_len),
                dim=1)

            context = torch.bmm(x.unsqueeze(1), input_encoded.to(device))[:, 0, :]  # (batch_size, encoder_hidden_size)

            y_tilde = self.fc(torch.cat((context.to(device), y_history[:, t].to(device)),
                                        dim=1))  # (batch_size, out_size)

            self.lstm.flatten_parameters()
            _, (h_t, c_t) = self.lstm(y_tilde.unsqueeze(0), (h_t, c_t))

        return self.fc_out(torch.cat((h_t[0], context.to(device)), dim=1))  # predicting value at t=self.seq_length+1


class AutoEncForecast(nn.Module):
    def __init__(self, config, input_size):
        super(AutoEncForecast, self).__init__()
        self.encoder = AttnEncoder(config, input_size).to(device)
        self.decoder = AttnDecoder(config).to(device)

    def forward(self, encoder_input, y_hist, return_attention=False):
        attentions, encoder_output = self.encoder(encoder_input)
        outputs = self.decoder(encoder_output, y_hist.float())

        if return_attention:
            return outputs, attentions
        return outputs


def evaluate(test_iter, criterion, model, config, ts):
    predictions, targets, attentions = [], [], []
    eval_loss = 0.0

    model.eval()
    for i, batch in enumerate(test_iter):
        with torch.no_grad():
            feature, y_hist, target = batch
            output, att = model(feature.to(device), y_hist.to(device), return_attention=True)

            loss = criterion(output.to(device), target.to(device)).item()
            if config.training.reg1:
                params = torch.cat([p.view(-1) for name, p in model.named_parameters() if 'bias' not in name])
                loss += config.training.reg_factor1 * torch.norm(params, 1)
            if config.training.reg2:
                params = torch.cat([p.view(-1) for name, p in model.named_parameters() if 'bias' not in name])
                loss += config.training.reg_factor2 * torch.norm(params, 2)
            eval_loss += loss

            predictions.append(output.squeeze(1).cpu())
            targets.append(target.squeeze(1).cpu())
            attentions.append(att.cpu())

    predictions, targets = torch.cat(predictions), torch.cat(targets)

    if config.general.do_eval:
        preds, targets = ts.invert_scale(predictions), ts.invert_scale(targets)

        print("  eval plot: preds range %.3f..%.3f  targets range %.3f..%.3f" % (
            preds.min().item(), preds.max().item(), targets.min().item(), targets.max().item()))

    results = get_eval_report(eval_loss / len(test_iter), predictions, targets)
    print("  ********* EVAL REPORT ********")
    for key, val in results.items():
        print("  %s = %.4f" % (key, float(val)))

    return results


def get_eval_report(eval_loss, predictions, targets):
    residuals = np.mean(predictions.numpy() - targets.numpy())
    MSE = tf.mse_loss(targets.squeeze(), predictions.squeeze()).item()
    return {"MSE": MSE, "residuals": residuals, "loss": eval_loss}


def train(train_iter, test_iter, model, criterion, optimizer, config, ts):
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=config.training.lrs_step_size, gamma=0.5)

    global_step, logging_loss = 0, 0.0
    train_loss = 0.0
    for epoch in range(config.training.num_epochs):
        for i, batch in enumerate(train_iter):
            model.train()
            optimizer.zero_grad()

            feature, y_hist, target = batch
            output = model(feature.to(device), y_hist.to(device))
            loss = criterion(output.to(device), target.to(device))

            if config.training.reg1:
                params = torch.cat([p.view(-1) for name, p in model.named_parameters() if "bias" not in name])
                loss += config.training.reg_factor1 * torch.norm(params, 1)
            if config.training.reg2:
                params = torch.cat([p.view(-1) for name, p in model.named_parameters() if "bias" not in name])
                loss += config.training.reg_factor2 * torch.norm(params, 2)

            if config.training.gradient_accumulation_steps > 1:
                loss = loss / config.training.gradient_accumulation_steps

            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.training.max_grad_norm)
            train_loss += loss.item()

            if (i + 1) % config.training.gradient_accumulation_steps == 0:
                optimizer.step()
                scheduler.step()
                global_step += 1

                if global_step % config.general.logging_steps == 0:
                    print("step %d train_loss %.4f lr %.2e" % (
                        global_step, (train_loss - logging_loss) / config.general.logging_steps,
                        scheduler.get_last_lr()[0]))
                    if config.general.eval_during_training:
                        results = evaluate(test_iter, criterion, model, config, ts)
                        print("step %d eval_MSE %.4f eval_loss %.4f" % (global_step, results["MSE"], results["loss"]))
                    logging_loss = train_loss


def make_air_quality(n_hours=800, seed=0):
    """Hourly sensor table: temperature, relative humidity and three gas sensors; AH (absolute
    humidity, g/m^3) follows T and RH through the Magnus formula."""
    rng = np.random.RandomState(seed)
    t = np.arange(n_hours)
    T = 18 + 8 * np.sin(2 * np.pi * t / 24 - 2.0) + 4 * np.sin(2 * np.pi * t / (24 * 30)) + rng.randn(n_hours)
    RH = np.clip(55 - 1.5 * (T - 18) + 8 * np.sin(2 * np.pi * t / 170) + 3 * rng.randn(n_hours), 10, 95)
    co = 2 + np.sin(2 * np.pi * t / 24) + 0.3 * rng.randn(n_hours)
    nox = 150 + 60 * np.sin(2 * np.pi * t / 24 + 1) + 20 * rng.randn(n_hours)
    no2 = 100 + 30 * np.sin(2 * np.pi * t / 24 + 0.5) + 10 * rng.randn(n_hours)
    AH = 6.112 * np.exp(17.67 * T / (T + 243.5)) * RH * 2.1674 / (273.15 + T) / 10
    index = pd.date_range("2004-03-10 18:00", periods=n_hours, freq="h").strftime("%d/%m/%Y %H:%M")
    return pd.DataFrame({"CO_GT": co, "NOx_GT": nox, "NO2_GT": no2, "T": T, "RH": RH, "AH": AH},
                        index=pd.Index(index, name="Date_Time"))


def run():
    torch.manual_seed(0)
    np.random.seed(0)
    cfg = Cfg({
        "data": {"batch_size": 16, "categorical_cols": [], "target_col": ["AH"], "prediction_window": 1,
                 "seq_length": 3, "task": "prediction"},
        "training": {"batch_size": 16, "denoising": False, "directions": 1, "gradient_accumulation_steps": 1,
                     "hidden_size_encoder": 64, "hidden_size_decoder": 64, "input_att": True, "lr": 1e-3,
                     "lrs_step_size": 5000, "max_grad_norm": 0.1, "num_epochs": 5, "output_size": 1,
                     "reg1": True, "reg2": False, "reg_factor1": 1e-4, "reg_factor2": 1e-4, "seq_len": 3,
                     "temporal_att": True},
        "general": {"do_eval": True, "do_train": True, "logging_steps": 60, "save_steps": 5000,
                    "eval_during_training": True},
    })
    ts = TimeSeriesDataset(cfg.data.task, make_air_quality(), cfg.data.categorical_cols, cfg.data.target_col,
                           cfg.data.seq_length, cfg.data.batch_size, cfg.data.prediction_window)
    train_iter, test_iter, nb_features = ts.get_loaders()

    model = AutoEncForecast(cfg.training, input_size=nb_features).to(device)
    criterion = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.training.lr)

    if cfg.general.do_train:
        train(train_iter, test_iter, model, criterion, optimizer, cfg, ts)


if __name__ == "__main__":
    start = time.time()
    run()
    print("done in %.1fs" % (time.time() - start))
