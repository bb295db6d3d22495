# Source: karpathy/pytorch-made, made.py + run.py, commit 81886ccc8270cdf3a2b32cbbca5c7feab422f907
# https://github.com/karpathy/pytorch-made
#
# MADE (masked autoencoder for distribution estimation) on binary images: MaskedLinear layers multiply their
# weight by a registered 'mask' buffer (copied in from a numpy bool array), order/connectivity-agnostic training
# that resamples the masks every resample_every steps cycling through num_masks seeds, test-time averaging of
# logits over several masks, summed BCE-with-logits divided by the batch size (legacy size_average=False),
# torch.set_grad_enabled(split == 'train') flipped globally at the top of every epoch, the test pass run BEFORE the
# train pass each epoch, Adam with weight decay, StepLR stepped with an explicit epoch argument.
# Adaptation: binarized MNIST (784-d) -> 2000/400 synthetic binary 8x8 images (noisy strokes from 6 prototypes);
# argparse -> a Namespace; .cuda() -> cpu; hidden 500 -> 128, num_masks 1 -> 4, resample_every 20 -> 5,
# samples 1 -> 2; 100 epochs -> 12 and StepLR step_size 45 -> 8; fixed seeds; a summary line.
from argparse import Namespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable


class MaskedLinear(nn.Linear):
    """ same as Linear except has a configurable mask on the weights """

    def __init__(self, in_features, out_features, bias=True):
        super().__init__(in_features, out_features, bias)
        self.register_buffer('mask', torch.ones(out_features, in_features))

    def set_mask(self, mask):
        self.mask.data.copy_(torch.from_numpy(mask.astype(np.uint8).T))

    def forward(self, input):
        return F.linear(input, self.mask * self.weight, self.bias)


class MADE(nn.Module):
    def __init__(self, nin, hidden_sizes, nout, num_masks=1, natural_ordering=False):
        super().__init__()
        self.nin = nin
        self.nout = nout
        self.hidden_sizes = hidden_sizes
        assert self.nout % self.nin == 0, "nout must be integer multiple of nin"

        # define a simple MLP neural net
        self.net = []
        hs = [nin] + hidden_sizes + [nout]
        for h0, h1 in zip(hs, hs[1:]):
            self.net.extend([
                    MaskedLinear(h0, h1),
                    nn.ReLU(),
                ])
        self.net.pop()  # pop the last ReLU for the output layer
        self.net = nn.Sequential(*self.net)

        # seeds for orders/connectivities of the model ensemble
        self.natural_ordering = natural_ordering
        self.num_masks = num_masks
        self.seed = 0  # for cycling through num_masks orderings

        self.m = {}
        self.update_masks()  # builds the initial self.m connectivity

    def update_masks(self):
        if self.m and self.num_masks == 1: return  # only a single seed, skip for efficiency
        L = len(self.hidden_sizes)

        # fetch the next seed and construct a random stream
        rng = np.random.RandomState(self.seed)
        self.seed = (self.seed + 1) % self.num_masks

        # sample the order of the inputs and the connectivity of all neurons
        self.m[-1] = np.arange(self.nin) if self.natural_ordering else rng.permutation(self.nin)
        for l in range(L):
            self.m[l] = rng.randint(self.m[l-1].min(), self.nin-1, size=self.hidden_sizes[l])

        # construct the mask matrices
        masks = [self.m[l-1][:, None] <= self.m[l][None, :] for l in range(L)]
        masks.append(self.m[L-1][:, None] < self.m[-1][None, :])

        # handle the case where nout = nin * k, for integer k > 1
        if self.nout > self.nin:
            k = int(self.nout / self.nin)
            # replicate the mask across the other outputs
            masks[-1] = np.concatenate([masks[-1]]*k, axis=1)

        # set the masks in all MaskedLinear layers
        layers = [l for l in self.net.modules() if isinstance(l, MaskedLinear)]
        for l, m in zip(layers, masks):
            l.set_mask(m)

    def forward(self, x):
        return self.net(x)


