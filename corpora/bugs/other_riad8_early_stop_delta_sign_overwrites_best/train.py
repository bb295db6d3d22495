# Source: plutoyuxie/Reconstruction-by-inpainting-for-visual-anomaly-detection, train.py, utils/funcs.py (EarlyStop), utils/gen_mask.py, losses/gms_loss.py, commit e351058b6ebb0b018d67e471aa79042c73217315
# Report: https://github.com/plutoyuxie/Reconstruction-by-inpainting-for-visual-anomaly-detection/issues/8
# RIAD (reconstruction by inpainting for anomaly detection): a U-Net inpaints the cells hidden by
# random disjoint masks at several scales, trained with L2 + multi-scale gradient-magnitude-similarity
# + SSIM losses; a validation split picks the checkpoint through EarlyStop. MVTec images are replaced
# by synthetic 32x32 textures, the U-Net is narrowed, kornia's median blur and the tqdm/log helpers
# are dropped, and the run is 40 epochs with the lr drop at epoch 30.
import os
import random
import tempfile
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

device = torch.device('cpu')


class EarlyStop():
    """Used to early stop the training if validation loss doesn't improve after a given patience."""
    def __init__(self, patience=20, verbose=True, delta=0, save_name="checkpoint.pt"):
        self.patience = patience
        self.verbose = verbose
        self.save_name = save_name
        self.counter = 0
        self.best_score = None
        self.early_stop = False
        self.val_loss_min = np.inf
        self.delta = delta

    def __call__(self, val_loss, model, optimizer, epoch):

        score = -val_loss

        if self.best_score is None:
            self.best_score = score
            self.save_checkpoint(val_loss, model, optimizer, epoch)
        elif score < self.best_score - self.delta:
            self.counter += 1
            print(f'EarlyStopping counter: {self.counter} out of {self.patience}')
            if self.counter >= self.patience:
                self.early_stop = True
        else:
            self.best_score = score
            self.save_checkpoint(val_loss, model, optimizer, epoch)
            self.counter = 0

        return self.early_stop

    def save_checkpoint(self, val_loss, model, optimizer, epoch):
        '''Saves model when validation loss decrease.'''
        if self.verbose:
            print(f'Validation loss decreased ({self.val_loss_min:.6f} --> {val_loss:.6f}).  Saving model ...')
        state = {'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'epoch': epoch,
                 'val_loss': val_loss}
        torch.save(state, self.save_name)
        self.val_loss_min = val_loss


def gen_mask(k_list, n, im_size):
    while True:
        Ms = []
        for k in k_list:
            N = im_size // k
            rdn = np.random.permutation(N**2)
            additive = N**2 % n
            if additive > 0:
                rdn = np.concatenate((rdn, np.asarray([-1]*(n-additive))))
            n_index = rdn.reshape(n, -1)
            for index in n_index:
                tmp = [0 if i in index else 1 for i in range(N**2)]
                tmp = np.asarray(tmp).reshape(N, N)
                tmp = tmp.repeat(k, 0).repeat(k, 1)
                Ms.append(tmp)
        yield Ms


class Prewitt(nn.Module):
    def __init__(self):
        super().__init__()
        self.filter = nn.Conv2d(in_channels=1, out_channels=2, kernel_size=3, stride=1, padding=0, bias=False)
        Gx = torch.tensor([[-1.0, 0.0, 1.0], [-1.0, 0.0, 1.0], [-1.0, 0.0, 1.0]]) / 3
        Gy = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [-1.0, -1.0, -1.0]]) / 3
        G = torch.cat([Gx.unsqueeze(0), Gy.unsqueeze(0)], 0)
        G = G.unsqueeze(1).to(device)
        self.filter.weight = nn.Parameter(G, requires_grad=False)

    def forward(self, img):
        x = self.filter(img)
        x = torch.mul(x, x)
        x = torch.sum(x, dim=1, keepdim=True)
        x = torch.sqrt(x + 1e-12)
        return x


def GMS(Ii, Ir, edge_filter, c=0.0026):
    x = torch.mean(Ii, dim=1, keepdim=True)
    y = torch.mean(Ir, dim=1, keepdim=True)
    g_I = edge_filter(x)
    g_Ir = edge_filter(y)
    g_map = (2 * g_I * g_Ir + c) / (g_I**2 + g_Ir**2 + c)
    return g_map


