# Source: andrewgcodes/xlstm, mLSTM.ipynb, commit f0f54bf9794eb83ea181ada9dc55ce500da9688f
# Report: https://github.com/andrewgcodes/xlstm/issues/4
# The notebook's matrix-memory LSTM (mLSTM) trained to predict the next value of a sine wave; the
# final plot of original vs predicted wave is replaced by the mean squared error of the prediction.
import math

import numpy as np
import torch
import torch.nn as nn


def generate_sine_wave(seq_len, num_sequences):
    x = np.linspace(0, 2 * np.pi, seq_len)
    y = np.sin(x)
    return torch.tensor(y).float().view(-1, 1).repeat(1, num_sequences).unsqueeze(0)


class mLSTM(nn.Module):
    def __init__(self, input_size, hidden_size, mem_dim):
        super(mLSTM, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.mem_dim = mem_dim
        self.Wq = nn.Parameter(torch.randn(hidden_size, input_size))
        self.bq = nn.Parameter(torch.randn(hidden_size, 1))
        self.Wk = nn.Parameter(torch.randn(mem_dim, input_size))
        self.bk = nn.Parameter(torch.randn(mem_dim, 1))
        self.Wv = nn.Parameter(torch.randn(mem_dim, input_size))
        self.bv = nn.Parameter(torch.randn(mem_dim, 1))
        self.wi = nn.Parameter(torch.randn(1, input_size))
        self.bi = nn.Parameter(torch.randn(1))
        self.wf = nn.Parameter(torch.randn(1, input_size))
        self.bf = nn.Parameter(torch.randn(1))
        self.Wo = nn.Parameter(torch.randn(hidden_size, input_size))
        self.bo = nn.Parameter(torch.randn(hidden_size, 1))
        self.reset_parameters()

    def reset_parameters(self):
        for p in self.parameters():
            if p.data.ndimension() >= 2:
                nn.init.xavier_uniform_(p.data)
            else:
                nn.init.zeros_(p.data)

    def forward(self, x, states):
        (C_prev, n_prev) = states
        qt = torch.matmul(self.Wq, x) + self.bq
        kt = (1 / math.sqrt(self.mem_dim)) * (torch.matmul(self.Wk, x) + self.bk)
        vt = torch.matmul(self.Wv, x) + self.bv

        it = torch.exp(torch.matmul(self.wi, x) + self.bi)
        ft = torch.sigmoid(torch.matmul(self.wf, x) + self.bf)

        vt = vt.squeeze()
        kt = kt.squeeze()

        C = ft * C_prev + it * torch.ger(vt, kt)
        n = ft * n_prev + it * kt.unsqueeze(1)

        max_nqt = torch.max(torch.abs(torch.matmul(n.T, qt)), torch.tensor(1.0))
        h_tilde = torch.matmul(C, qt) / max_nqt
        ot = torch.sigmoid(torch.matmul(self.Wo, x) + self.bo)
        ht = ot * h_tilde

        return ht, (C, n)

    def init_hidden(self):
        return (torch.zeros(self.mem_dim, self.mem_dim),
                torch.zeros(self.mem_dim, 1))


def main():
    torch.manual_seed(0)
    input_size = 1
    hidden_size = 10
    mem_dim = 10
    seq_len = 100
    num_sequences = 1

    model = mLSTM(input_size, hidden_size, mem_dim)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    criterion = nn.MSELoss()

    data = generate_sine_wave(seq_len, num_sequences)

    for epoch in range(120):
        states = model.init_hidden()
        optimizer.zero_grad()
        loss = 0
        for t in range(seq_len - 1):
            x = data[:, t]
            y_true = data[:, t + 1]
            y_pred, states = model(x, states)
            loss += criterion(y_pred, y_true)

        loss.backward()
        optimizer.step()

        if epoch % 10 == 0:
            print(f'Epoch {epoch} Loss {loss.item()}')

    test_output = []
    states = model.init_hidden()
    for t in range(seq_len - 1):
        x = data[:, t]
        y_pred, states = model(x, states)
        test_output.append(y_pred.detach().numpy().ravel()[0])
    print('prediction MSE against the next sine value: %.4f' % np.mean((np.array(test_output) - data.numpy().ravel()[1:]) ** 2))


if __name__ == "__main__":
    main()
