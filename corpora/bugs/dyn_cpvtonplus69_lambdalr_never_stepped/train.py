# Source: minar09/cp-vton-plus, train.py (get_opt, train_tom, main), networks.py (UnetGenerator, UnetSkipConnectionBlock), cp_dataset.py (CPDataLoader.next_batch), commit 2354c52c70f89e33b5e349893597c4b3a7f521c3
# Report: https://github.com/minar09/cp-vton-plus/issues/69
# CP-VTON+ try-on module (TOM) training: a U-Net takes the cloth-agnostic person representation,
# the warped cloth and its mask, renders a person image and a composition mask, and is trained
# with L1 + mask L1 under Adam and a LambdaLR that keeps the lr for keep_step steps and then
# decays it linearly to 0 over decay_step steps. The VITON data set is replaced by synthetic
# 32x24 people (a torso region filled with the cloth texture), the U-Net is shrunk (ngf 8,
# 3 downsamplings), the VGG perceptual loss (pretrained VGG19) and tensorboard are removed.
import argparse
import functools
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_opt(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="TOM")
    parser.add_argument('-b', '--batch-size', type=int, default=8)
    parser.add_argument("--stage", default="TOM")
    parser.add_argument("--fine_width", type=int, default=24)
    parser.add_argument("--fine_height", type=int, default=32)
    parser.add_argument('--lr', type=float, default=0.002,
                        help='initial learning rate for adam')
    parser.add_argument("--display_count", type=int, default=20)
    parser.add_argument("--keep_step", type=int, default=100)
    parser.add_argument("--decay_step", type=int, default=100)
    parser.add_argument("--shuffle", action='store_true',
                        help='shuffle input data')
    opt = parser.parse_args(argv)
    return opt


class UnetSkipConnectionBlock(nn.Module):
    def __init__(self, outer_nc, inner_nc, input_nc=None,
                 submodule=None, outermost=False, innermost=False, norm_layer=nn.BatchNorm2d, use_dropout=False):
        super(UnetSkipConnectionBlock, self).__init__()
        self.outermost = outermost
        use_bias = norm_layer == nn.InstanceNorm2d

        if input_nc is None:
            input_nc = outer_nc
        downconv = nn.Conv2d(input_nc, inner_nc, kernel_size=4,
                             stride=2, padding=1, bias=use_bias)
        downrelu = nn.LeakyReLU(0.2, True)
        downnorm = norm_layer(inner_nc)
        uprelu = nn.ReLU(True)
        upnorm = norm_layer(outer_nc)

        if outermost:
            upsample = nn.Upsample(scale_factor=2, mode='bilinear')
            upconv = nn.Conv2d(inner_nc * 2, outer_nc, kernel_size=3, stride=1, padding=1, bias=use_bias)
            down = [downconv]
            up = [uprelu, upsample, upconv, upnorm]
            model = down + [submodule] + up
        elif innermost:
            upsample = nn.Upsample(scale_factor=2, mode='bilinear')
            upconv = nn.Conv2d(inner_nc, outer_nc, kernel_size=3, stride=1, padding=1, bias=use_bias)
            down = [downrelu, downconv]
            up = [uprelu, upsample, upconv, upnorm]
            model = down + up
        else:
            upsample = nn.Upsample(scale_factor=2, mode='bilinear')
            upconv = nn.Conv2d(inner_nc*2, outer_nc, kernel_size=3, stride=1, padding=1, bias=use_bias)
            down = [downrelu, downconv, downnorm]
            up = [uprelu, upsample, upconv, upnorm]

            if use_dropout:
                model = down + [submodule] + up + [nn.Dropout(0.5)]
            else:
                model = down + [submodule] + up

        self.model = nn.Sequential(*model)

    def forward(self, x):
        if self.outermost:
            return self.model(x)
        else:
            return torch.cat([x, self.model(x)], 1)


class UnetGenerator(nn.Module):
    def __init__(self, input_nc, output_nc, num_downs, ngf=64,
                 norm_layer=nn.BatchNorm2d, use_dropout=False):
        super(UnetGenerator, self).__init__()
        unet_block = UnetSkipConnectionBlock(
            ngf * 4, ngf * 4, input_nc=None, submodule=None, norm_layer=norm_layer, innermost=True)
        for i in range(num_downs - 3):
            unet_block = UnetSkipConnectionBlock(
                ngf * 4, ngf * 4, input_nc=None, submodule=unet_block, norm_layer=norm_layer, use_dropout=use_dropout)
        unet_block = UnetSkipConnectionBlock(
            ngf * 2, ngf * 4, input_nc=None, submodule=unet_block, norm_layer=norm_layer)
        unet_block = UnetSkipConnectionBlock(
            output_nc, ngf * 2, input_nc=input_nc, submodule=unet_block, outermost=True, norm_layer=norm_layer)
        self.model = unet_block

    def forward(self, input):
        return self.model(input)


