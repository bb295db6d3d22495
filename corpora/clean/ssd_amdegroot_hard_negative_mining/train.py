# Source: amdegroot/ssd.pytorch, train.py (train loop, adjust_learning_rate, weights_init) + layers/modules/multibox_loss.py
# (MultiBoxLoss) + layers/box_utils.py (point_form, intersect, jaccard, match, encode, log_sum_exp) + layers/functions/prior_box.py
# + layers/modules/l2norm.py + data/__init__.py (detection_collate), commit 5b0b77faa955c1917b0c710d770739ba8fbff9b7
# SSD training: priors matched to ground truth by bipartite + threshold matching, smooth-L1 on positive priors,
# cross-entropy on positives plus the 3x hardest negatives (hard negative mining by double argsort), both / N positives.
# Suspicious-looking but correct patterns kept from the original:
#   - log_sum_exp subtracts x.data.max() (a detached global max); the per-prior conf loss used for mining is then
#     partly overwritten in place (loss_c[pos] = 0) and only its sort order is used
#   - most priors (unmined negatives) receive no gradient at all; the mined set changes every step
#   - best_truth_overlap.index_fill_(0, best_prior_idx, 2) forces every ground truth to own its best prior even below
#     the 0.5 threshold; targets are built in torch.Tensor(num, num_priors, 4) allocated uninitialised and filled per image
#   - loss_l /= N and loss_c /= N in place, N = number of positives in the batch (not batch size)
#   - priors are a constant tensor computed once under no_grad and returned as the third element of the output tuple
#   - L2Norm with a learnable per-channel scale initialised to 20 on the first source feature map
#   - step LR by hand: param_group['lr'] = lr * gamma ** step at the iterations in lr_steps
#   - the training loss first rises (50 -> ~240 around iteration 30: the L2Norm scale of 20 feeds large activations
#     into freshly initialised heads) and then falls below its start; no warm-up in the original recipe
# Adaptation: VOC + SSDAugmentation replaced by synthetic 64x64 images with 1-3 coloured rectangles (3 classes + bg);
# VGG16 base/extras (pretrained weights) replaced by a small conv stack with the same multibox head structure on 3
# source maps (8x8, 4x4, 2x2; 4 priors per cell); CUDA/DataParallel/visdom/checkpoints removed; Variable and
# .data[0] -> tensors and .item(); size_average=False -> reduction='sum'; lr 1e-3 -> 1e-2, max_iter 120000 -> 150,
# lr_steps (80000, 100000, 120000) -> (100, 130); loss_c is reshaped to (num, num_priors) BEFORE the in-place
# loss_c[pos] = 0 (the boolean-mask shape no longer broadcasts against (num*num_priors, 1) in current PyTorch; the
# fix used by the project's users).
import time
from itertools import product
from math import sqrt

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
import torch.optim as optim
import torch.utils.data as data

cfg = {'num_classes': 4, 'lr_steps': (100, 130), 'max_iter': 150, 'feature_maps': [8, 4, 2], 'min_dim': 64,
       'steps': [8, 16, 32], 'min_sizes': [12, 24, 40], 'max_sizes': [24, 40, 64], 'aspect_ratios': [[2], [2], [2]],
       'variance': [0.1, 0.2], 'clip': True, 'name': 'SYNTH'}


def point_form(boxes):
    return torch.cat((boxes[:, :2] - boxes[:, 2:]/2,     # xmin, ymin
                     boxes[:, :2] + boxes[:, 2:]/2), 1)  # xmax, ymax


def intersect(box_a, box_b):
    A = box_a.size(0)
    B = box_b.size(0)
    max_xy = torch.min(box_a[:, 2:].unsqueeze(1).expand(A, B, 2),
                       box_b[:, 2:].unsqueeze(0).expand(A, B, 2))
    min_xy = torch.max(box_a[:, :2].unsqueeze(1).expand(A, B, 2),
                       box_b[:, :2].unsqueeze(0).expand(A, B, 2))
    inter = torch.clamp((max_xy - min_xy), min=0)
    return inter[:, :, 0] * inter[:, :, 1]


def jaccard(box_a, box_b):
    inter = intersect(box_a, box_b)
    area_a = ((box_a[:, 2]-box_a[:, 0]) *
              (box_a[:, 3]-box_a[:, 1])).unsqueeze(1).expand_as(inter)  # [A,B]
    area_b = ((box_b[:, 2]-box_b[:, 0]) *
              (box_b[:, 3]-box_b[:, 1])).unsqueeze(0).expand_as(inter)  # [A,B]
    union = area_a + area_b - inter
    return inter / union  # [A,B]


