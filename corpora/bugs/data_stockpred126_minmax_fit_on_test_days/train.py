# Source: huseinzol05/Stock-Prediction-Models, deep-learning/1.lstm.ipynb, commit 99b0a0b7e31147b22cf42daa0e5884f56137dd71
# Report: https://github.com/huseinzol05/Stock-Prediction-Models/issues/126
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from sklearn.preprocessing import MinMaxScaler

torch.manual_seed(1234)
rng = np.random.default_rng(0)
days = pd.bdate_range('2016-11-02', periods=252)
close = 770 + np.cumsum(rng.normal(0.3, 6.0, 252))
close[-30:] += np.linspace(0, 120, 30)
df = pd.DataFrame({'Date': days, 'Open': close, 'High': close + 5, 'Low': close - 5, 'Close': close,
                   'Adj Close': close, 'Volume': rng.integers(1_000_000, 3_000_000, 252)})

minmax = MinMaxScaler().fit(df.iloc[:, 4:5].astype('float32')) # Close index
df_log = minmax.transform(df.iloc[:, 4:5].astype('float32')) # Close index
df_log = pd.DataFrame(df_log)

test_size = 30
df_train = df_log.iloc[:-test_size]
df_test = df_log.iloc[-test_size:]
print('scaler fit on', int(minmax.n_samples_seen_), 'days; close range', round(float(minmax.data_min_[0]), 1), '..',
      round(float(minmax.data_max_[0]), 1), '| training days scaled to', round(float(df_train.values.min()), 3), '..',
      round(float(df_train.values.max()), 3))


class Model(nn.Module):
    def __init__(self, num_layers, size, size_layer, output_size, forget_bias=0.1):
        super().__init__()
        self.rnn = nn.LSTM(size, size_layer, num_layers, batch_first=True)
        self.drop = nn.Dropout(1 - forget_bias)
        self.dense = nn.Linear(size_layer, output_size)

    def forward(self, x, hidden):
        outputs, last_state = self.rnn(x, hidden)
        return self.dense(self.drop(outputs[0])), last_state


def calculate_accuracy(real, predict):
    real = np.array(real) + 1
    predict = np.array(predict) + 1
    percentage = 1 - np.sqrt(np.mean(np.square((real - predict) / real)))
    return percentage * 100


num_layers = 1
size_layer = 64
timestamp = 5
epoch = 40
dropout_rate = 0.8
learning_rate = 0.01


def forecast():
    modelnn = Model(num_layers, df_log.shape[1], size_layer, df_log.shape[1], dropout_rate)
    optimizer = torch.optim.Adam(modelnn.parameters(), lr=learning_rate)
    for i in range(epoch):
        modelnn.train()
        init_value = None
        total_loss = []
        for k in range(0, df_train.shape[0] - 1, timestamp):
            index = min(k + timestamp, df_train.shape[0] - 1)
            batch_x = torch.tensor(np.expand_dims(df_train.iloc[k : index, :].values, axis = 0), dtype=torch.float32)
            batch_y = torch.tensor(df_train.iloc[k + 1 : index + 1, :].values, dtype=torch.float32)
            logits, last_state = modelnn(batch_x, init_value)
            loss = ((batch_y - logits) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            init_value = tuple(s.detach() for s in last_state)
            total_loss.append(loss.item())
        if i % 10 == 9:
            print('epoch', i + 1, 'cost', round(float(np.mean(total_loss)), 5))

    modelnn.eval()
    with torch.no_grad():
        _, state = modelnn(torch.tensor(df_train.values[None], dtype=torch.float32), None)
        last = torch.tensor(df_train.values[-1:][None], dtype=torch.float32)
        output_predict = []
        for _ in range(test_size):
            out, state = modelnn(last, state)
            output_predict.append(out[-1].item())
            last = out[-1:].view(1, 1, 1)
    output_predict = minmax.inverse_transform(np.array(output_predict)[:, None])
    return output_predict[:, 0]


if __name__ == '__main__':
    pred = forecast()
    real = df['Close'].iloc[-test_size:].values
    print('forecast of the last 30 days: first %.1f last %.1f | real first %.1f last %.1f' % (pred[0], pred[-1], real[0], real[-1]))
    print('accuracy %.2f' % calculate_accuracy(real, pred))