class CPDataLoader(object):
    """Synthetic stand-in for CPDataset + CPDataLoader: endless batches of try-on samples."""
    def __init__(self, opt, seed=0):
        self.opt = opt
        self.rng = np.random.RandomState(seed)

    def next_batch(self):
        b, h, w = self.opt.batch_size, self.opt.fine_height, self.opt.fine_width
        rng = self.rng
        yy, xx = np.mgrid[0:h, 0:w]
        im = np.zeros((b, 3, h, w), np.float32)
        c = np.zeros((b, 3, h, w), np.float32)
        cm = np.zeros((b, 1, h, w), np.float32)
        pcm = np.zeros((b, 1, h, w), np.float32)
        agnostic = np.zeros((b, 22, h, w), np.float32)
        for k in range(b):
            color = rng.uniform(-1, 1, size=3).astype(np.float32)
            stripes = 0.3 * np.sign(np.sin(xx / rng.uniform(1.0, 3.0)))
            texture = np.clip(color[:, None, None] + stripes[None], -1, 1)
            cloth_box = (abs(yy - h / 2) < h / 3) & (abs(xx - w / 2) < w / 3)
            top, left = rng.randint(4, 10), rng.randint(3, 7)
            torso = (yy >= top) & (yy < top + h // 2) & (xx >= left) & (xx < left + w // 2)
            c[k] = texture * cloth_box
            cm[k, 0] = cloth_box
            pcm[k, 0] = torso
            skin = np.array([0.6, 0.2, 0.0], np.float32)[:, None, None]
            body = (abs(xx - w / 2) < w / 2.5)
            im[k] = np.where(torso, texture, np.where(body, skin, -1.0))
            agnostic[k, 0] = body
            agnostic[k, 1:4] = np.where(body & ~torso, skin, 0.0)
            agnostic[k, 4 + (top % 18)] = torso
        t = lambda a: torch.from_numpy(a)
        return {'image': t(im), 'pose_image': t(agnostic[:, 4:5]), 'head': t(agnostic[:, 1:4]),
                'shape': t(agnostic[:, :1]), 'agnostic': t(agnostic), 'cloth': t(c), 'cloth_mask': t(cm),
                'parse_cloth_mask': t(pcm)}


def train_tom(opt, train_loader, model):
    model.train()

    # criterion
    criterionL1 = nn.L1Loss()
    criterionMask = nn.L1Loss()

    # optimizer
    optimizer = torch.optim.Adam(
        model.parameters(), lr=opt.lr, betas=(0.5, 0.999))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda step: 1.0 -
                                                  max(0, step - opt.keep_step) / float(opt.decay_step + 1))

    for step in range(opt.keep_step + opt.decay_step):
        iter_start_time = time.time()
        inputs = train_loader.next_batch()

        im = inputs['image']
        agnostic = inputs['agnostic']
        c = inputs['cloth']
        cm = inputs['cloth_mask']
        pcm = inputs['parse_cloth_mask']

        outputs = model(torch.cat([agnostic, c, cm], 1))  # CP-VTON+
        p_rendered, m_composite = torch.split(outputs, 3, 1)
        p_rendered = F.tanh(p_rendered)
        m_composite = F.sigmoid(m_composite)
        p_tryon = c * m_composite + p_rendered * (1 - m_composite)

        loss_l1 = criterionL1(p_tryon, im)
        loss_mask = criterionMask(m_composite, pcm)  # CP-VTON+
        loss = loss_l1 + loss_mask
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if (step+1) % opt.display_count == 0:
            t = time.time() - iter_start_time
            print('step: %8d, time: %.3f, loss: %.4f, l1: %.4f, mask: %.4f, lr: %.2e'
                  % (step+1, t, loss.item(), loss_l1.item(),
                     loss_mask.item(), optimizer.param_groups[0]['lr']), flush=True)


def main():
    torch.manual_seed(0)
    opt = get_opt([])
    print(opt)
    print("Start to train stage: %s, named: %s!" % (opt.stage, opt.name))
    train_loader = CPDataLoader(opt)
    model = UnetGenerator(
        26, 4, 3, ngf=8, norm_layer=nn.InstanceNorm2d)  # CP-VTON+
    train_tom(opt, train_loader, model)
    print('Finished training %s, named: %s!' % (opt.stage, opt.name))


if __name__ == "__main__":
    main()
