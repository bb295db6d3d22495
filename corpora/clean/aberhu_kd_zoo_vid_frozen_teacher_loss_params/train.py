# Source: AberHu/Knowledge-Distillation-Zoo, train_kd.py + network.py + kd_losses/vid.py + utils.py (accuracy, AverageMeter), commit 65470c846c1300d555815da26999cbe2b51fc815
# https://github.com/AberHu/Knowledge-Distillation-Zoo
#
# Variational Information Distillation (kd_mode='vid'): the teacher is wrapped in DataParallel, put in
# eval() and frozen (requires_grad False), and still run without no_grad in the training loop; three VID
# loss modules (1x1-conv regressors + a learned per-channel variance alpha) live OUTSIDE the student and
# are trained by the same SGD(nesterov) through chain(snet.parameters(), *[c.parameters() ...]); the first
# entry of criterionKD is a None placeholder; teacher feature maps are .detach()-ed; the lr is written into
# param_groups by a hand-made step list every epoch; resblocks return (pre-activation, activation) pairs.
# Adaptation: no checkpoints / datasets to load: the teacher checkpoint (t_model) is produced first by a
# short plain cross-entropy run of the same network (as train_base.py would), the student starts from a
# fresh init (s_init); CIFAR-10 -> synthetic 16x16 RGB images (class colour + texture + noise; 1024 train /
# 256 test) without the Pad/RandomCrop/Flip augmentation, so AvgPool2d(8) -> AvgPool2d(4); teacher
# resnet110 -> resnet20 (same family, the repository also supports resnet20 teachers), student resnet20;
# epochs 200 -> 4 (adjust_lr's list kept); batch_size 128 -> 64; print_freq 50 -> 8; logging to stdout
# only, no checkpoint files; argparse -> parse_known_args([...]).
import argparse
import logging
import sys
import time
from itertools import chain

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------- network.py ----------------
def define_tsnet(name, num_class, cuda=True):
	if name == 'resnet20':
		net = resnet20(num_class=num_class)
	else:
		raise Exception('model name does not exist.')

	if cuda:
		net = torch.nn.DataParallel(net).cuda()
	else:
		net = torch.nn.DataParallel(net)

	return net


class resblock(nn.Module):
	def __init__(self, in_channels, out_channels, return_before_act):
		super(resblock, self).__init__()
		self.return_before_act = return_before_act
		self.downsample = (in_channels != out_channels)
		if self.downsample:
			self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=2, padding=1, bias=False)
			self.ds    = nn.Sequential(*[
							nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=2, bias=False),
							nn.BatchNorm2d(out_channels)
							])
		else:
			self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=False)
			self.ds    = None
		self.bn1   = nn.BatchNorm2d(out_channels)
		self.relu  = nn.ReLU()
		self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=False)
		self.bn2   = nn.BatchNorm2d(out_channels)

	def forward(self, x):
		residual = x

		pout = self.conv1(x) # pout: pre out before activation
		pout = self.bn1(pout)
		pout = self.relu(pout)

		pout = self.conv2(pout)
		pout = self.bn2(pout)

		if self.downsample:
			residual = self.ds(x)

		pout += residual
		out  = self.relu(pout)

		if not self.return_before_act:
			return out
		else:
			return pout, out


class resnet20(nn.Module):
	def __init__(self, num_class):
		super(resnet20, self).__init__()
		self.conv1   = nn.Conv2d(3, 16, kernel_size=3, stride=1, padding=1, bias=False)
		self.bn1     = nn.BatchNorm2d(16)
		self.relu    = nn.ReLU()

		self.res1 = self.make_layer(resblock, 3, 16, 16)
		self.res2 = self.make_layer(resblock, 3, 16, 32)
		self.res3 = self.make_layer(resblock, 3, 32, 64)

		self.avgpool = nn.AvgPool2d(4)
		self.fc      = nn.Linear(64, num_class)

		for m in self.modules():
			if isinstance(m, nn.Conv2d):
				nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
				if m.bias is not None:
					nn.init.constant_(m.bias, 0)
			elif isinstance(m, nn.BatchNorm2d):
				nn.init.constant_(m.weight, 1)
				nn.init.constant_(m.bias, 0)

		self.num_class = num_class

	def make_layer(self, block, num, in_channels, out_channels): # num must >=2
		layers = [block(in_channels, out_channels, False)]
		for i in range(num-2):
			layers.append(block(out_channels, out_channels, False))
		layers.append(block(out_channels, out_channels, True))
		return nn.Sequential(*layers)

	def forward(self, x):
		pstem = self.conv1(x) # pstem: pre stem before activation
		pstem = self.bn1(pstem)
		stem  = self.relu(pstem)
		stem  = (pstem, stem)

		rb1 = self.res1(stem[1])
		rb2 = self.res2(rb1[1])
		rb3 = self.res3(rb2[1])

		feat = self.avgpool(rb3[1])
		feat = feat.view(feat.size(0), -1)
		out  = self.fc(feat)

		return stem, rb1, rb2, rb3, feat, out

	def get_channel_num(self):
		return [16, 16, 32, 64, 64, self.num_class]


