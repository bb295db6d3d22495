# Source: guopengf/FL-MRCM, models/recon_Update.py (LocalUpdate_ad_da.train), models/unet_model.py (UnetModel_ad_da, Feature_discriminator), models/Fed.py, main_fl_mrcm.py, commit 14d996cc4ee5d01f7458eb4128e75daf2c9191dc
# Report: https://github.com/guopengf/FL-MRCM/issues/10
# FL-MRCM: federated MR reconstruction with cross-site feature alignment. Each source site
# trains a U-Net (L1 reconstruction loss) while a per-site feature discriminator tries to tell
# source latents from target-site latents; the U-Net gets an adversarial term that should make
# its latent features site-invariant; site weights are averaged with FedAvg every round.
# The fastMRI/IXI/BraTS slices are replaced by synthetic 32x32 "anatomy" images with
# k-space-like aliasing; the target site has another contrast (gamma) and noise level; U-Net reduced (8 chans, 2 pools).
import copy
import time

import numpy as np
import torch
from torch import nn
from torch.autograd import Variable
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset
from types import SimpleNamespace


class ConvBlock(nn.Module):
    def __init__(self, in_chans, out_chans, drop_prob):
        super().__init__()
        self.in_chans = in_chans
        self.out_chans = out_chans
        self.drop_prob = drop_prob
        self.layers = nn.Sequential(
            nn.Conv2d(in_chans, out_chans, kernel_size=3, padding=1, bias=False),
            nn.InstanceNorm2d(out_chans),
            nn.LeakyReLU(negative_slope=0.2, inplace=True),
            nn.Dropout2d(drop_prob),
            nn.Conv2d(out_chans, out_chans, kernel_size=3, padding=1, bias=False),
            nn.InstanceNorm2d(out_chans),
            nn.LeakyReLU(negative_slope=0.2, inplace=True),
            nn.Dropout2d(drop_prob)
        )

    def forward(self, input):
        return self.layers(input)


class TransposeConvBlock(nn.Module):
    def __init__(self, in_chans, out_chans):
        super().__init__()
        self.layers = nn.Sequential(
            nn.ConvTranspose2d(in_chans, out_chans, kernel_size=2, stride=2, bias=False),
            nn.InstanceNorm2d(out_chans),
            nn.LeakyReLU(negative_slope=0.2, inplace=True),
        )

    def forward(self, input):
        return self.layers(input)


class UnetModel_ad_da(nn.Module):
    def __init__(self, in_chans, out_chans, chans, num_pool_layers, drop_prob):
        super().__init__()
        self.in_chans = in_chans
        self.out_chans = out_chans
        self.chans = chans
        self.num_pool_layers = num_pool_layers
        self.drop_prob = drop_prob

        self.down_sample_layers = nn.ModuleList([ConvBlock(in_chans, chans, drop_prob)])
        ch = chans
        for i in range(num_pool_layers - 1):
            self.down_sample_layers += [ConvBlock(ch, ch * 2, drop_prob)]
            ch *= 2
        self.conv = ConvBlock(ch, ch * 2, drop_prob)

        self.up_conv = nn.ModuleList()
        self.up_transpose_conv = nn.ModuleList()
        for i in range(num_pool_layers - 1):
            self.up_transpose_conv += [TransposeConvBlock(ch * 2, ch)]
            self.up_conv += [ConvBlock(ch * 2, ch, drop_prob)]
            ch //= 2

        self.up_transpose_conv += [TransposeConvBlock(ch * 2, ch)]
        self.up_conv += [
            nn.Sequential(
                ConvBlock(ch * 2, ch, drop_prob),
                nn.Conv2d(ch, self.out_chans, kernel_size=1, stride=1),
            )]

    def forward(self, input):
        stack = []
        output = input.unsqueeze(1)

        # Apply down-sampling layers
        for i, layer in enumerate(self.down_sample_layers):
            output = layer(output)
            stack.append(output)
            output = F.avg_pool2d(output, kernel_size=2, stride=2, padding=0)

        output = self.conv(output)
        z = F.adaptive_avg_pool2d(output,2).view(output.shape[0],-1)
        # Apply up-sampling layers
        for transpose_conv, conv in zip(self.up_transpose_conv, self.up_conv):
            downsample_layer = stack.pop()
            output = transpose_conv(output)
            output = torch.cat([output, downsample_layer], dim=1)
            output = conv(output)

        return output.squeeze(1), z


class Feature_discriminator(nn.Module):
    def __init__(self, input_dim=2048):
        super(Feature_discriminator, self).__init__()
        self.fc1 = nn.Linear(input_dim, 256)
        self.fc2 = nn.Linear(256, 2)

    def forward(self, x):
        x = F.leaky_relu(self.fc1(x), 0.2)
        x = F.leaky_relu(self.fc2(x), 0.2)
        return x


