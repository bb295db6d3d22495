# Source: leongatys/PytorchNeuralStyleTransfer, NeuralStyleTransfer.ipynb, commit be6c8e2b35568669a5a0ac10b66c912207ad355d
# https://github.com/leongatys/PytorchNeuralStyleTransfer
#
# Gatys et al. neural style transfer by the paper's author: the VGG's parameters are all frozen
# (requires_grad = False) and the only optimised tensor is the image opt_img, with L-BFGS driven by a
# closure that counts its own calls in a one-element list; Gram matrices divided in place (G.div_),
# style targets computed once and detached, per-layer weights 1e3/n**2, the loop runs while the closure
# count is below max_iter (L-BFGS evaluates the closure up to 20 times per optimizer.step()).
# Adaptation: no downloads, no torchvision/PIL: the pretrained vgg_conv.pth cannot be loaded, so the VGG
# keeps PyTorch's default random initialisation (random-feature style transfer still lowers the loss) and
# all channel widths are divided by 8 (64..512 -> 8..64; style_weights use these widths); the two photos
# are replaced by synthetic 64x64 images (colourful stripes as style, blocks as content); prep/postpa are
# the notebook's transform chains written as functions (BGR, subtract mean, *255 and back); max_iter 500 ->
# 60, show_iter 50 -> 10; the high-resolution second pass and all plotting are dropped.
import torch
from torch.autograd import Variable
import torch.nn as nn
import torch.nn.functional as F
from torch import optim


# vgg definition that conveniently let's you grab the outputs from any layer
class VGG(nn.Module):
    def __init__(self, pool='max'):
        super(VGG, self).__init__()
        # vgg modules
        self.conv1_1 = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.conv1_2 = nn.Conv2d(8, 8, kernel_size=3, padding=1)
        self.conv2_1 = nn.Conv2d(8, 16, kernel_size=3, padding=1)
        self.conv2_2 = nn.Conv2d(16, 16, kernel_size=3, padding=1)
        self.conv3_1 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.conv3_2 = nn.Conv2d(32, 32, kernel_size=3, padding=1)
        self.conv3_3 = nn.Conv2d(32, 32, kernel_size=3, padding=1)
        self.conv3_4 = nn.Conv2d(32, 32, kernel_size=3, padding=1)
        self.conv4_1 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.conv4_2 = nn.Conv2d(64, 64, kernel_size=3, padding=1)
        self.conv4_3 = nn.Conv2d(64, 64, kernel_size=3, padding=1)
        self.conv4_4 = nn.Conv2d(64, 64, kernel_size=3, padding=1)
        self.conv5_1 = nn.Conv2d(64, 64, kernel_size=3, padding=1)
        self.conv5_2 = nn.Conv2d(64, 64, kernel_size=3, padding=1)
        self.conv5_3 = nn.Conv2d(64, 64, kernel_size=3, padding=1)
        self.conv5_4 = nn.Conv2d(64, 64, kernel_size=3, padding=1)
        if pool == 'max':
            self.pool1 = nn.MaxPool2d(kernel_size=2, stride=2)
            self.pool2 = nn.MaxPool2d(kernel_size=2, stride=2)
            self.pool3 = nn.MaxPool2d(kernel_size=2, stride=2)
            self.pool4 = nn.MaxPool2d(kernel_size=2, stride=2)
            self.pool5 = nn.MaxPool2d(kernel_size=2, stride=2)
        elif pool == 'avg':
            self.pool1 = nn.AvgPool2d(kernel_size=2, stride=2)
            self.pool2 = nn.AvgPool2d(kernel_size=2, stride=2)
            self.pool3 = nn.AvgPool2d(kernel_size=2, stride=2)
            self.pool4 = nn.AvgPool2d(kernel_size=2, stride=2)
            self.pool5 = nn.AvgPool2d(kernel_size=2, stride=2)

    def forward(self, x, out_keys):
        out = {}
        out['r11'] = F.relu(self.conv1_1(x))
        out['r12'] = F.relu(self.conv1_2(out['r11']))
        out['p1'] = self.pool1(out['r12'])
        out['r21'] = F.relu(self.conv2_1(out['p1']))
        out['r22'] = F.relu(self.conv2_2(out['r21']))
        out['p2'] = self.pool2(out['r22'])
        out['r31'] = F.relu(self.conv3_1(out['p2']))
        out['r32'] = F.relu(self.conv3_2(out['r31']))
        out['r33'] = F.relu(self.conv3_3(out['r32']))
        out['r34'] = F.relu(self.conv3_4(out['r33']))
        out['p3'] = self.pool3(out['r34'])
        out['r41'] = F.relu(self.conv4_1(out['p3']))
        out['r42'] = F.relu(self.conv4_2(out['r41']))
        out['r43'] = F.relu(self.conv4_3(out['r42']))
        out['r44'] = F.relu(self.conv4_4(out['r43']))
        out['p4'] = self.pool4(out['r44'])
        out['r51'] = F.relu(self.conv5_1(out['p4']))
        out['r52'] = F.relu(self.conv5_2(out['r51']))
        out['r53'] = F.relu(self.conv5_3(out['r52']))
        out['r54'] = F.relu(self.conv5_4(out['r53']))
        out['p5'] = self.pool5(out['r54'])
        return [out[key] for key in out_keys]