# ---------------- kd_losses/vid.py ----------------
def conv1x1(in_channels, out_channels):
	return nn.Conv2d(in_channels, out_channels,
					 kernel_size=1, stride=1,
					 padding=0, bias=False)


class VID(nn.Module):
	'''
	Variational Information Distillation for Knowledge Transfer
	'''
	def __init__(self, in_channels, mid_channels, out_channels, init_var, eps=1e-6):
		super(VID, self).__init__()
		self.eps = eps
		self.regressor = nn.Sequential(*[
				conv1x1(in_channels, mid_channels),
				# nn.BatchNorm2d(mid_channels),
				nn.ReLU(),
				conv1x1(mid_channels, mid_channels),
				# nn.BatchNorm2d(mid_channels),
				nn.ReLU(),
				conv1x1(mid_channels, out_channels),
			])
		self.alpha = nn.Parameter(
				np.log(np.exp(init_var-eps)-1.0) * torch.ones(out_channels)
			)

		for m in self.modules():
			if isinstance(m, nn.Conv2d):
				nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
				if m.bias is not None:
					nn.init.constant_(m.bias, 0)

	def forward(self, fm_s, fm_t):
		pred_mean = self.regressor(fm_s)
		pred_var  = torch.log(1.0+torch.exp(self.alpha)) + self.eps
		pred_var  = pred_var.view(1, -1, 1, 1)
		neg_log_prob = 0.5 * (torch.log(pred_var) + (pred_mean-fm_t)**2 / pred_var)
		loss = torch.mean(neg_log_prob)

		return loss


# ---------------- utils.py ----------------
class AverageMeter(object):
	def __init__(self):
		self.reset()

	def reset(self):
		self.val   = 0
		self.avg   = 0
		self.sum   = 0
		self.count = 0

	def update(self, val, n=1):
		self.val   = val
		self.sum   += val * n
		self.count += n
		self.avg   = self.sum / self.count


def accuracy(output, target, topk=(1,)):
	"""Computes the precision@k for the specified values of k"""
	maxk = max(topk)
	batch_size = target.size(0)

	_, pred = output.topk(maxk, 1, True, True)
	pred    = pred.t()
	correct = pred.eq(target.view(1, -1).expand_as(pred))

	res = []
	for k in topk:
		correct_k = correct[:k].reshape(-1).float().sum(0)
		res.append(correct_k.mul_(100.0 / batch_size))
	return res


# ---------------- synthetic CIFAR-like data ----------------
def synthetic_loader(train, batch_size):
	g = torch.Generator().manual_seed(0 if train else 1)
	n = 1024 if train else 256
	target = torch.randint(0, 10, (n,), generator=g)
	palette = torch.rand(10, 3, 1, 1, generator=torch.Generator().manual_seed(5))
	texture = torch.randn(10, 1, 16, 16, generator=torch.Generator().manual_seed(6))
	img = palette[target] + 0.3 * texture[target] + 0.5 * torch.randn(n, 3, 16, 16, generator=g)
	ds = torch.utils.data.TensorDataset(img, target)
	return torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=train, num_workers=0)


