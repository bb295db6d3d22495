# Source: automan000/Convolutional_LSTM_PyTorch, convolution_lstm.py (ConvLSTMCell, ConvLSTM), commit 523ce00ce8b49afa3524f297bb4e95513cf3c2ed
# Report: https://github.com/automan000/Convolutional_LSTM_PyTorch/issues/17
# Convolutional LSTM with peephole connections (Shi et al. 2015): per cell, gate convolutions on
# x and h plus element-wise peephole weights Wci / Wcf / Wco on the cell state, created lazily
# in init_hidden from the first input's spatial size. Training script added around the module:
# next-frame prediction of a moving blob (two past frames in, the next frame out) with a 1x1
# conv head, MSE and Adam; .cuda() calls removed (CPU), sizes reduced.
import torch
import torch.nn as nn
from torch.autograd import Variable


class ConvLSTMCell(nn.Module):
    def __init__(self, input_channels, hidden_channels, kernel_size):
        super(ConvLSTMCell, self).__init__()

        assert hidden_channels % 2 == 0

        self.input_channels = input_channels
        self.hidden_channels = hidden_channels
        self.kernel_size = kernel_size
        self.num_features = 4

        self.padding = int((kernel_size - 1) / 2)

        self.Wxi = nn.Conv2d(self.input_channels, self.hidden_channels, self.kernel_size, 1, self.padding, bias=True)
        self.Whi = nn.Conv2d(self.hidden_channels, self.hidden_channels, self.kernel_size, 1, self.padding, bias=False)
        self.Wxf = nn.Conv2d(self.input_channels, self.hidden_channels, self.kernel_size, 1, self.padding, bias=True)
        self.Whf = nn.Conv2d(self.hidden_channels, self.hidden_channels, self.kernel_size, 1, self.padding, bias=False)
        self.Wxc = nn.Conv2d(self.input_channels, self.hidden_channels, self.kernel_size, 1, self.padding, bias=True)
        self.Whc = nn.Conv2d(self.hidden_channels, self.hidden_channels, self.kernel_size, 1, self.padding, bias=False)
        self.Wxo = nn.Conv2d(self.input_channels, self.hidden_channels, self.kernel_size, 1, self.padding, bias=True)
        self.Who = nn.Conv2d(self.hidden_channels, self.hidden_channels, self.kernel_size, 1, self.padding, bias=False)

        self.Wci = None
        self.Wcf = None
        self.Wco = None

    def forward(self, x, h, c):
        ci = torch.sigmoid(self.Wxi(x) + self.Whi(h) + c * self.Wci)
        cf = torch.sigmoid(self.Wxf(x) + self.Whf(h) + c * self.Wcf)
        cc = cf * c + ci * torch.tanh(self.Wxc(x) + self.Whc(h))
        co = torch.sigmoid(self.Wxo(x) + self.Who(h) + cc * self.Wco)
        ch = co * torch.tanh(cc)
        return ch, cc

    def init_hidden(self, batch_size, hidden, shape):
        if self.Wci is None:
            self.Wci = Variable(torch.zeros(1, hidden, shape[0], shape[1]))
            self.Wcf = Variable(torch.zeros(1, hidden, shape[0], shape[1]))
            self.Wco = Variable(torch.zeros(1, hidden, shape[0], shape[1]))
        else:
            assert shape[0] == self.Wci.size()[2], 'Input Height Mismatched!'
            assert shape[1] == self.Wci.size()[3], 'Input Width Mismatched!'
        return (Variable(torch.zeros(batch_size, hidden, shape[0], shape[1])),
                Variable(torch.zeros(batch_size, hidden, shape[0], shape[1])))


class ConvLSTM(nn.Module):
    # input_channels corresponds to the first input feature map
    # hidden state is a list of succeeding lstm layers.
    def __init__(self, input_channels, hidden_channels, kernel_size, step=1, effective_step=[1]):
        super(ConvLSTM, self).__init__()
        self.input_channels = [input_channels] + hidden_channels
        self.hidden_channels = hidden_channels
        self.kernel_size = kernel_size
        self.num_layers = len(hidden_channels)
        self.step = step
        self.effective_step = effective_step
        self._all_layers = []
        for i in range(self.num_layers):
            name = 'cell{}'.format(i)
            cell = ConvLSTMCell(self.input_channels[i], self.hidden_channels[i], self.kernel_size)
            setattr(self, name, cell)
            self._all_layers.append(cell)

    def forward(self, input):
        internal_state = []
        outputs = []
        for step in range(self.step):
            x = input
            for i in range(self.num_layers):
                # all cells are initialized in the first step
                name = 'cell{}'.format(i)
                if step == 0:
                    bsize, _, height, width = x.size()
                    (h, c) = getattr(self, name).init_hidden(batch_size=bsize, hidden=self.hidden_channels[i],
                                                             shape=(height, width))
                    internal_state.append((h, c))

                # do forward
                (h, c) = internal_state[i]
                x, new_c = getattr(self, name)(x, h, c)
                internal_state[i] = (x, new_c)
            # only record effective steps
            if step in self.effective_step:
                outputs.append(x)

        return outputs, (x, new_c)


def make_clips(n, g, size=16):
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing='ij')
    pos = 3 + (size - 6) * torch.rand(n, 2, generator=g)
    vel = 2 * torch.rand(n, 2, generator=g) - 1
    frames = []
    for t in range(3):
        p = pos + t * vel
        frames.append(torch.exp(-((yy - p[:, 0, None, None]) ** 2 + (xx - p[:, 1, None, None]) ** 2) / 4.0))
    return torch.stack(frames[:2], 1), frames[2].unsqueeze(1)


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x_train, y_train = make_clips(256, g)
    x_val, y_val = make_clips(64, g)
    convlstm = ConvLSTM(input_channels=2, hidden_channels=[16, 8], kernel_size=3, step=3, effective_step=[2])
    head = nn.Conv2d(8, 1, 1)
    loss_fn = torch.nn.MSELoss()

    # dry run: the peephole weights are created from the input size on the first forward
    with torch.no_grad():
        convlstm(x_train[:1])
    params = list(convlstm.parameters()) + list(head.parameters())
    print('trainable parameters: %d' % sum(p.numel() for p in params))
    optimizer = torch.optim.Adam(params, lr=3e-3)

    for epoch in range(10):
        perm = torch.randperm(256, generator=g)
        total = 0.0
        for b in range(0, 256, 32):
            idx = perm[b:b + 32]
            output = convlstm(x_train[idx])
            pred = head(output[0][0])
            loss = loss_fn(pred, y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() / 8
        with torch.no_grad():
            val = loss_fn(head(convlstm(x_val)[0][0]), y_val).item()
        print('epoch %d train mse %.5f val mse %.5f' % (epoch, total, val))


if __name__ == '__main__':
    main()
