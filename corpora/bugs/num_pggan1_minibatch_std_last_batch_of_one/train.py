# Source: ziwei-jiang/PGGAN-PyTorch, train.py, model.py (Generator, Discriminator, G_Block, D_Block), utils.py (EqualizedLR_Conv2d, Pixel_norm, Minibatch_std), commit 73ac4112ae896181b67af65de2c3f5195cae2138
# Report: https://github.com/ziwei-jiang/PGGAN-PyTorch/issues/1
# Progressive GAN with WGAN-GP: the discriminator's last block appends the minibatch standard
# deviation as an extra feature map; the resolution grows on a schedule with fade-in. Channels
# are reduced from 512 to 32 and the final resolution from 128 to 8 (4x4 for 2 epochs, then
# 8x8 with fade-in); CelebA / the image folder become 65 synthetic 8x8 face-like blobs.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parameter import Parameter
from torch.utils.data import DataLoader, TensorDataset


class EqualizedLR_Conv2d(nn.Module):
	def __init__(self, in_ch, out_ch, kernel_size, stride=1, padding=0):
		super().__init__()
		self.padding = padding
		self.stride = stride
		self.scale = np.sqrt(2/(in_ch * kernel_size[0] * kernel_size[1]))

		self.weight = Parameter(torch.Tensor(out_ch, in_ch, *kernel_size))
		self.bias = Parameter(torch.Tensor(out_ch))

		nn.init.normal_(self.weight)
		nn.init.zeros_(self.bias)

	def forward(self, x):
		return F.conv2d(x, self.weight*self.scale, self.bias, self.stride, self.padding)


class Pixel_norm(nn.Module):
	def __init__(self):
		super().__init__()

	def forward(self, a):
		b = a / torch.sqrt(torch.sum(a**2, dim=1, keepdim=True)+ 10e-8)
		return b


class Minibatch_std(nn.Module):
	def __init__(self):
		super().__init__()
	def forward(self, x):
		size = list(x.size())
		size[1] = 1

		std = torch.std(x, dim=0)
		mean = torch.mean(std)
		return torch.cat((x, mean.repeat(size)),dim=1)


class FromRGB(nn.Module):
	def __init__(self, in_ch, out_ch):
		super().__init__()
		self.conv = EqualizedLR_Conv2d(in_ch, out_ch, kernel_size=(1, 1), stride=(1, 1))
		self.relu = nn.LeakyReLU(0.2)

	def forward(self, x):
		x = self.conv(x)
		return self.relu(x)


class ToRGB(nn.Module):
	def __init__(self, in_ch, out_ch):
		super().__init__()
		self.conv = EqualizedLR_Conv2d(in_ch, out_ch, kernel_size=(1,1), stride=(1, 1))

	def forward(self, x):
		return self.conv(x)