def match(threshold, truths, priors, variances, labels, loc_t, conf_t, idx):
    # jaccard index
    overlaps = jaccard(
        truths,
        point_form(priors)
    )
    # (Bipartite Matching)
    # [1,num_objects] best prior for each ground truth
    best_prior_overlap, best_prior_idx = overlaps.max(1, keepdim=True)
    # [1,num_priors] best ground truth for each prior
    best_truth_overlap, best_truth_idx = overlaps.max(0, keepdim=True)
    best_truth_idx.squeeze_(0)
    best_truth_overlap.squeeze_(0)
    best_prior_idx.squeeze_(1)
    best_prior_overlap.squeeze_(1)
    best_truth_overlap.index_fill_(0, best_prior_idx, 2)  # ensure best prior
    # TODO refactor: index  best_prior_idx with long tensor
    # ensure every gt matches with its prior of max overlap
    for j in range(best_prior_idx.size(0)):
        best_truth_idx[best_prior_idx[j]] = j
    matches = truths[best_truth_idx]          # Shape: [num_priors,4]
    conf = labels[best_truth_idx] + 1         # Shape: [num_priors]
    conf[best_truth_overlap < threshold] = 0  # label as background
    loc = encode(matches, priors, variances)
    loc_t[idx] = loc    # [num_priors,4] encoded offsets to learn
    conf_t[idx] = conf  # [num_priors] top class label for each prior


def encode(matched, priors, variances):
    # dist b/t match center and prior's center
    g_cxcy = (matched[:, :2] + matched[:, 2:])/2 - priors[:, :2]
    # encode variance
    g_cxcy /= (variances[0] * priors[:, 2:])
    # match wh / prior wh
    g_wh = (matched[:, 2:] - matched[:, :2]) / priors[:, 2:]
    g_wh = torch.log(g_wh) / variances[1]
    # return target for smooth_l1_loss
    return torch.cat([g_cxcy, g_wh], 1)  # [num_priors,4]


def log_sum_exp(x):
    x_max = x.data.max()
    return torch.log(torch.sum(torch.exp(x-x_max), 1, keepdim=True)) + x_max


class MultiBoxLoss(nn.Module):
    def __init__(self, num_classes, overlap_thresh, prior_for_matching,
                 bkg_label, neg_mining, neg_pos, neg_overlap, encode_target,
                 use_gpu=True):
        super(MultiBoxLoss, self).__init__()
        self.use_gpu = use_gpu
        self.num_classes = num_classes
        self.threshold = overlap_thresh
        self.background_label = bkg_label
        self.encode_target = encode_target
        self.use_prior_for_matching = prior_for_matching
        self.do_neg_mining = neg_mining
        self.negpos_ratio = neg_pos
        self.neg_overlap = neg_overlap
        self.variance = cfg['variance']

    def forward(self, predictions, targets):
        loc_data, conf_data, priors = predictions
        num = loc_data.size(0)
        priors = priors[:loc_data.size(1), :]
        num_priors = (priors.size(0))
        num_classes = self.num_classes

        # match priors (default boxes) and ground truth boxes
        loc_t = torch.Tensor(num, num_priors, 4)
        conf_t = torch.LongTensor(num, num_priors)
        for idx in range(num):
            truths = targets[idx][:, :-1].data
            labels = targets[idx][:, -1].data
            defaults = priors.data
            match(self.threshold, truths, defaults, self.variance, labels,
                  loc_t, conf_t, idx)

        pos = conf_t > 0
        num_pos = pos.sum(dim=1, keepdim=True)

        # Localization Loss (Smooth L1)
        # Shape: [batch,num_priors,4]
        pos_idx = pos.unsqueeze(pos.dim()).expand_as(loc_data)
        loc_p = loc_data[pos_idx].view(-1, 4)
        loc_t = loc_t[pos_idx].view(-1, 4)
        loss_l = F.smooth_l1_loss(loc_p, loc_t, reduction='sum')

        # Compute max conf across batch for hard negative mining
        batch_conf = conf_data.view(-1, self.num_classes)
        loss_c = log_sum_exp(batch_conf) - batch_conf.gather(1, conf_t.view(-1, 1))

        # Hard Negative Mining
        loss_c = loss_c.view(num, -1)
        loss_c[pos] = 0  # filter out pos boxes for now
        _, loss_idx = loss_c.sort(1, descending=True)
        _, idx_rank = loss_idx.sort(1)
        num_pos = pos.long().sum(1, keepdim=True)
        num_neg = torch.clamp(self.negpos_ratio*num_pos, max=pos.size(1)-1)
        neg = idx_rank < num_neg.expand_as(idx_rank)

        # Confidence Loss Including Positive and Negative Examples
        pos_idx = pos.unsqueeze(2).expand_as(conf_data)
        neg_idx = neg.unsqueeze(2).expand_as(conf_data)
        conf_p = conf_data[(pos_idx+neg_idx).gt(0)].view(-1, self.num_classes)
        targets_weighted = conf_t[(pos+neg).gt(0)]
        loss_c = F.cross_entropy(conf_p, targets_weighted, reduction='sum')

        # Sum of losses: L(x,c,l,g) = (Lconf(x, c) + αLloc(x,l,g)) / N

        N = num_pos.data.sum()
        loss_l /= N
        loss_c /= N
        return loss_l, loss_c


