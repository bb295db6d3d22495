# Source: kuangliu/pytorch-retinanet, train.py + retinanet.py (RetinaNet, freeze_bn) + utils.py (meshgrid, change_box_order,
# box_iou, one_hot_embedding), commit 07490ab41acd2cca55fef101421dbf85e90578ef; loss.py (FocalLoss.focal_loss_alt) at commit
# 2199fd9711fd787ae409800a499db73e6d466fd7; encoder.py (DataEncoder.encode: anchor matching) at commit a6d27e35bb4577b7630302106a42831dc1f976d8
# RetinaNet training: anchors matched to boxes by IoU (>=0.5 positive, <0.4 background, [0.4, 0.5) ignored = -1),
# smooth-L1 on positive anchors only, focal loss on positive+background anchors, both summed and divided by #pos.
# Suspicious-looking but correct patterns kept from the original:
#   - cls_targets == -1 anchors are excluded from the classification loss (pos_neg = cls_targets > -1) and
#     anchors with cls_targets == 0 from the box loss: most anchors contribute to only one of the two terms
#   - class 0 = background is dropped from the one-hot target (t[:, 1:]); background anchors train every class
#     logit towards 0 (sigmoid focal loss, no softmax)
#   - net.train() immediately followed by net.freeze_bn(): BatchNorm layers are put back in eval mode (running
#     statistics used, not updated) while their affine weights still receive gradients and are stepped by SGD
#   - loss = (loc_loss + cls_loss) / num_pos with sum reductions; focal_loss_alt's -w*log(sigmoid(2*xt+1))/2
#   - the test pass runs without torch.no_grad() (the original used volatile Variables)
# Adaptation: VOC ListDataset replaced by synthetic 128x128 images with 1-2 coloured rectangles (3 classes), images
# already normalised; FPN50 (ResNet-50 FPN, pretrained net.pth) replaced by a small randomly initialised conv FPN
# with BatchNorm producing the same 5 pyramid levels, heads 256 -> 64 channels; num_classes 20 -> 3; DataParallel/
# CUDA/checkpointing removed; Variable/.data[0] -> tensors/.item(); size_average=False -> reduction='sum';
# lr 1e-3 -> 1e-2, 200 epochs -> 5 epochs of 8 batches.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


def meshgrid(x, y, row_major=True):
    a = torch.arange(0,x)
    b = torch.arange(0,y)
    xx = a.repeat(y).view(-1,1)
    yy = b.view(-1,1).repeat(1,x).view(-1,1)
    return torch.cat([xx,yy],1) if row_major else torch.cat([yy,xx],1)


def change_box_order(boxes, order):
    assert order in ['xyxy2xywh','xywh2xyxy']
    a = boxes[:,:2]
    b = boxes[:,2:]
    if order == 'xyxy2xywh':
        return torch.cat([(a+b)/2,b-a+1], 1)
    return torch.cat([a-b/2,a+b/2], 1)


def box_iou(box1, box2, order='xyxy'):
    if order == 'xywh':
        box1 = change_box_order(box1, 'xywh2xyxy')
        box2 = change_box_order(box2, 'xywh2xyxy')

    lt = torch.max(box1[:,None,:2], box2[:,:2])  # [N,M,2]
    rb = torch.min(box1[:,None,2:], box2[:,2:])  # [N,M,2]

    wh = (rb-lt+1).clamp(min=0)      # [N,M,2]
    inter = wh[:,:,0] * wh[:,:,1]  # [N,M]

    area1 = (box1[:,2]-box1[:,0]+1) * (box1[:,3]-box1[:,1]+1)  # [N,]
    area2 = (box2[:,2]-box2[:,0]+1) * (box2[:,3]-box2[:,1]+1)  # [M,]
    iou = inter / (area1[:,None] + area2 - inter)
    return iou


def one_hot_embedding(labels, num_classes):
    N = labels.size(0)
    D = num_classes
    y = torch.zeros(N,D)
    y[torch.arange(0,N).long(),labels] = 1
    return y