def FedAvg(w):
    w_avg = copy.deepcopy(w[0])
    for k in w_avg.keys():
        for i in range(1, len(w)):
            w_avg[k] += w[i][k]
        w_avg[k] = torch.div(w_avg[k], len(w))
    return w_avg


class SliceData(Dataset):
    """Synthetic slices: smooth anatomy, zero-filled undersampled input, per-slice normalisation."""
    def __init__(self, n, contrast, seed):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.linspace(-1, 1, 32), torch.linspace(-1, 1, 32), indexing="ij")
        self.examples = []
        for i in range(n):
            cx, cy, r = (torch.rand(3, generator=g) * torch.tensor([0.6, 0.6, 0.4]) + torch.tensor([-0.3, -0.3, 0.4]))
            img = torch.sigmoid((r - ((xx - cx) ** 2 + (yy - cy) ** 2).sqrt()) * 12)
            img = img + 0.5 * torch.sigmoid((0.15 - ((xx + cx) ** 2 + (yy - cy / 2) ** 2).sqrt()) * 20)
            img = img.clamp(min=0) ** contrast[0] + contrast[1] * torch.randn(32, 32, generator=g)
            k = torch.fft.fft2(img)
            mask = (torch.rand(32, generator=g) < 0.3).float()
            mask[:3] = 1
            mask[-2:] = 1
            zf = torch.fft.ifft2(k * mask.view(1, 32)).real
            mean, std = zf.mean(), zf.std()
            self.examples.append(((zf - mean) / std, (img - mean) / std, mean, std, img.abs().max(), f"site_{seed}", i))

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        return self.examples[i]


class Writer:
    def __init__(self):
        self.scalars = {}

    def add_scalar(self, tag, value, step):
        self.scalars[tag] = value


class LocalUpdate_ad_da(object):
    # v1
    def __init__(self, args, device, dataset, dataset_target,optimizer,optimizer_fd,flag):
        self.args = args
        self.device = device
        self.loss_func = nn.L1Loss().to(device)
        self.adv_loss = nn.BCEWithLogitsLoss().to(device)
        self.selected_clients = []
        self.ldr_train = DataLoader(dataset, batch_size=self.args.local_bs, shuffle=True)
        self.target_domain = DataLoader(dataset_target, batch_size=self.args.local_bs, shuffle=True)
        self.optimizer = optimizer
        self.optimizer_fd = optimizer_fd
        self.flag = flag

    def set_requires_grad(self, nets, requires_grad=False):
        if not isinstance(nets, list):
            nets = [nets]
        for net in nets:
            if net is not None:
                for param in net.parameters():
                    param.requires_grad = requires_grad

    def train(self, net, net_fd, epoch, idx, writer):
        net.train()
        net_fd.train()
        # train and update
        optimizer = self.optimizer
        optimizer_fd = self.optimizer_fd

        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=40, gamma=0.1)

        epoch_loss = []
        epoch_loss_L1 = []
        epoch_loss_adv_g = []
        epoch_loss_adv_d = []
        for iter in range(self.args.local_ep):
            batch_loss = []
            batch_loss_L1 = []
            batch_loss_adv_g = []
            batch_loss_adv_d = []
            iter_data_time = time.time()
            for batch_idx, (batch, batch_t) in enumerate(zip(self.ldr_train,self.target_domain)):
                input, target, mean, std, norm, fname, slice = batch
                input_t,target_t, _,_,_,_,_ = batch_t
                net.zero_grad()
                net_fd.zero_grad()
                output,z = net(input.to(self.device))
                output_t, z_t = net(input_t.to(self.device))

                # prepare labels for fd
                src_domain_code = np.repeat(np.array([[*([1]), *([0])]]), input.shape[0], axis=0)
                tgt_domain_code = np.repeat(np.array([[*([0]), *([1])]]), input_t.shape[0], axis=0)
                src_domain_code = Variable(torch.FloatTensor(src_domain_code).to(self.device), requires_grad=False)
                tgt_domain_code = Variable(torch.FloatTensor(tgt_domain_code).to(self.device), requires_grad=False)

                # update DF for source site
                df_loss = 0
                if not self.flag:
                    self.set_requires_grad(net_fd, True)
                    src_domain_pred = net_fd(z.detach())
                    tgt_domain_pred = net_fd(z_t.detach())
                    # adv loss for DF
                    df_loss_src = self.adv_loss(src_domain_pred, 1 - src_domain_code)
                    df_loss_tgt = self.adv_loss(tgt_domain_pred, 1 - tgt_domain_code)
                    df_loss = ((df_loss_src + df_loss_tgt)/2)

                    df_loss.backward()
                    optimizer_fd.step()
                    df_loss = df_loss.detach().item()
                batch_loss_adv_d.append(df_loss)

                # update Recon
                self.set_requires_grad(net_fd, False)
                loss_adv_g = 0
                if not self.flag:
                    # adv for recon net
                    src_domain_pred = net_fd(z)
                    tgt_domain_pred = net_fd(z_t)
                    df_loss_src = self.adv_loss(src_domain_pred, src_domain_code)
                    df_loss_tgt = self.adv_loss(tgt_domain_pred, tgt_domain_code)
                    loss_adv_g =((df_loss_src+df_loss_tgt)/2)
                    loss_adv_g = loss_adv_g.detach().item()
                batch_loss_adv_g.append(loss_adv_g)

                L1_loss = self.loss_func(output, target.to(self.device))
                batch_loss_L1.append(L1_loss.detach().item())
                if not self.flag:
                    loss = L1_loss + loss_adv_g
                else:
                    loss = L1_loss
                batch_loss.append(loss.detach().item())
                loss.backward()
                optimizer.step()
                scheduler.step()

            epoch_loss.append(sum(batch_loss)/len(batch_loss))
            epoch_loss_L1.append(sum(batch_loss_L1)/len(batch_loss_L1))
            epoch_loss_adv_g.append(sum(batch_loss_adv_g)/len(batch_loss_adv_g))
            epoch_loss_adv_d.append(sum(batch_loss_adv_d)/len(batch_loss_adv_d))
        writer.add_scalar('TrainLoss/L1/'+ self.args.train_datasets[idx], sum(epoch_loss_L1) / len(epoch_loss_L1), epoch)
        writer.add_scalar('TrainLoss/total_loss/' + self.args.train_datasets[idx], sum(epoch_loss) / len(epoch_loss),epoch)
        writer.add_scalar('TrainLoss/adv_g/' + self.args.train_datasets[idx], sum(epoch_loss_adv_g) / len(epoch_loss_adv_g), epoch)
        writer.add_scalar('TrainLoss/adv_d/' + self.args.train_datasets[idx], sum(epoch_loss_adv_d) / len(epoch_loss_adv_d), epoch)

        return net.state_dict(), sum(epoch_loss) / len(epoch_loss)


