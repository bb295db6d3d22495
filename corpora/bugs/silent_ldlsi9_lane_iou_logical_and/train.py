# Source: fabvio/ld-lsi, scripts/train.py (CrossEntropyLoss2d, train_one_epoch, berkely_driving_dataset, main), scripts/utils.py (AverageMeter, get_score, iou), res/models/erfnet_road.py (Net), commit c4ba565743e86198e1d030e5f551a0d8f4719566
# Report: https://github.com/fabvio/ld-lsi/issues/9
# ld-lsi lane detection training: ERFNet with the road-type branch, trained with a 2d
# cross-entropy on drivable-area maps (0 background, 1 ego lane, 2 other lanes) with Adam, the
# running loss and the lane IoU printed every 10 batches. ERFNet is reduced in width and depth,
# the BDD100k drivable maps are replaced by synthetic 48x80 road scenes stored the way
# ToTensor stores an id png (label / 255); the cv2 debug view and the pretrained weights are left out.
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable


class AverageMeter(object):
    """Computes and stores the average and current value"""
    def __init__(self, name, fmt=':f'):
        self.name = name
        self.fmt = fmt
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        fmtstr = '{name} {val' + self.fmt + '} ({avg' + self.fmt + '})'
        return fmtstr.format(**self.__dict__)


def get_score(target, out):
    intersection = np.logical_and(target, out)
    union = np.logical_or(target, out)
    iou_score = np.sum(intersection) / np.sum(union)
    return iou_score


def iou(output, target):
    #doing interpolation and other stuff
    output, _ = output

    ### Classification
    output = output.max(dim=1)[1]
    output = output.float().unsqueeze(1)

    ### get and store the IOU metrics
    output = output.cpu().numpy()
    return get_score(output, target.cpu().numpy())


class DownsamplerBlock (nn.Module):
    def __init__(self, ninput, noutput):
        super(DownsamplerBlock, self).__init__()

        self.conv = nn.Conv2d(ninput, noutput-ninput, (3, 3), stride=2, padding=1, bias=True)
        self.pool = nn.MaxPool2d(2, stride=2)
        self.bn = nn.BatchNorm2d(noutput, eps=1e-3)

    def forward(self, input):
        output = torch.cat([self.conv(input), self.pool(input)], 1)
        output = self.bn(output)
        return F.relu(output)


class non_bottleneck_1d (nn.Module):
    def __init__(self, chann, dropprob, dilated):
        super(non_bottleneck_1d, self).__init__()

        self.conv3x1_1 = nn.Conv2d(chann, chann, (3, 1), stride=1, padding=(1,0), bias=True)

        self.conv1x3_1 = nn.Conv2d(chann, chann, (1,3), stride=1, padding=(0,1), bias=True)

        self.bn1 = nn.BatchNorm2d(chann, eps=1e-03)

        self.conv3x1_2 = nn.Conv2d(chann, chann, (3, 1), stride=1, padding=(1*dilated,0), bias=True, dilation = (dilated,1))

        self.conv1x3_2 = nn.Conv2d(chann, chann, (1,3), stride=1, padding=(0,1*dilated), bias=True, dilation = (1, dilated))

        self.bn2 = nn.BatchNorm2d(chann, eps=1e-03)

        self.dropout = nn.Dropout2d(dropprob)

    def forward(self, input):

        output = self.conv3x1_1(input)
        output = F.relu(output)
        output = self.conv1x3_1(output)
        output = self.bn1(output)
        output = F.relu(output)

        output = self.conv3x1_2(output)
        output = F.relu(output)
        output = self.conv1x3_2(output)
        output = self.bn2(output)

        if (self.dropout.p != 0):
            output = self.dropout(output)

        return F.relu(output+input)    #+input = identity (residual connection)