def run_epoch(split, upto=None):
    torch.set_grad_enabled(split == 'train')  # enable/disable grad for efficiency of forwarding test batches
    model.train() if split == 'train' else model.eval()
    nsamples = 1 if split == 'train' else args.samples
    x = xtr if split == 'train' else xte
    N, D = x.size()
    B = 100  # batch size
    nsteps = N//B if upto is None else min(N//B, upto)
    lossfs = []
    for step in range(nsteps):

        # fetch the next batch of data
        xb = Variable(x[step*B:step*B+B])

        # get the logits, potentially run the same batch a number of times, resampling each time
        xbhat = torch.zeros_like(xb)
        for s in range(nsamples):
            # perform order/connectivity-agnostic training by resampling the masks
            if step % args.resample_every == 0 or split == 'test':  # if in test, cycle masks every time
                model.update_masks()
            # forward the model
            xbhat += model(xb)
        xbhat /= nsamples

        # evaluate the binary cross entropy loss
        loss = F.binary_cross_entropy_with_logits(xbhat, xb, size_average=False) / B
        lossf = loss.data.item()
        lossfs.append(lossf)

        # backward/update
        if split == 'train':
            opt.zero_grad()
            loss.backward()
            opt.step()

    print("%s epoch average loss: %f" % (split, np.mean(lossfs)))
    return float(np.mean(lossfs))


def binary_images(n, rng, size=8):
    """Stand-in for binarized MNIST: 6 stroke prototypes, randomly shifted by one pixel, with 5% pixel flips."""
    protos = np.zeros((6, size, size), dtype=np.float32)
    protos[0, 1:7, 3] = 1; protos[1, 3, 1:7] = 1
    protos[2, np.arange(1, 7), np.arange(1, 7)] = 1; protos[3, np.arange(1, 7), 6 - np.arange(0, 6)] = 1
    protos[4, 1, 1:7] = 1; protos[4, 6, 1:7] = 1; protos[4, 1:7, 1] = 1; protos[4, 1:7, 6] = 1
    protos[5, 1:7, 2] = 1; protos[5, 1:7, 5] = 1; protos[5, 4, 2:6] = 1
    k = rng.randint(0, 6, size=n)
    imgs = protos[k]
    shifts = rng.randint(-1, 2, size=(n, 2))
    imgs = np.stack([np.roll(np.roll(im, dy, 0), dx, 1) for im, (dy, dx) in zip(imgs, shifts)])
    flips = rng.rand(*imgs.shape) < 0.05
    imgs = np.where(flips, 1 - imgs, imgs)
    return imgs.reshape(n, -1).astype(np.float32)


if __name__ == '__main__':
    args = Namespace(data_path=None, hiddens='128', num_masks=4, resample_every=5, samples=2)

    # reproducibility is good
    np.random.seed(42)
    torch.manual_seed(42)

    rng = np.random.RandomState(0)
    xtr = torch.from_numpy(binary_images(2000, rng))
    xte = torch.from_numpy(binary_images(400, rng))

    # construct model
    hidden_list = list(map(int, args.hiddens.split(',')))
    model = MADE(xtr.size(1), hidden_list, xtr.size(1), num_masks=args.num_masks)
    print("number of model parameters:", sum([np.prod(p.size()) for p in model.parameters()]))

    # set up the optimizer
    opt = torch.optim.Adam(model.parameters(), 1e-3, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=8, gamma=0.1)

    # start the training
    test_losses = []
    for epoch in range(12):
        print("epoch %d" % (epoch, ))
        scheduler.step(epoch)
        test_losses.append(run_epoch('test', upto=5))  # run only a few batches for approximate test accuracy
        run_epoch('train')

    print("optimization done. full test set eval:")
    final = run_epoch('test')
    print('[summary] test nll (nats/image) before training=%.3f after=%.3f decreased=%s' % (
        test_losses[0], final, final < test_losses[0]))