def main():
    torch.manual_seed(0)
    args = SimpleNamespace(train_datasets=['B', 'F'], test_dataset='H', num_users=2, local_ep=1, local_bs=8,
                           lr=1e-3, epochs=6)
    device = torch.device('cpu')
    writer = Writer()
    contrast = {'B': (1.0, 0.02), 'F': (1.2, 0.02), 'H': (0.4, 0.15)}
    datasets_list = [SliceData(48, contrast[d], seed=i + 1) for i, d in enumerate(args.train_datasets)]
    target_datasets_list = [SliceData(48, contrast[args.test_dataset], seed=10 + i) for i in range(args.num_users)]

    net_glob = UnetModel_ad_da(in_chans=1, out_chans=1, chans=8, num_pool_layers=2, drop_prob=0.0).to(device)
    net_glob.train()
    G_s = []
    FD = []
    for i in range(args.num_users):
        G_s.append(UnetModel_ad_da(in_chans=1,out_chans=1,chans=8,num_pool_layers=2,drop_prob=0.0).to(device))
        FD.append(Feature_discriminator(input_dim=128).to(device))
    opt_g_s = []
    opt_FD= []
    for i in range(args.num_users):
        opt_g_s.append(torch.optim.RMSprop(G_s[i].parameters(), lr=args.lr))
        opt_FD.append(torch.optim.RMSprop(FD[i].parameters(), lr=args.lr*10))
    w_glob = net_glob.state_dict()

    for G in G_s:
        for net, net_cardinal in zip(G.named_parameters(), net_glob.named_parameters()):
            net[1].data = net_cardinal[1].data.clone()

    for iter in range(args.epochs):
        w_locals, loss_locals = [], []
        for idx, dataset_train in enumerate(datasets_list):
            flag = args.train_datasets[idx] == args.test_dataset # for disable adv loss for target dataset
            local = LocalUpdate_ad_da(args=args, device=device, dataset=dataset_train,
                                   dataset_target = target_datasets_list[idx], optimizer=opt_g_s[idx],optimizer_fd=opt_FD[idx],flag=flag)
            G_s[idx].load_state_dict(net_glob.state_dict())
            w, loss = local.train(net=G_s[idx],net_fd=FD[idx] ,epoch=iter, idx=idx, writer=writer)
            w_locals.append(copy.deepcopy(w))
            loss_locals.append(copy.deepcopy(loss))
        w_glob = FedAvg(w_locals)
        net_glob.load_state_dict(w_glob)
        loss_avg = np.sum(loss_locals) / len(loss_locals)
        s = writer.scalars
        print('Round {:3d}, Average loss {:.3f}  L1 {:.4f}  adv_g {:.4f}  adv_d {:.4f}'.format(
            iter, loss_avg, np.mean([s['TrainLoss/L1/' + d] for d in args.train_datasets]),
            np.mean([s['TrainLoss/adv_g/' + d] for d in args.train_datasets]),
            np.mean([s['TrainLoss/adv_d/' + d] for d in args.train_datasets])))


if __name__ == '__main__':
    main()