class Encoder(nn.Module):
    def __init__(self, num_classes):
        super(Encoder, self).__init__()
        self.initial_block = DownsamplerBlock(3,16)

        self.layers = nn.ModuleList()

        self.layers.append(DownsamplerBlock(16,32))

        for x in range(0, 2):
           self.layers.append(non_bottleneck_1d(32, 0.03, 1))

        self.layers.append(DownsamplerBlock(32,64))

        self.layers.append(non_bottleneck_1d(64, 0.3, 2))
        self.layers.append(non_bottleneck_1d(64, 0.3, 4))

        self.road_layers = nn.ModuleList()

        self.road_layers.append(nn.Conv2d(64, 64, (3, 3), stride=2, padding=2))
        self.road_layers.append(nn.MaxPool2d(2, stride=2))
        self.road_layers.append(nn.BatchNorm2d(64, eps=1e-3))
        self.road_layers.append(non_bottleneck_1d(64, 0.3, 1))

        self.road_linear_1 = nn.Linear(64 * 2 * 3, 64)
        self.output_road = nn.Linear(64, 4)

        #Only in encoder mode:
        self.output_conv = nn.Conv2d(64, num_classes, 1, stride=1, padding=0, bias=True)

    def forward(self, input, predict=False):
        bs = input.size()[0]
        output = self.initial_block(input)

        for layer in self.layers:
            output = layer(output)

        output_road = output
        for layer in self.road_layers:
            output_road = layer(output_road)

        output_road = output_road.view(bs, -1)
        output_road = self.road_linear_1(output_road)

        output_road = self.output_road(output_road)

        if predict:
            output = self.output_conv(output)

        return output, output_road


class UpsamplerBlock (nn.Module):
    def __init__(self, ninput, noutput):
        super(UpsamplerBlock, self).__init__()
        self.conv = nn.ConvTranspose2d(ninput, noutput, 3, stride=2, padding=1, output_padding=1, bias=True)
        self.bn = nn.BatchNorm2d(noutput, eps=1e-3)

    def forward(self, input):
        output = self.conv(input)
        output = self.bn(output)
        return F.relu(output)


class Decoder (nn.Module):
    def __init__(self, num_classes):
        super(Decoder, self).__init__()

        self.layers = nn.ModuleList()

        self.layers.append(UpsamplerBlock(64,32))
        self.layers.append(non_bottleneck_1d(32, 0, 1))

        self.layers.append(UpsamplerBlock(32,16))
        self.layers.append(non_bottleneck_1d(16, 0, 1))

        self.output_conv = nn.ConvTranspose2d( 16, num_classes, 2, stride=2, padding=0, output_padding=0, bias=True)

    def forward(self, input):
        output = input

        for layer in self.layers:
            output = layer(output)

        output = self.output_conv(output)

        return output


#ERFNet
class Net(nn.Module):
    def __init__(self, num_classes=3, encoder=None):  #use encoder to pass pretrained encoder
        super(Net, self).__init__()

        if (encoder == None):
            self.encoder = Encoder(num_classes)
        else:
            self.encoder = encoder
        self.decoder = Decoder(num_classes)

    def forward(self, input, only_encode=False):
        if only_encode:
            return self.encoder.forward(input, predict=True)
        else:
            output, output_road = self.encoder(input)    #predict=False by default
            return self.decoder.forward(output), output_road


class CrossEntropyLoss2d(torch.nn.Module):
    #NLLLoss2d is negative log-likelihood loss
    #it returns the semantic segmentation cross-entropy loss2d
    def __init__(self, weight=None):
        super().__init__()
        self.loss = torch.nn.NLLLoss(weight)

    def forward(self, outputs, targets):
        outputs, _ = outputs
        return self.loss(torch.nn.functional.log_softmax(outputs, dim=1), targets)