# gram matrix and loss
class GramMatrix(nn.Module):
    def forward(self, input):
        b,c,h,w = input.size()
        F = input.view(b, c, h*w)
        G = torch.bmm(F, F.transpose(1,2))
        G.div_(h*w)
        return G


class GramMSELoss(nn.Module):
    def forward(self, input, target):
        out = nn.MSELoss()(GramMatrix()(input), target)
        return(out)


# pre and post processing for images (the notebook's transforms.Compose chains)
MEAN = torch.tensor([0.40760392, 0.45795686, 0.48501961]).view(3, 1, 1)


def prep(x):  # x: RGB in [0, 1], (3, H, W)
    x = x[torch.LongTensor([2,1,0])]  # turn to BGR
    x = x - MEAN  # subtract imagenet mean
    return x.mul_(255)


def postpa(x):
    x = x.mul_(1./255)
    x = x + MEAN  # add imagenet mean
    return x[torch.LongTensor([2,1,0])]  # turn to RGB


def postp(tensor):  # to clip results in the range [0,1]
    t = postpa(tensor)
    t[t>1] = 1
    t[t<0] = 0
    return t


def synthetic_images(size=64):
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing='ij')
    style = torch.stack([0.5 + 0.5 * torch.sin(25 * (xx + 0.6 * yy)),
                         0.5 + 0.5 * torch.sin(17 * (yy - 0.4 * xx) + 1.0),
                         0.5 + 0.5 * torch.cos(31 * xx * yy)])
    content = torch.zeros(3, size, size) + 0.2
    content[:, 10:40, 8:30] = torch.tensor([0.9, 0.8, 0.3]).view(3, 1, 1)
    content[:, 30:60, 34:58] = torch.tensor([0.2, 0.5, 0.9]).view(3, 1, 1)
    return [style, content]


def main():
    torch.manual_seed(0)
    # get network
    vgg = VGG()
    for param in vgg.parameters():
        param.requires_grad = False
    if torch.cuda.is_available():
        vgg.cuda()

    # load images, ordered as [style_image, content_image]
    imgs = synthetic_images()
    imgs_torch = [prep(img) for img in imgs]
    if torch.cuda.is_available():
        imgs_torch = [Variable(img.unsqueeze(0).cuda()) for img in imgs_torch]
    else:
        imgs_torch = [Variable(img.unsqueeze(0)) for img in imgs_torch]
    style_image, content_image = imgs_torch

    # opt_img = Variable(torch.randn(content_image.size()).type_as(content_image.data), requires_grad=True) #random init
    opt_img = Variable(content_image.data.clone(), requires_grad=True)

    # define layers, loss functions, weights and compute optimization targets
    style_layers = ['r11','r21','r31','r41', 'r51']
    content_layers = ['r42']
    loss_layers = style_layers + content_layers
    loss_fns = [GramMSELoss()] * len(style_layers) + [nn.MSELoss()] * len(content_layers)
    if torch.cuda.is_available():
        loss_fns = [loss_fn.cuda() for loss_fn in loss_fns]

    # these are good weights settings:
    style_weights = [1e3/n**2 for n in [8,16,32,64,64]]
    content_weights = [1e0]
    weights = style_weights + content_weights

    # compute optimization targets
    style_targets = [GramMatrix()(A).detach() for A in vgg(style_image, style_layers)]
    content_targets = [A.detach() for A in vgg(content_image, content_layers)]
    targets = style_targets + content_targets

    # run style transfer
    max_iter = 60
    show_iter = 10
    optimizer = optim.LBFGS([opt_img]);
    n_iter=[0]

    while n_iter[0] <= max_iter:

        def closure():
            optimizer.zero_grad()
            out = vgg(opt_img, loss_layers)
            layer_losses = [weights[a] * loss_fns[a](A, targets[a]) for a,A in enumerate(out)]
            loss = sum(layer_losses)
            loss.backward()
            n_iter[0]+=1
            # print loss
            if n_iter[0] == 1 or n_iter[0]%show_iter == (show_iter-1):
                print('Iteration: %d, loss: %f'%(n_iter[0]+1, loss.item()))
            return loss

        optimizer.step(closure)

    out_img = postp(opt_img.data[0].cpu().squeeze())
    print('output image range [%.3f, %.3f], mean %.3f' % (out_img.min(), out_img.max(), out_img.mean()))


if __name__ == '__main__':
    main()