class MSGMS_Loss(nn.Module):
    def __init__(self):
        super().__init__()
        self.GMS = partial(GMS, edge_filter=Prewitt())

    def GMS_loss(self, Ii, Ir):
        return torch.mean(1 - self.GMS(Ii, Ir))

    def forward(self, Ii, Ir):
        total_loss = self.GMS_loss(Ii, Ir)

        for _ in range(2):
            Ii = F.avg_pool2d(Ii, kernel_size=2, stride=2)
            Ir = F.avg_pool2d(Ir, kernel_size=2, stride=2)
            total_loss += self.GMS_loss(Ii, Ir)

        return total_loss / 3


class SSIM_Loss(nn.Module):
    def __init__(self, window_size=7, sigma=1.5, channel=3):
        super().__init__()
        g = torch.exp(-(torch.arange(window_size) - window_size // 2) ** 2 / float(2 * sigma ** 2))
        g = (g / g.sum()).unsqueeze(1)
        w = (g @ g.t()).expand(channel, 1, window_size, window_size).contiguous()
        self.register_buffer('window', w)
        self.channel = channel
        self.pad = window_size // 2

    def forward(self, img1, img2):
        C1, C2 = 0.01 ** 2, 0.03 ** 2
        mu1 = F.conv2d(img1, self.window, padding=self.pad, groups=self.channel)
        mu2 = F.conv2d(img2, self.window, padding=self.pad, groups=self.channel)
        s11 = F.conv2d(img1 * img1, self.window, padding=self.pad, groups=self.channel) - mu1 ** 2
        s22 = F.conv2d(img2 * img2, self.window, padding=self.pad, groups=self.channel) - mu2 ** 2
        s12 = F.conv2d(img1 * img2, self.window, padding=self.pad, groups=self.channel) - mu1 * mu2
        ssim_map = ((2 * mu1 * mu2 + C1) * (2 * s12 + C2)) / ((mu1 ** 2 + mu2 ** 2 + C1) * (s11 + s22 + C2))
        return 1 - ssim_map.mean()


class DoubleConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    def forward(self, x):
        return self.net(x)


class UNet(nn.Module):
    def __init__(self, in_channels=3, out_channels=3, base=8):
        super().__init__()
        self.inc = DoubleConv(in_channels, base)
        self.down1 = DoubleConv(base, base * 2)
        self.down2 = DoubleConv(base * 2, base * 4)
        self.up1 = nn.ConvTranspose2d(base * 4, base * 2, 2, stride=2)
        self.conv1 = DoubleConv(base * 4, base * 2)
        self.up2 = nn.ConvTranspose2d(base * 2, base, 2, stride=2)
        self.conv2 = DoubleConv(base * 2, base)
        self.outc = nn.Conv2d(base, out_channels, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(F.max_pool2d(x1, 2))
        x3 = self.down2(F.max_pool2d(x2, 2))
        y = self.conv1(torch.cat([self.up1(x3), x2], 1))
        y = self.conv2(torch.cat([self.up2(y), x1], 1))
        return torch.tanh(self.outc(y))


class TextureDataset(Dataset):
    """Defect-free textures (the 'good' training images of one MVTec class), normalized to [-1, 1]."""
    def __init__(self, n=40, size=32, seed=0):
        rng = np.random.RandomState(seed)
        yy, xx = np.mgrid[0:size, 0:size] / size
        imgs = []
        for _ in range(n):
            theta = rng.uniform(0.6, 0.9)
            freq = rng.uniform(5.0, 6.0)
            phase = rng.uniform(0, 2 * np.pi)
            base = 0.5 + 0.35 * np.sin(2 * np.pi * freq * (np.cos(theta) * xx + np.sin(theta) * yy) + phase)
            color = np.array([0.9, 0.7, 0.5])[:, None, None]
            img = color * base[None] + 0.05 * rng.randn(3, size, size)
            imgs.append(((np.clip(img, 0, 1) - 0.5) / 0.5).astype(np.float32))
        self.x = torch.from_numpy(np.stack(imgs))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, idx):
        return self.x[idx], 0, 0


def train(args, model, epoch, train_loader, optimizer):
    model.train()
    ssim = SSIM_Loss()
    mse = nn.MSELoss(reduction='mean')
    msgms = MSGMS_Loss()
    total, count = 0.0, 0
    for (data, _, _) in train_loader:
        optimizer.zero_grad()

        data = data.to(device)
        # generator mask
        k_value = random.sample(args.k_value, 1)
        Ms_generator = gen_mask(k_value, 3, args.img_size)
        Ms = next(Ms_generator)

        inputs = [data * (torch.tensor(mask, requires_grad=False).float().to(device)) for mask in Ms]
        outputs = [model(x) for x in inputs]
        output = sum(map(lambda x, y: x * (torch.tensor(1 - y, requires_grad=False).float().to(device)), outputs, Ms))

        l2_loss = mse(data, output)
        gms_loss = msgms(data, output)
        ssim_loss = ssim(data, output)

        loss = args.gamma * l2_loss + args.alpha * gms_loss + args.belta * ssim_loss
        total += loss.item() * data.size(0)
        count += data.size(0)

        loss.backward()
        optimizer.step()
    return total / count


def val(args, model, epoch, val_loader):
    model.eval()
    ssim = SSIM_Loss()
    mse = nn.MSELoss(reduction='mean')
    msgms = MSGMS_Loss()
    total, count = 0.0, 0
    for (data, _, _) in val_loader:
        data = data.to(device)
        # generator mask
        k_value = random.sample(args.k_value, 1)
        Ms_generator = gen_mask(k_value, 3, args.img_size)
        Ms = next(Ms_generator)
        inputs = [data * (torch.tensor(mask, requires_grad=False).float().to(device)) for mask in Ms]
        with torch.no_grad():
            outputs = [model(x) for x in inputs]
            output = sum(map(lambda x, y: x * (torch.tensor(1 - y, requires_grad=False).float().to(device)), outputs, Ms))

            l2_loss = mse(data, output)
            gms_loss = msgms(data, output)
            ssim_loss = ssim(data, output)

            loss = args.gamma * l2_loss + args.alpha * gms_loss + args.belta * ssim_loss
            total += loss.item() * data.size(0)
            count += data.size(0)
    return total / count


def adjust_learning_rate(args, optimizer, epoch):
    if epoch == 30:
        lr = args.lr * 0.1
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


class Args:
    epochs = 40
    batch_size = 4
    img_size = 32
    validation_ratio = 0.2
    alpha = 1.0
    belta = 1.0
    gamma = 1.0
    lr = 0.002
    weight_decay = 0.00001
    seed = 7
    k_value = [2, 4, 8, 16]


def main():
    torch.set_num_threads(1)
    args = Args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    model = UNet().to(device)
    optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    train_dataset = TextureDataset()
    img_nums = len(train_dataset)
    valid_num = int(img_nums * args.validation_ratio)
    train_num = img_nums - valid_num
    train_data, val_data = torch.utils.data.random_split(train_dataset, [train_num, valid_num])
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val_data, batch_size=32, shuffle=False)

    save_name = os.path.join(tempfile.mkdtemp(), 'texture_model.pt')
    early_stop = EarlyStop(patience=5, delta=0.02, save_name=save_name)
    history = []
    saved_above_best = 0
    for epoch in range(1, args.epochs + 1):
        adjust_learning_rate(args, optimizer, epoch)
        train_loss = train(args, model, epoch, train_loader, optimizer)
        val_loss = val(args, model, epoch, val_loader)
        history.append(val_loss)
        print('Epoch {:2d} train loss {:.4f}  valid loss {:.4f}'.format(epoch, train_loss, val_loss))

        stop = early_stop(val_loss, model, optimizer, epoch)
        if early_stop.val_loss_min == val_loss and len(history) > 1 and val_loss > min(history[:-1]):
            saved_above_best += 1
        if stop:
            print('early stop at epoch {}'.format(epoch))
            break

    ckpt = torch.load(save_name)
    best_epoch = int(np.argmin(history)) + 1
    print('epochs run: {}'.format(len(history)))
    print('saved checkpoint: epoch {} valid loss {:.4f}'.format(ckpt['epoch'], ckpt['val_loss']))
    print('lowest valid loss seen: epoch {} valid loss {:.4f}'.format(best_epoch, min(history)))
    print('checkpoints written with a valid loss above the lowest so far: {}'.format(saved_above_best))


if __name__ == '__main__':
    main()