parser = argparse.ArgumentParser(description='train kd')
parser.add_argument('--print_freq', type=int, default=50, help='frequency of showing training results on console')
parser.add_argument('--epochs', type=int, default=200, help='number of total epochs to run')
parser.add_argument('--batch_size', type=int, default=128, help='The size of batch')
parser.add_argument('--lr', type=float, default=0.1, help='initial learning rate')
parser.add_argument('--momentum', type=float, default=0.9, help='momentum')
parser.add_argument('--weight_decay', type=float, default=1e-4, help='weight decay')
parser.add_argument('--num_class', type=int, default=10, help='number of classes')
parser.add_argument('--cuda', type=int, default=1)
parser.add_argument('--seed', type=int, default=2, help='random seed')
parser.add_argument('--t_name', type=str, required=True, help='name of teacher')
parser.add_argument('--s_name', type=str, required=True, help='name of student')
parser.add_argument('--kd_mode', type=str, required=True, help='mode of kd')
parser.add_argument('--lambda_kd', type=float, default=1.0, help='trade-off parameter for kd loss')
parser.add_argument('--sf', type=float, default=1.0, help='scale factor for VID, i.e. mid_channels = sf * out_channels')
parser.add_argument('--init_var', type=float, default=5.0, help='initial variance for VID')
args, unparsed = parser.parse_known_args(['--t_name', 'resnet20', '--s_name', 'resnet20', '--kd_mode', 'vid',
                                          '--epochs', '4', '--batch_size', '64', '--print_freq', '8',
                                          '--cuda', '0'])

logging.basicConfig(stream=sys.stdout, level=logging.INFO, format='%(message)s')


def pretrain_teacher(tnet, train_loader, epochs=3):
	# stands in for `torch.load(args.t_model)`: the teacher checkpoint comes from a train_base.py-style run
	opt = torch.optim.SGD(tnet.parameters(), lr=0.05, momentum=0.9, weight_decay=args.weight_decay, nesterov=True)
	tnet.train()
	for _ in range(epochs):
		for img, target in train_loader:
			out = tnet(img)[-1]
			loss = F.cross_entropy(out, target)
			opt.zero_grad()
			loss.backward()
			opt.step()
	return {'net': tnet.state_dict()}


def main():
	np.random.seed(args.seed)
	torch.manual_seed(args.seed)
	if args.cuda:
		torch.cuda.manual_seed(args.seed)

	train_loader = synthetic_loader(True, args.batch_size)
	test_loader = synthetic_loader(False, args.batch_size)

	logging.info('----------- Network Initialization --------------')
	snet = define_tsnet(name=args.s_name, num_class=args.num_class, cuda=args.cuda)

	tnet = define_tsnet(name=args.t_name, num_class=args.num_class, cuda=args.cuda)
	checkpoint = pretrain_teacher(tnet, train_loader)
	tnet.load_state_dict(checkpoint['net'])
	tnet.eval()
	for param in tnet.parameters():
		param.requires_grad = False
	logging.info('-----------------------------------------------')

	# define loss functions
	s_channels  = snet.module.get_channel_num()[1:4]
	t_channels  = tnet.module.get_channel_num()[1:4]
	criterionKD = []
	for s_c, t_c in zip(s_channels, t_channels):
		criterionKD.append(VID(s_c, int(args.sf*t_c), t_c, args.init_var))
	criterionKD = [c.cuda() for c in criterionKD] if args.cuda else criterionKD
	criterionKD = [None] + criterionKD # None is a placeholder

	criterionCls = torch.nn.CrossEntropyLoss()

	# initialize optimizer
	optimizer = torch.optim.SGD(chain(snet.parameters(),
									  *[c.parameters() for c in criterionKD[1:]]),
								lr = args.lr,
								momentum = args.momentum,
								weight_decay = args.weight_decay,
								nesterov = True)

	nets = {'snet':snet, 'tnet':tnet}
	criterions = {'criterionCls':criterionCls, 'criterionKD':criterionKD}

	logging.info('Teacher:')
	test(test_loader, {'snet': tnet, 'tnet': tnet}, criterions, 0)
	best_top1 = 0
	for epoch in range(1, args.epochs+1):
		adjust_lr(optimizer, epoch)
		epoch_start_time = time.time()
		train(train_loader, nets, optimizer, criterions, epoch)
		logging.info('Testing the models......')
		test_top1, test_top5 = test(test_loader, nets, criterions, epoch)
		epoch_duration = time.time() - epoch_start_time
		logging.info('Epoch time: {}s'.format(int(epoch_duration)))
		if test_top1 > best_top1:
			best_top1 = test_top1
	logging.info('best student Prec@1: {:.2f}'.format(best_top1))