class DataEncoder:
    def __init__(self):
        self.anchor_areas = [32*32., 64*64., 128*128., 256*256., 512*512.]  # p3 -> p7
        self.aspect_ratios = [1/2., 1/1., 2/1.]
        self.scale_ratios = [1., pow(2,1/3.), pow(2,2/3.)]
        self.anchor_wh = self._get_anchor_wh()

    def _get_anchor_wh(self):
        anchor_wh = []
        for s in self.anchor_areas:
            for ar in self.aspect_ratios:  # w/h = ar
                h = math.sqrt(s/ar)
                w = ar * h
                for sr in self.scale_ratios:  # scale
                    anchor_h = h*sr
                    anchor_w = w*sr
                    anchor_wh.append([anchor_w, anchor_h])
        num_fms = len(self.anchor_areas)
        return torch.Tensor(anchor_wh).view(num_fms, -1, 2)

    def _get_anchor_boxes(self, input_size):
        num_fms = len(self.anchor_areas)
        fm_sizes = [(input_size/pow(2.,i+3)).ceil() for i in range(num_fms)]  # p3 -> p7 feature map sizes

        boxes = []
        for i in range(num_fms):
            fm_size = fm_sizes[i]
            grid_size = input_size / fm_size
            fm_w, fm_h = int(fm_size[0]), int(fm_size[1])
            xy = meshgrid(fm_w,fm_h) + 0.5  # [fm_h*fm_w, 2]
            xy = (xy*grid_size).view(fm_h,fm_w,1,2).expand(fm_h,fm_w,9,2)
            wh = self.anchor_wh[i].view(1,1,9,2).expand(fm_h,fm_w,9,2)
            box = torch.cat([xy,wh], 3)  # [x,y,w,h]
            boxes.append(box.view(-1,4))
        return torch.cat(boxes, 0)

    def encode(self, boxes, labels, input_size):
        input_size = torch.Tensor([input_size,input_size]) if isinstance(input_size, int) \
                     else torch.Tensor(input_size)
        anchor_boxes = self._get_anchor_boxes(input_size)
        boxes = change_box_order(boxes, 'xyxy2xywh')

        ious = box_iou(anchor_boxes, boxes, order='xywh')
        max_ious, max_ids = ious.max(1)
        boxes = boxes[max_ids]

        loc_xy = (boxes[:,:2]-anchor_boxes[:,:2]) / anchor_boxes[:,2:]
        loc_wh = torch.log(boxes[:,2:]/anchor_boxes[:,2:])
        loc_targets = torch.cat([loc_xy,loc_wh], 1)
        cls_targets = 1 + labels[max_ids]

        cls_targets[max_ious<0.5] = 0
        ignore = (max_ious>0.4) & (max_ious<0.5)  # ignore ious between [0.4,0.5]
        cls_targets[ignore] = -1  # for now just mark ignored to -1
        return loc_targets, cls_targets


class FocalLoss(nn.Module):
    def __init__(self, num_classes=20):
        super(FocalLoss, self).__init__()
        self.num_classes = num_classes

    def focal_loss_alt(self, x, y):
        alpha = 0.25

        t = one_hot_embedding(y.data.cpu(), 1+self.num_classes)
        t = t[:,1:]

        xt = x*(2*t-1)  # xt = x if t > 0 else -x
        pt = (2*xt+1).sigmoid()

        w = alpha*t + (1-alpha)*(1-t)
        loss = -w*pt.log() / 2
        return loss.sum()

    def forward(self, loc_preds, loc_targets, cls_preds, cls_targets):
        batch_size, num_boxes = cls_targets.size()
        pos = cls_targets > 0  # [N,#anchors]
        num_pos = pos.data.long().sum()

        mask = pos.unsqueeze(2).expand_as(loc_preds)       # [N,#anchors,4]
        masked_loc_preds = loc_preds[mask].view(-1,4)      # [#pos,4]
        masked_loc_targets = loc_targets[mask].view(-1,4)  # [#pos,4]
        loc_loss = F.smooth_l1_loss(masked_loc_preds, masked_loc_targets, reduction='sum')

        pos_neg = cls_targets > -1  # exclude ignored anchors
        mask = pos_neg.unsqueeze(2).expand_as(cls_preds)
        masked_cls_preds = cls_preds[mask].view(-1,self.num_classes)
        cls_loss = self.focal_loss_alt(masked_cls_preds, cls_targets[pos_neg])

        print('loc_loss: %.3f | cls_loss: %.3f' % (loc_loss.item()/num_pos.item(), cls_loss.item()/num_pos.item()), end=' | ')
        loss = (loc_loss+cls_loss)/num_pos
        return loss


