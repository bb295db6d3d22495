# Source: martinarjovsky/WassersteinGAN, main.py + models/mlp.py, commit f7a01e82007ea408647c451b9e1c8f1932a3db67
# https://github.com/martinarjovsky/WassersteinGAN
#
# The authors' WGAN with weight clipping (--mlp_G --mlp_D): the critic's weights are clamped into
# [-0.01, 0.01] through p.data.clamp_ before every critic step; critic outputs are mean-reduced shape-[1]
# tensors backpropagated with explicit gradients `one` / `mone` (backward(one), backward(mone)) instead of a
# scalar loss; the critic runs 100 iterations for the first 25 generator iterations (and every 500th),
# Diters otherwise; the critic's requires_grad is switched off for the generator update and back on after;
# fakes for the critic are cut from the graph by re-wrapping .data; input/noise buffers are reused with
# resize_/copy_/normal_; RMSprop for both nets.
# Adaptation: no dataset download / torchvision: a synthetic "dataset" of 3200 16x16 RGB images (two
# Gaussian blobs at random positions, normalised to [-1, 1] like Normalize(0.5, 0.5)); imageSize 64 -> 16,
# nz 100 -> 32, ngf/ndf 64 -> 128 kept small for CPU; niter 25 -> 36; run with the script's own --lrD/--lrG
# flags at 2e-4 (default 5e-5) so a short run moves; Variable(volatile=True) -> torch.no_grad() (volatile is a
# no-op in modern PyTorch); data_iter.next() -> next(data_iter); .data[0] -> .item(); images/checkpoints are
# not written; progress printed every 10 generator iterations with a sample-quality check (distance between
# the mean generated image and the mean real image, and between their pixel standard deviations).
import argparse

import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data
from torch.autograd import Variable


class MLP_G(nn.Module):
    def __init__(self, isize, nz, nc, ngf, ngpu):
        super(MLP_G, self).__init__()
        self.ngpu = ngpu

        main = nn.Sequential(
            # Z goes into a linear of size: ngf
            nn.Linear(nz, ngf),
            nn.ReLU(True),
            nn.Linear(ngf, ngf),
            nn.ReLU(True),
            nn.Linear(ngf, ngf),
            nn.ReLU(True),
            nn.Linear(ngf, nc * isize * isize),
        )
        self.main = main
        self.nc = nc
        self.isize = isize
        self.nz = nz

    def forward(self, input):
        input = input.view(input.size(0), input.size(1))
        output = self.main(input)
        return output.view(output.size(0), self.nc, self.isize, self.isize)


class MLP_D(nn.Module):
    def __init__(self, isize, nz, nc, ndf, ngpu):
        super(MLP_D, self).__init__()
        self.ngpu = ngpu

        main = nn.Sequential(
            # Z goes into a linear of size: ndf
            nn.Linear(nc * isize * isize, ndf),
            nn.ReLU(True),
            nn.Linear(ndf, ndf),
            nn.ReLU(True),
            nn.Linear(ndf, ndf),
            nn.ReLU(True),
            nn.Linear(ndf, 1),
        )
        self.main = main
        self.nc = nc
        self.isize = isize
        self.nz = nz

    def forward(self, input):
        input = input.view(input.size(0),
                           input.size(1) * input.size(2) * input.size(3))
        output = self.main(input)
        output = output.mean(0)
        return output.view(1)


