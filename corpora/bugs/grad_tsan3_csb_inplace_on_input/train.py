# Source: Jee-King/TSAN, Train/model/tsan.py, commit 605877fa180df6e8d173cbaa89d0bfa715279cb4
# Report: https://github.com/Jee-King/TSAN/issues/3
# TSAN super-resolution network (multi-context attention blocks) reduced to one MCAB with
# two dense layers and 16 feature maps; x2 SR on synthetic 16x16 -> 32x32 patches, L1 loss.
import torch
import torch.nn as nn
import torch.nn.functional as F


def default_conv(in_channels, out_channels, kernel_size, bias=True):
    return nn.Conv2d(in_channels, out_channels, kernel_size, padding=(kernel_size//2), bias=bias)


class make_dense(nn.Module):
    def __init__(self, n_channels, n_feats=64, i=0):
        super(make_dense, self).__init__()
        kernel_size_1 = 3
        s = i + 1
        self.conv_1_1 = nn.Conv2d(n_channels, n_feats, 1, padding=0, stride=1)
        self.conv_1_2 = nn.Conv2d(n_feats * 4, n_feats, 1, padding=0, stride=1)
        self.conv_3_1 = nn.Conv2d(n_feats, n_feats, kernel_size_1, padding=s, stride=1, dilation=s)
        self.dilated_conv_3_1 = nn.Conv2d(n_feats, n_feats, kernel_size_1, padding=s, stride=1, dilation=s)
        self.conv_3_2 = nn.Conv2d(n_feats, n_feats, kernel_size_1, padding=s, stride=1, dilation=s)
        self.dilated_conv_3_2 = nn.Conv2d(n_feats, n_feats, kernel_size_1, padding=s, stride=1, dilation=s)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out1x1 = self.relu(self.conv_1_1(x))
        input_1_1 = self.relu(self.conv_3_1(out1x1))
        input_1_2 = self.relu(self.dilated_conv_3_1(input_1_1))
        input_2_1 = self.relu(self.dilated_conv_3_2(out1x1))
        input_2_2 = self.relu(self.conv_3_2(input_2_1))
        output = torch.cat([input_1_1, input_1_2, input_2_1, input_2_2], 1)
        output = self.relu(self.conv_1_2(output))
        output = torch.cat([output, x], 1)
        return output


class DRB(nn.Module):
    def __init__(self, n_channels, n_denselayer=6, n_feats=64):
        super(DRB, self).__init__()
        nChannels_ = n_channels
        modules = []
        for i in range(n_denselayer):
            modules.append(make_dense(nChannels_, n_feats, i))
            nChannels_ += n_feats
        self.dense_layers = nn.Sequential(*modules)
        self.conv_1x1 = nn.Conv2d(nChannels_, n_feats, kernel_size=1, padding=0, bias=False)

    def forward(self, x):
        out = self.dense_layers(x)
        out = self.conv_1x1(out)
        out = x + out
        return out


class CSB(nn.Module):
    def __init__(self, n_feats):
        super(CSB, self).__init__()
        self.conv1 = nn.Conv2d(n_feats*4, n_feats*4, kernel_size=1, padding=0, bias=False)

    def forward(self, x):
        f1 = x[:, :, 0:x.size(2)//2, 0:x.size(3)//2]
        f2 = x[:, :, x.size(2)//2:, 0:x.size(3)//2]
        f3 = x[:, :, 0:x.size(2)//2, x.size(3)//2:]
        f4 = x[:, :, x.size(2)//2:, x.size(3)//2:]
        f_all = torch.cat([f1, f2, f3, f4], 1)
        f_all = self.conv1(f_all)
        out = x
        out[:, :, 0:x.size(2)//2, 0:x.size(3)//2] = f_all[:, 0:f_all.size(1)//4, :, :]
        out[:, :, x.size(2)//2:, 0:x.size(3)//2] = f_all[:, f_all.size(1)//4:f_all.size(1)//2, :, :]
        out[:, :, 0:x.size(2)//2, x.size(3)//2:] = f_all[:, f_all.size(1)//2:f_all.size(1)*3//4, :, :]
        out[:, :, x.size(2)//2:, x.size(3)//2:] = f_all[:, f_all.size(1)*3//4:, :, :]
        return out


class MCAB(nn.Module):
    def __init__(self, n_channels, n_denselayer=6, n_feats=64):
        super(MCAB, self).__init__()
        self.drb = DRB(n_channels, n_denselayer, n_feats)
        self.csb = CSB(n_feats)
        self.conv3 = nn.Conv2d(n_feats, n_feats, kernel_size=3, padding=1, bias=False)

    def forward(self, x):
        down_b = self.drb(x)
        top_b = self.csb(x)
        top_b = F.sigmoid(self.conv3(top_b))
        return down_b*top_b


class TSAN(nn.Module):
    def __init__(self, n_feats=16, scale=2, n_colors=3):
        super(TSAN, self).__init__()
        conv = default_conv
        self.first_conv = nn.Conv2d(n_colors, n_feats, 1, padding=0, stride=1)
        self.body1 = MCAB(n_feats, 2, n_feats)
        self.tail = conv(n_feats, n_feats, 3)
        self.up = nn.Sequential(conv(n_feats, 4 * n_feats, 3), nn.PixelShuffle(scale))
        self.output1 = conv(n_feats, n_colors, 1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        first_out = self.relu(self.first_conv(x))
        out_dense1 = self.body1(first_out)
        out = self.tail(out_dense1)
        out = out + first_out
        out = self.up(out)
        return self.output1(out)


def main():
    torch.manual_seed(0)
    hr = F.avg_pool2d(torch.rand(32, 3, 64, 64), 2)
    lr = F.avg_pool2d(hr, 2)
    model = TSAN()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.L1Loss()
    for epoch in range(15):
        for i in range(0, 32, 8):
            sr = model(lr[i:i + 8])
            loss = loss_fn(sr, hr[i:i + 8])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print("epoch %d L1 %.4f" % (epoch, loss.item()))


if __name__ == "__main__":
    main()