def train_one_epoch(model, criterion, optimizer, data_loader, device, ntrain_batches):
    top1 = AverageMeter('Acc@1', ':6.2f')
    avgloss = AverageMeter('Loss', '1.5f')

    cnt = 0
    for data in data_loader:
        cnt += 1
        model.to(device)
        image, target = data['image'].to(device), data['label'].squeeze(1)
        target = torch.round(target*255) #converting to range 0-255
        target = target.type(torch.int64).to(device)
        output = model(image)
        loss = criterion(output, target)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        acc1 = iou(output, target)
        top1.update(acc1, image.size(0))
        avgloss.update(loss.item(), image.size(0))
        if cnt%10 == 0:
            print('Loss', round(avgloss.avg, 4))

            print('Training: * Acc@1 {top1.avg:.3f}'
                        .format(top1=top1))

        if cnt >= ntrain_batches:
            return

    print('Full imagenet train set:  * Acc@1 {top1.global_avg:.3f}'
                .format(top1=top1))
    return


def make_road(rng, h=48, w=80):
    """One synthetic road scene: asphalt trapezoid split into lanes by white markings;
    the lane under the camera is the ego lane (1), its neighbours are other lanes (2)."""
    label = np.zeros((h, w), dtype=np.uint8)
    image = np.zeros((h, w, 3), dtype=np.float32)
    image[:] = rng.uniform(0.35, 0.6, size=3)  # grass / buildings
    horizon = rng.randint(14, 20)
    centre = w / 2 + rng.uniform(-6, 6)
    n_left, n_right = rng.randint(0, 3), rng.randint(0, 3)
    for y in range(horizon, h):
        t = (y - horizon) / (h - horizon)
        lane_w = 4 + 22 * t
        for k in range(-n_left, n_right + 1):
            x0, x1 = centre + (k - 0.5) * lane_w, centre + (k + 0.5) * lane_w
            a, b = max(int(round(x0)), 0), min(int(round(x1)), w)
            if a >= b:
                continue
            label[y, a:b] = 1 if k == 0 else 2
            image[y, a:b] = 0.3
            for xm in (a, b - 1):
                image[y, xm] = 0.9
    image += rng.normal(0, 0.08, size=image.shape)
    return np.clip(image, 0, 1), label


class road_scenes_dataset(torch.utils.data.Dataset):
    # stands in for berkely_driving_dataset(color=False): image, drivable id map as ToTensor returns it
    def __init__(self, n, seed):
        rng = np.random.RandomState(seed)
        scenes = [make_road(rng) for _ in range(n)]
        self.images = [torch.from_numpy(im).permute(2, 0, 1).contiguous() for im, _ in scenes]
        self.labels = [torch.from_numpy(lab.astype(np.float32) / 255.0)[None] for _, lab in scenes]
        self.length = n

    def __len__(self):
        return self.length

    def __getitem__(self, idx):
        if torch.is_tensor(idx):
            idx = idx.tolist()
        return {'image': self.images[idx], 'label': self.labels[idx]}


if __name__ == '__main__':
    torch.manual_seed(0)
    torch.set_num_threads(1)
    t0 = time.time()

    roadnet = Net()
    device = torch.device("cpu")
    roadnet.to(device)

    bdd_train = road_scenes_dataset(500, seed=0)
    sampler_train = torch.utils.data.SequentialSampler(bdd_train)

    dl_train = torch.utils.data.DataLoader(
        bdd_train, batch_size=5,
        sampler=sampler_train)

    #defining losses
    criterion = CrossEntropyLoss2d()
    optimizer = torch.optim.Adam(roadnet.parameters(), 2e-3, (0.9, 0.999),  eps=1e-08, weight_decay=1e-4)

    #training an epoch for 100 batches
    train_one_epoch(roadnet, criterion, optimizer, dl_train, device, 100)

    # per-class IoU of the trained model on the first 50 training scenes
    roadnet.eval()
    with torch.no_grad():
        batch = next(iter(torch.utils.data.DataLoader(bdd_train, batch_size=50)))
        pred = roadnet(batch['image'])[0].argmax(1)
        lab = torch.round(batch['label'].squeeze(1) * 255).long()
    for c, name in ((1, 'ego lane'), (2, 'other lanes')):
        inter = ((pred == c) & (lab == c)).sum().item()
        union = ((pred == c) | (lab == c)).sum().item()
        print('%s IoU %.3f' % (name, inter / max(union, 1)))
    print('done in %.1fs' % (time.time() - t0))