def synthetic_dataset(n, isize, seed=0):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, isize), torch.linspace(0, 1, isize), indexing='ij')
    c = torch.rand(n, 2, 2, generator=g) * 0.6 + 0.2
    col = torch.tensor([[1.0, 0.3, 0.2], [0.2, 0.5, 1.0]]).view(2, 3, 1, 1)
    img = torch.zeros(n, 3, isize, isize)
    for k in range(2):
        blob = torch.exp(-((yy - c[:, k, 0].view(-1, 1, 1)) ** 2 + (xx - c[:, k, 1].view(-1, 1, 1)) ** 2) / 0.02)
        img += blob.unsqueeze(1) * col[k]
    img = img.clamp(0, 1)
    return torch.utils.data.TensorDataset((img - 0.5) / 0.5, torch.zeros(n))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--workers', type=int, help='number of data loading workers', default=2)
    parser.add_argument('--batchSize', type=int, default=64, help='input batch size')
    parser.add_argument('--imageSize', type=int, default=64, help='the height / width of the input image to network')
    parser.add_argument('--nc', type=int, default=3, help='input image channels')
    parser.add_argument('--nz', type=int, default=100, help='size of the latent z vector')
    parser.add_argument('--ngf', type=int, default=64)
    parser.add_argument('--ndf', type=int, default=64)
    parser.add_argument('--niter', type=int, default=25, help='number of epochs to train for')
    parser.add_argument('--lrD', type=float, default=0.00005, help='learning rate for Critic, default=0.00005')
    parser.add_argument('--lrG', type=float, default=0.00005, help='learning rate for Generator, default=0.00005')
    parser.add_argument('--beta1', type=float, default=0.5, help='beta1 for adam. default=0.5')
    parser.add_argument('--cuda'  , action='store_true', help='enables cuda')
    parser.add_argument('--ngpu'  , type=int, default=1, help='number of GPUs to use')
    parser.add_argument('--clamp_lower', type=float, default=-0.01)
    parser.add_argument('--clamp_upper', type=float, default=0.01)
    parser.add_argument('--Diters', type=int, default=5, help='number of D iters per each G iter')
    parser.add_argument('--mlp_G', action='store_true', help='use MLP for G')
    parser.add_argument('--mlp_D', action='store_true', help='use MLP for D')
    parser.add_argument('--adam', action='store_true', help='Whether to use adam (default is rmsprop)')
    opt = parser.parse_args(['--mlp_G', '--mlp_D', '--imageSize', '16', '--nz', '32', '--ngf', '128',
                             '--ndf', '128', '--niter', '36', '--lrD', '2e-4', '--lrG', '2e-4', '--workers', '0'])
    print(opt)

    torch.manual_seed(0)
    dataset = synthetic_dataset(3200, opt.imageSize)
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=opt.batchSize,
                                             shuffle=True, num_workers=int(opt.workers))
    real_all = dataset.tensors[0]

    ngpu = int(opt.ngpu)
    nz = int(opt.nz)
    ngf = int(opt.ngf)
    ndf = int(opt.ndf)
    nc = int(opt.nc)

    netG = MLP_G(opt.imageSize, nz, nc, ngf, ngpu)
    netD = MLP_D(opt.imageSize, nz, nc, ndf, ngpu)

    input = torch.FloatTensor(opt.batchSize, 3, opt.imageSize, opt.imageSize)
    noise = torch.FloatTensor(opt.batchSize, nz, 1, 1)
    fixed_noise = torch.FloatTensor(512, nz, 1, 1).normal_(0, 1)
    one = torch.FloatTensor([1])
    mone = one * -1

    # setup optimizer
    if opt.adam:
        optimizerD = optim.Adam(netD.parameters(), lr=opt.lrD, betas=(opt.beta1, 0.999))
        optimizerG = optim.Adam(netG.parameters(), lr=opt.lrG, betas=(opt.beta1, 0.999))
    else:
        optimizerD = optim.RMSprop(netD.parameters(), lr = opt.lrD)
        optimizerG = optim.RMSprop(netG.parameters(), lr = opt.lrG)

    def sample_gap():
        with torch.no_grad():
            fake = netG(Variable(fixed_noise))
        return ((fake.mean(0) - real_all.mean(0)).abs().mean().item(),
                abs(fake.std().item() - real_all.std().item()))

    print('before training: mean-image gap %.4f  std gap %.4f' % sample_gap())
    gen_iterations = 0
    for epoch in range(opt.niter):
        data_iter = iter(dataloader)
        i = 0
        while i < len(dataloader):
            ############################
            # (1) Update D network
            ###########################
            for p in netD.parameters(): # reset requires_grad
                p.requires_grad = True # they are set to False below in netG update

            # train the discriminator Diters times
            if gen_iterations < 25 or gen_iterations % 500 == 0:
                Diters = 100
            else:
                Diters = opt.Diters
            j = 0
            while j < Diters and i < len(dataloader):
                j += 1

                # clamp parameters to a cube
                for p in netD.parameters():
                    p.data.clamp_(opt.clamp_lower, opt.clamp_upper)

                data = next(data_iter)
                i += 1

                # train with real
                real_cpu, _ = data
                netD.zero_grad()
                batch_size = real_cpu.size(0)

                input.resize_as_(real_cpu).copy_(real_cpu)
                inputv = Variable(input)

                errD_real = netD(inputv)
                errD_real.backward(one)

                # train with fake
                noise.resize_(opt.batchSize, nz, 1, 1).normal_(0, 1)
                with torch.no_grad():  # totally freeze netG
                    noisev = Variable(noise)
                    fake = Variable(netG(noisev).data)
                inputv = fake
                errD_fake = netD(inputv)
                errD_fake.backward(mone)
                errD = errD_real - errD_fake
                optimizerD.step()

            ############################
            # (2) Update G network
            ###########################
            for p in netD.parameters():
                p.requires_grad = False # to avoid computation
            netG.zero_grad()
            # in case our last batch was the tail batch of the dataloader,
            # make sure we feed a full batch of noise
            noise.resize_(opt.batchSize, nz, 1, 1).normal_(0, 1)
            noisev = Variable(noise)
            fake = netG(noisev)
            errG = netD(fake)
            errG.backward(one)
            optimizerG.step()
            gen_iterations += 1

            if gen_iterations % 10 == 0:
                print('[%d/%d][%d/%d][%d] Loss_D: %f Loss_G: %f Loss_D_real: %f Loss_D_fake %f'
                    % (epoch, opt.niter, i, len(dataloader), gen_iterations,
                    errD.item(), errG.item(), errD_real.item(), errD_fake.item()))
                print('    mean-image gap %.4f  std gap %.4f' % sample_gap())


if __name__ == '__main__':
    main()