class PriorBox(object):
    def __init__(self, cfg):
        super(PriorBox, self).__init__()
        self.image_size = cfg['min_dim']
        self.num_priors = len(cfg['aspect_ratios'])
        self.variance = cfg['variance'] or [0.1]
        self.feature_maps = cfg['feature_maps']
        self.min_sizes = cfg['min_sizes']
        self.max_sizes = cfg['max_sizes']
        self.steps = cfg['steps']
        self.aspect_ratios = cfg['aspect_ratios']
        self.clip = cfg['clip']
        self.version = cfg['name']

    def forward(self):
        mean = []
        for k, f in enumerate(self.feature_maps):
            for i, j in product(range(f), repeat=2):
                f_k = self.image_size / self.steps[k]
                # unit center x,y
                cx = (j + 0.5) / f_k
                cy = (i + 0.5) / f_k

                # aspect_ratio: 1
                # rel size: min_size
                s_k = self.min_sizes[k]/self.image_size
                mean += [cx, cy, s_k, s_k]

                # aspect_ratio: 1
                # rel size: sqrt(s_k * s_(k+1))
                s_k_prime = sqrt(s_k * (self.max_sizes[k]/self.image_size))
                mean += [cx, cy, s_k_prime, s_k_prime]

                # rest of aspect ratios
                for ar in self.aspect_ratios[k]:
                    mean += [cx, cy, s_k*sqrt(ar), s_k/sqrt(ar)]
                    mean += [cx, cy, s_k/sqrt(ar), s_k*sqrt(ar)]
        # back to torch land
        output = torch.Tensor(mean).view(-1, 4)
        if self.clip:
            output.clamp_(max=1, min=0)
        return output


class L2Norm(nn.Module):
    def __init__(self,n_channels, scale):
        super(L2Norm,self).__init__()
        self.n_channels = n_channels
        self.gamma = scale or None
        self.eps = 1e-10
        self.weight = nn.Parameter(torch.Tensor(self.n_channels))
        self.reset_parameters()

    def reset_parameters(self):
        init.constant_(self.weight,self.gamma)

    def forward(self, x):
        norm = x.pow(2).sum(dim=1, keepdim=True).sqrt()+self.eps
        x = torch.div(x,norm)
        out = self.weight.unsqueeze(0).unsqueeze(2).unsqueeze(3).expand_as(x) * x
        return out


class SSD(nn.Module):
    """ SSD with the original head structure (per-source loc/conf convs, permute + view + cat, priors as
    a constant third output); the VGG base and extras are replaced by small conv blocks. """
    def __init__(self, phase, size, base, extras, head, num_classes):
        super(SSD, self).__init__()
        self.phase = phase
        self.num_classes = num_classes
        self.cfg = cfg
        self.priorbox = PriorBox(self.cfg)
        with torch.no_grad():
            self.priors = self.priorbox.forward()
        self.size = size

        # SSD network
        self.vgg = nn.ModuleList(base)
        # Layer learns to scale the l2 normalized features from conv4_3
        self.L2Norm = L2Norm(32, 20)
        self.extras = nn.ModuleList(extras)

        self.loc = nn.ModuleList(head[0])
        self.conf = nn.ModuleList(head[1])

    def forward(self, x):
        sources = list()
        loc = list()
        conf = list()

        for k in range(len(self.vgg)):
            x = self.vgg[k](x)
        s = self.L2Norm(x)
        sources.append(s)

        for k, v in enumerate(self.extras):
            x = F.relu(v(x), inplace=True)
            sources.append(x)

        # apply multibox head to source layers
        for (x, l, c) in zip(sources, self.loc, self.conf):
            loc.append(l(x).permute(0, 2, 3, 1).contiguous())
            conf.append(c(x).permute(0, 2, 3, 1).contiguous())

        loc = torch.cat([o.view(o.size(0), -1) for o in loc], 1)
        conf = torch.cat([o.view(o.size(0), -1) for o in conf], 1)
        output = (
            loc.view(loc.size(0), -1, 4),
            conf.view(conf.size(0), -1, self.num_classes),
            self.priors
        )
        return output