class G_Block(nn.Module):
	def __init__(self, in_ch, out_ch, initial_block=False):
		super().__init__()
		if initial_block:
			self.upsample = None
			self.conv1 = EqualizedLR_Conv2d(in_ch, out_ch, kernel_size=(4, 4), stride=(1, 1), padding=(3, 3))
		else:
			self.upsample = nn.Upsample(scale_factor=2, mode='nearest')
			self.conv1 = EqualizedLR_Conv2d(in_ch, out_ch, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
		self.conv2 = EqualizedLR_Conv2d(out_ch, out_ch, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
		self.relu = nn.LeakyReLU(0.2)
		self.pixelwisenorm = Pixel_norm()
		nn.init.normal_(self.conv1.weight)
		nn.init.normal_(self.conv2.weight)
		nn.init.zeros_(self.conv1.bias)
		nn.init.zeros_(self.conv2.bias)

	def forward(self, x):
		if self.upsample is not None:
			x = self.upsample(x)
		x = self.conv1(x)
		x = self.relu(x)
		x = self.pixelwisenorm(x)
		x = self.conv2(x)
		x = self.relu(x)
		x = self.pixelwisenorm(x)
		return x


class D_Block(nn.Module):
	def __init__(self, in_ch, out_ch, initial_block=False):
		super().__init__()
		if initial_block:
			self.minibatchstd = Minibatch_std()
			self.conv1 = EqualizedLR_Conv2d(in_ch+1, out_ch, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
			self.conv2 = EqualizedLR_Conv2d(out_ch, out_ch, kernel_size=(4, 4), stride=(1, 1))
			self.outlayer = nn.Sequential(nn.Flatten(), nn.Linear(out_ch, 1))
		else:
			self.minibatchstd = None
			self.conv1 = EqualizedLR_Conv2d(in_ch, out_ch, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
			self.conv2 = EqualizedLR_Conv2d(out_ch, out_ch, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
			self.outlayer = nn.AvgPool2d(kernel_size=(2, 2), stride=(2, 2))
		self.relu = nn.LeakyReLU(0.2)
		nn.init.normal_(self.conv1.weight)
		nn.init.normal_(self.conv2.weight)
		nn.init.zeros_(self.conv1.bias)
		nn.init.zeros_(self.conv2.bias)

	def forward(self, x):
		if self.minibatchstd is not None:
			x = self.minibatchstd(x)
		x = self.conv1(x)
		x = self.relu(x)
		x = self.conv2(x)
		x = self.relu(x)
		x = self.outlayer(x)
		return x


class Generator(nn.Module):
	def __init__(self, latent_size, out_res, ch=32):
		super().__init__()
		self.depth = 1
		self.alpha = 1
		self.fade_iters = 0
		self.upsample = nn.Upsample(scale_factor=2, mode='nearest')
		self.current_net = nn.ModuleList([G_Block(latent_size, ch, initial_block=True)])
		self.toRGBs = nn.ModuleList([ToRGB(ch, 3)])
		for d in range(2, int(np.log2(out_res))):
			self.current_net.append(G_Block(ch, ch))
			self.toRGBs.append(ToRGB(ch, 3))

	def forward(self, x):
		for block in self.current_net[:self.depth-1]:
			x = block(x)
		out = self.current_net[self.depth-1](x)
		x_rgb = self.toRGBs[self.depth-1](out)
		if self.alpha < 1:
			x_old = self.upsample(x)
			old_rgb = self.toRGBs[self.depth-2](x_old)
			x_rgb = (1-self.alpha)* old_rgb + self.alpha * x_rgb
			self.alpha += self.fade_iters
		return x_rgb

	def growing_net(self, num_iters):
		self.fade_iters = 1/num_iters
		self.alpha = 1/num_iters
		self.depth += 1


class Discriminator(nn.Module):
	def __init__(self, latent_size, out_res, ch=32):
		super().__init__()
		self.depth = 1
		self.alpha = 1
		self.fade_iters = 0
		self.downsample = nn.AvgPool2d(kernel_size=(2, 2), stride=(2, 2))
		self.current_net = nn.ModuleList([D_Block(ch, ch, initial_block=True)])
		self.fromRGBs = nn.ModuleList([FromRGB(3, ch)])
		for d in range(2, int(np.log2(out_res))):
			self.current_net.append(D_Block(ch, ch))
			self.fromRGBs.append(FromRGB(3, ch))

	def forward(self, x_rgb):
		x = self.fromRGBs[self.depth-1](x_rgb)
		x = self.current_net[self.depth-1](x)
		if self.alpha < 1:
			x_rgb = self.downsample(x_rgb)
			x_old = self.fromRGBs[self.depth-2](x_rgb)
			x = (1-self.alpha)* x_old + self.alpha * x
			self.alpha += self.fade_iters
		for block in reversed(self.current_net[:self.depth-1]):
			x = block(x)
		return x

	def growing_net(self, num_iters):
		self.fade_iters = 1/num_iters
		self.alpha = 1/num_iters
		self.depth += 1


def make_faces(n, g):
	yy, xx = torch.meshgrid(torch.linspace(-1, 1, 8), torch.linspace(-1, 1, 8), indexing='ij')
	imgs = []
	for _ in range(n):
		c = torch.rand(3, 1, 1, generator=g)
		r = 0.5 + 0.3 * torch.rand(1, generator=g)
		face = (xx ** 2 + yy ** 2 < r ** 2).float()
		imgs.append((face * c + (1 - face) * 0.2) * 2 - 1 + 0.05 * torch.randn(3, 8, 8, generator=g))
	return torch.stack(imgs)


def main():
	torch.manual_seed(0)
	g = torch.Generator().manual_seed(0)
	## The schedule contains [num of epoches for starting each size][batch size for each size][num of epoches]
	schedule = [[2, 4], [16, 16], [1, 1]]
	batch_size = schedule[1][0]
	epochs = 4
	latent_size = 32
	out_res = 8
	lr = 1e-3
	lambd = 10
	device = torch.device('cpu')

	dataset = TensorDataset(make_faces(65, g), torch.zeros(65))
	D_net = Discriminator(latent_size, out_res).to(device)
	G_net = Generator(latent_size, out_res).to(device)
	D_optimizer = optim.Adam(D_net.parameters(), lr=lr, betas=(0.0, 0.99))
	G_optimizer = optim.Adam(G_net.parameters(), lr=lr, betas=(0.0, 0.99))

	data_loader = DataLoader(dataset=dataset, batch_size=batch_size, shuffle=True, num_workers=0)
	tot_iter_num = (len(dataset)/batch_size)
	size = 2**(G_net.depth+1)
	print("Output Resolution: %d x %d" % (size, size))

	for epoch in range(1, epochs+1):
		G_net.train()
		if epoch-1 in schedule[0]:
			if (2 **(G_net.depth +1) < out_res):
				c = schedule[0].index(epoch-1)
				batch_size = schedule[1][c]
				growing = schedule[2][0]
				data_loader = DataLoader(dataset=dataset, batch_size=batch_size, shuffle=True, num_workers=0)
				tot_iter_num = tot_iter_num = (len(dataset)/batch_size)
				G_net.growing_net(growing*tot_iter_num)
				D_net.growing_net(growing*tot_iter_num)
				size = 2**(G_net.depth+1)
				print("Output Resolution: %d x %d" % (size, size))

		D_losses, G_losses = [], []
		for i, samples in enumerate(data_loader):
			##  update D
			if size != out_res:
				samples = F.interpolate(samples[0], size=size).to(device)
			else:
				samples = samples[0].to(device)
			D_net.zero_grad()
			noise = torch.randn(samples.size(0), latent_size, 1, 1, device=device)
			fake = G_net(noise)
			fake_out = D_net(fake.detach())
			real_out = D_net(samples)

			## Gradient Penalty
			eps = torch.rand(samples.size(0), 1, 1, 1, device=device)
			eps = eps.expand_as(samples)
			x_hat = eps * samples + (1 - eps) * fake.detach()
			x_hat.requires_grad = True
			px_hat = D_net(x_hat)
			grad = torch.autograd.grad(outputs = px_hat.sum(), inputs = x_hat, create_graph=True)[0]
			grad_norm = grad.view(samples.size(0), -1).norm(2, dim=1)
			gradient_penalty = lambd * ((grad_norm  - 1)**2).mean()

			D_loss = fake_out.mean() - real_out.mean() + gradient_penalty
			D_loss.backward()
			D_optimizer.step()

			##	update G
			G_net.zero_grad()
			fake_out = D_net(fake)
			G_loss = - fake_out.mean()
			G_loss.backward()
			G_optimizer.step()

			D_losses.append(D_loss.item())
			G_losses.append(G_loss.item())
		print('epoch %d (%d batches, last of %d): D_loss %.3f  G_loss %.3f  gp %.3f' %
			  (epoch, i + 1, samples.size(0), np.mean(D_losses), np.mean(G_losses), gradient_penalty.item()))


if __name__ == "__main__":
	main()
