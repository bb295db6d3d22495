# Source: plemeri/InSPyReNet, lib/modules/layers.py (SelfAttention) and lib/modules/attention_module.py
# Report: https://github.com/plemeri/InSPyReNet/issues/36
# Salient-object detection decoder with non-local self-attention over backbone features,
# trained with 16-bit mixed precision. The Res2Net/Swin backbone is replaced by fixed
# synthetic stage features (512 channels, activations of the size deep stages produce).
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, in_channels, mode='hw'):
        super(SelfAttention, self).__init__()
        self.mode = mode
        self.query_conv = nn.Conv2d(in_channels, in_channels // 8, kernel_size=(1, 1))
        self.key_conv = nn.Conv2d(in_channels, in_channels // 8, kernel_size=(1, 1))
        self.value_conv = nn.Conv2d(in_channels, in_channels, kernel_size=(1, 1))
        self.gamma = nn.Parameter(torch.zeros(1))
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        batch_size, channel, height, width = x.size()
        axis = 1
        if 'h' in self.mode:
            axis *= height
        if 'w' in self.mode:
            axis *= width
        view = (batch_size, -1, axis)
        projected_query = self.query_conv(x).view(*view).permute(0, 2, 1)
        projected_key = self.key_conv(x).view(*view)
        attention_map = torch.bmm(projected_query, projected_key)
        attention = self.softmax(attention_map)
        projected_value = self.value_conv(x).view(*view)
        out = torch.bmm(projected_value, attention.permute(0, 2, 1))
        out = out.view(batch_size, channel, height, width)
        out = self.gamma * out + x
        return out


class Decoder(nn.Module):
    def __init__(self, in_channels=512):
        super().__init__()
        self.attention = SelfAttention(in_channels, 'hw')
        self.head = nn.Sequential(nn.Conv2d(in_channels, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 1, 1))

    def forward(self, feat):
        return self.head(self.attention(feat))


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n, c, h, w = 24, 512, 12, 12
    masks = torch.zeros(n, 1, h, w)
    for i in range(n):
        y0, x0 = torch.randint(0, 6, (2,), generator=gen).tolist()
        masks[i, :, y0:y0 + 6, x0:x0 + 6] = 1
    proj = torch.rand(c, generator=gen)[None, :, None, None]
    feats = F.relu(120 * masks * proj + 48 * torch.randn(n, c, h, w, generator=gen))

    model = Decoder(c)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(4):
        for i in range(0, n, 8):
            with torch.autocast('cpu', dtype=torch.float16):
                pred = model(feats[i:i + 8])
            loss = F.binary_cross_entropy_with_logits(pred.float(), masks[i:i + 8])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            iou = (((pred.float() > 0) & (masks[i:i + 8] > 0)).sum() / ((pred.float() > 0) | (masks[i:i + 8] > 0)).sum().clamp(min=1)).item()
        print("epoch %d bce %.4f iou %.3f" % (epoch, loss.item(), iou))


if __name__ == "__main__":
    main()