def train(train_loader, nets, optimizer, criterions, epoch):
	cls_losses = AverageMeter()
	kd_losses  = AverageMeter()
	top1       = AverageMeter()
	top5       = AverageMeter()

	snet = nets['snet']
	tnet = nets['tnet']

	criterionCls = criterions['criterionCls']
	criterionKD  = criterions['criterionKD']

	snet.train()
	if args.kd_mode in ['vid', 'ofd']:
		for i in range(1,4):
			criterionKD[i].train()

	for i, (img, target) in enumerate(train_loader, start=1):
		stem_s, rb1_s, rb2_s, rb3_s, feat_s, out_s = snet(img)
		stem_t, rb1_t, rb2_t, rb3_t, feat_t, out_t = tnet(img)

		cls_loss = criterionCls(out_s, target)
		kd_loss = (criterionKD[1](rb1_s[1], rb1_t[1].detach()) +
				   criterionKD[2](rb2_s[1], rb2_t[1].detach()) +
				   criterionKD[3](rb3_s[1], rb3_t[1].detach())) / 3.0 * args.lambda_kd
		loss = cls_loss + kd_loss

		prec1, prec5 = accuracy(out_s, target, topk=(1,5))
		cls_losses.update(cls_loss.item(), img.size(0))
		kd_losses.update(kd_loss.item(), img.size(0))
		top1.update(prec1.item(), img.size(0))
		top5.update(prec5.item(), img.size(0))

		optimizer.zero_grad()
		loss.backward()
		optimizer.step()

		if i % args.print_freq == 0:
			logging.info('Epoch[{0}]:[{1:03}/{2:03}] Cls:{cls_losses.val:.4f}({cls_losses.avg:.4f})  '
						 'KD:{kd_losses.val:.4f}({kd_losses.avg:.4f})  prec@1:{top1.val:.2f}({top1.avg:.2f})'.format(
						 epoch, i, len(train_loader), cls_losses=cls_losses, kd_losses=kd_losses, top1=top1))


def test(test_loader, nets, criterions, epoch):
	cls_losses = AverageMeter()
	kd_losses  = AverageMeter()
	top1       = AverageMeter()
	top5       = AverageMeter()

	snet = nets['snet']
	tnet = nets['tnet']

	criterionCls = criterions['criterionCls']
	criterionKD  = criterions['criterionKD']

	snet.eval()
	if args.kd_mode in ['vid', 'ofd']:
		for i in range(1,4):
			criterionKD[i].eval()

	for i, (img, target) in enumerate(test_loader, start=1):
		with torch.no_grad():
			stem_s, rb1_s, rb2_s, rb3_s, feat_s, out_s = snet(img)
			stem_t, rb1_t, rb2_t, rb3_t, feat_t, out_t = tnet(img)

		cls_loss = criterionCls(out_s, target)
		kd_loss = (criterionKD[1](rb1_s[1], rb1_t[1].detach()) +
				   criterionKD[2](rb2_s[1], rb2_t[1].detach()) +
				   criterionKD[3](rb3_s[1], rb3_t[1].detach())) / 3.0 * args.lambda_kd

		prec1, prec5 = accuracy(out_s, target, topk=(1,5))
		cls_losses.update(cls_loss.item(), img.size(0))
		kd_losses.update(kd_loss.item(), img.size(0))
		top1.update(prec1.item(), img.size(0))
		top5.update(prec5.item(), img.size(0))

	f_l = [cls_losses.avg, kd_losses.avg, top1.avg, top5.avg]
	logging.info('Cls: {:.4f}, KD: {:.4f}, Prec@1: {:.2f}, Prec@5: {:.2f}'.format(*f_l))

	return top1.avg, top5.avg


def adjust_lr(optimizer, epoch):
	scale   = 0.1
	lr_list =  [args.lr] * 100
	lr_list += [args.lr*scale] * 50
	lr_list += [args.lr*scale*scale] * 50

	lr = lr_list[epoch-1]
	logging.info('Epoch: {}  lr: {:.3f}'.format(epoch, lr))
	for param_group in optimizer.param_groups:
		param_group['lr'] = lr


if __name__ == '__main__':
	main()