def build_ssd(phase, size=64, num_classes=4):
    base = [nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2)]
    extras = [nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.Conv2d(32, 32, 3, stride=2, padding=1)]
    mbox = 4
    loc_layers = [nn.Conv2d(32, mbox * 4, kernel_size=3, padding=1) for _ in range(3)]
    conf_layers = [nn.Conv2d(32, mbox * num_classes, kernel_size=3, padding=1) for _ in range(3)]
    return SSD(phase, size, base, extras, (loc_layers, conf_layers), num_classes)


def detection_collate(batch):
    targets = []
    imgs = []
    for sample in batch:
        imgs.append(sample[0])
        targets.append(torch.FloatTensor(sample[1]))
    return torch.stack(imgs, 0), targets


class SyntheticDetection(data.Dataset):
    colors = torch.tensor([[1., -1., -1.], [-1., 1., -1.], [-1., -1., 1.]])
    name = 'SYNTH'

    def __init__(self, n, seed, size=64):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(n):
            img = 0.3 * torch.randn(3, size, size, generator=g)
            ann = []
            for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
                w, h = [int(v) for v in torch.randint(10, 36, (2,), generator=g)]
                x0 = int(torch.randint(0, size - w, (1,), generator=g))
                y0 = int(torch.randint(0, size - h, (1,), generator=g))
                c = int(torch.randint(0, 3, (1,), generator=g))
                img[:, y0:y0+h, x0:x0+w] = self.colors[c].view(3, 1, 1) + 0.3 * torch.randn(3, h, w, generator=g)
                ann.append([x0 / size, y0 / size, (x0 + w) / size, (y0 + h) / size, c])
            self.items.append((img, ann))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def xavier(param):
    init.xavier_uniform_(param)


def weights_init(m):
    if isinstance(m, nn.Conv2d):
        xavier(m.weight.data)
        m.bias.data.zero_()


def main():
    torch.manual_seed(0)
    args_lr, args_momentum, args_weight_decay, args_gamma, args_batch_size = 1e-2, 0.9, 5e-4, 0.1, 16

    def adjust_learning_rate(optimizer, gamma, step):
        lr = args_lr * (gamma ** (step))
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr

    dataset = SyntheticDetection(160, seed=1)
    testset = SyntheticDetection(32, seed=2)
    ssd_net = build_ssd('train', cfg['min_dim'], cfg['num_classes'])
    net = ssd_net
    ssd_net.extras.apply(weights_init)
    ssd_net.loc.apply(weights_init)
    ssd_net.conf.apply(weights_init)

    optimizer = optim.SGD(net.parameters(), lr=args_lr, momentum=args_momentum,
                          weight_decay=args_weight_decay)
    criterion = MultiBoxLoss(cfg['num_classes'], 0.5, True, 0, True, 3, 0.5,
                             False, False)

    def test_loss():
        images, targets = detection_collate([testset[i] for i in range(len(testset))])
        with torch.no_grad():
            loss_l, loss_c = criterion(net(images), targets)
        return loss_l.item(), loss_c.item()

    l0, c0 = test_loss()
    print('test loc %.4f conf %.4f before training' % (l0, c0))
    net.train()
    loc_loss = 0
    conf_loss = 0
    step_index = 0
    data_loader = data.DataLoader(dataset, args_batch_size, num_workers=0, shuffle=True,
                                  collate_fn=detection_collate)
    batch_iterator = iter(data_loader)
    for iteration in range(0, cfg['max_iter']):
        if iteration in cfg['lr_steps']:
            step_index += 1
            adjust_learning_rate(optimizer, args_gamma, step_index)

        # load train data
        try:
            images, targets = next(batch_iterator)
        except StopIteration:
            batch_iterator = iter(data_loader)
            images, targets = next(batch_iterator)

        # forward
        t0 = time.time()
        out = net(images)
        # backprop
        optimizer.zero_grad()
        loss_l, loss_c = criterion(out, targets)
        loss = loss_l + loss_c
        loss.backward()
        optimizer.step()
        t1 = time.time()
        loc_loss += loss_l.item()
        conf_loss += loss_c.item()

        if iteration % 30 == 0:
            print('timer: %.4f sec.' % (t1 - t0))
            print('iter ' + repr(iteration) + ' || Loss: %.4f ||' % (loss.item()))
    l1, c1 = test_loss()
    print('test loc %.4f conf %.4f after training' % (l1, c1))
    print('[summary] test_multibox_loss first=%.4f last=%.4f decreased=%s' % (l0 + c0, l1 + c1, l1 + c1 < l0 + c0))


if __name__ == '__main__':
    main()