def conv_bn(i, o, s):
    return nn.Sequential(nn.Conv2d(i, o, 3, s, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(True))


class SmallFPN(nn.Module):
    """ Stand-in for FPN50: returns p3..p7 (strides 8..128) with `planes` channels. """
    def __init__(self, planes=64):
        super().__init__()
        self.c3 = nn.Sequential(conv_bn(3, 32, 2), conv_bn(32, 48, 2), conv_bn(48, planes, 2))
        self.p4 = conv_bn(planes, planes, 2)
        self.p5 = conv_bn(planes, planes, 2)
        self.p6 = nn.Conv2d(planes, planes, 3, 2, 1)
        self.p7 = nn.Conv2d(planes, planes, 3, 2, 1)

    def forward(self, x):
        p3 = self.c3(x)
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        p6 = self.p6(p5)
        p7 = self.p7(F.relu(p6))
        return p3, p4, p5, p6, p7


class RetinaNet(nn.Module):
    num_anchors = 9
    num_classes = 3
    planes = 64

    def __init__(self):
        super(RetinaNet, self).__init__()
        self.fpn = SmallFPN(self.planes)
        self.loc_head = self._make_head(self.num_anchors*4)
        self.cls_head = self._make_head(self.num_anchors*self.num_classes)

    def forward(self, x):
        fms = self.fpn(x)
        loc_preds = []
        cls_preds = []
        for fm in fms:
            loc_pred = self.loc_head(fm)
            cls_pred = self.cls_head(fm)
            loc_pred = loc_pred.permute(0,2,3,1).contiguous().view(x.size(0),-1,4)                 # [N, 9*4,H,W] -> [N,H,W, 9*4] -> [N,H*W*9, 4]
            cls_pred = cls_pred.permute(0,2,3,1).contiguous().view(x.size(0),-1,self.num_classes)  # [N,9*20,H,W] -> [N,H,W,9*20] -> [N,H*W*9,20]
            loc_preds.append(loc_pred)
            cls_preds.append(cls_pred)
        return torch.cat(loc_preds,1), torch.cat(cls_preds,1)

    def _make_head(self, out_planes):
        layers = []
        for _ in range(4):
            layers.append(nn.Conv2d(self.planes, self.planes, kernel_size=3, stride=1, padding=1))
            layers.append(nn.ReLU(True))
        layers.append(nn.Conv2d(self.planes, out_planes, kernel_size=3, stride=1, padding=1))
        return nn.Sequential(*layers)

    def freeze_bn(self):
        '''Freeze BatchNorm layers.'''
        for layer in self.modules():
            if isinstance(layer, nn.BatchNorm2d):
                layer.training = False


class ListDataset(torch.utils.data.Dataset):
    """ Synthetic stand-in: coloured rectangles on noise; collate_fn encodes boxes like the original. """
    colors = torch.tensor([[1., -1., -1.], [-1., 1., -1.], [-1., -1., 1.]])

    def __init__(self, n, seed, input_size=128):
        g = torch.Generator().manual_seed(seed)
        self.input_size = input_size
        self.encoder = DataEncoder()
        self.items = []
        for _ in range(n):
            img = 0.3 * torch.randn(3, input_size, input_size, generator=g)
            boxes, labels = [], []
            for _ in range(int(torch.randint(1, 3, (1,), generator=g))):
                w, h = [int(v) for v in torch.randint(28, 60, (2,), generator=g)]
                x0 = int(torch.randint(0, input_size - w, (1,), generator=g))
                y0 = int(torch.randint(0, input_size - h, (1,), generator=g))
                c = int(torch.randint(0, 3, (1,), generator=g))
                img[:, y0:y0+h, x0:x0+w] = self.colors[c].view(3, 1, 1) + 0.3 * torch.randn(3, h, w, generator=g)
                boxes.append([x0, y0, x0 + w - 1, y0 + h - 1])
                labels.append(c)
            self.items.append((img, torch.tensor(boxes, dtype=torch.float), torch.tensor(labels)))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        return self.items[idx]

    def collate_fn(self, batch):
        imgs = [x[0] for x in batch]
        boxes = [x[1] for x in batch]
        labels = [x[2] for x in batch]
        inputs = torch.stack(imgs)
        loc_targets = []
        cls_targets = []
        for i in range(len(imgs)):
            loc_target, cls_target = self.encoder.encode(boxes[i], labels[i], input_size=(self.input_size, self.input_size))
            loc_targets.append(loc_target)
            cls_targets.append(cls_target)
        return inputs, torch.stack(loc_targets), torch.stack(cls_targets)


def main():
    torch.manual_seed(0)
    trainset = ListDataset(64, seed=1)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=8, shuffle=True, num_workers=0, collate_fn=trainset.collate_fn)
    testset = ListDataset(16, seed=2)
    testloader = torch.utils.data.DataLoader(testset, batch_size=8, shuffle=False, num_workers=0, collate_fn=testset.collate_fn)

    net = RetinaNet()
    criterion = FocalLoss(num_classes=RetinaNet.num_classes)
    optimizer = optim.SGD(net.parameters(), lr=1e-2, momentum=0.9, weight_decay=1e-4)

    def train(epoch):
        print('\nEpoch: %d' % epoch)
        net.train()
        net.freeze_bn()
        train_loss = 0
        for batch_idx, (inputs, loc_targets, cls_targets) in enumerate(trainloader):
            optimizer.zero_grad()
            loc_preds, cls_preds = net(inputs)
            loss = criterion(loc_preds, loc_targets, cls_preds, cls_targets)
            loss.backward()
            optimizer.step()

            train_loss += loss.item()
            print('train_loss: %.3f | avg_loss: %.3f' % (loss.item(), train_loss/(batch_idx+1)))

    def test(epoch):
        print('\nTest')
        net.eval()
        test_loss = 0
        for batch_idx, (inputs, loc_targets, cls_targets) in enumerate(testloader):
            loc_preds, cls_preds = net(inputs)
            loss = criterion(loc_preds, loc_targets, cls_preds, cls_targets)
            test_loss += loss.item()
            print('test_loss: %.3f | avg_loss: %.3f' % (loss.item(), test_loss/(batch_idx+1)))
        return test_loss / len(testloader)

    first = test(-1)
    for epoch in range(0, 5):
        train(epoch)
        last = test(epoch)
    print('\n[summary] test_loss first=%.4f last=%.4f decreased=%s' % (first, last, last < first))


if __name__ == '__main__':
    main()
