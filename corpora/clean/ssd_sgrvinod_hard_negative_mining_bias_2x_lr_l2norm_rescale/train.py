# Source: sgrvinod/a-PyTorch-Tutorial-to-Object-Detection, train.py, model.py, utils.py, commit 5d5b75968c3cf1ffd2718bf828a7560b7ee8e8b5
# https://github.com/sgrvinod/a-PyTorch-Tutorial-to-Object-Detection/blob/master/train.py
#
# SSD training: MultiBoxLoss matches priors to objects by IoU (each object is forced onto its best prior by setting
# that prior's overlap to 1), labels priors under 0.5 IoU as background (0), regresses encoded offsets (the 10 / 5
# "variances") with an L1 loss named smooth_l1 over positives only, and mines hard negatives per image (3x the
# positives, by sorting the per-prior cross-entropy computed with reduce=False); the confidence loss is summed and
# divided by the number of positives; the biases get twice the lr in their own param group (weight decay 5e-4 on
# both groups); the low-level feature map is L2-normalised per position and multiplied by a learned per-channel
# rescale factor initialised to 20; the lr is decayed by hand (adjust_learning_rate) at epochs converted from
# iterations with a batch size of 32 while the loader uses 8; targets are lists of per-image tensors of different
# lengths (collate_fn); the priors are a plain tensor attribute (not a buffer).
# Adaptation: VOC + the 300x300 VGG-16 SSD replaced by synthetic 3x64x64 images with 1-2 coloured rectangles of 3
# classes (+ background) and a small SSD with the same structure: a conv base whose 8x8 map plays conv4_3 (L2 norm +
# rescale factors), a 4x4 map as conv7 and auxiliary 2x2 and 1x1 maps, prediction convolutions with 4/6/6/4 priors
# per position (create_prior_boxes logic kept: scales, aspect ratios, the extra geometric-mean prior) -> 420 priors;
# no pretrained VGG weights (none can be downloaded); iterations 120000 -> 120 "iterations of 32" with decay at
# 80 and 100, i.e. 8 epochs of 480 images in batches of 8 (decay at epochs 5 and 6); augmentation, checkpoints and timing meters left out;
# held-out MultiBox loss and the IoU of the best-scoring decoded box printed before and after; cpu; seeds fixed.
from math import sqrt

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim
import torch.utils.data
from torch import nn

device = torch.device("cpu")


# ---------------------------------------------------------------- utils.py
def xy_to_cxcy(xy):
    """
    Convert bounding boxes from boundary coordinates (x_min, y_min, x_max, y_max) to center-size coordinates (c_x, c_y, w, h).

    :param xy: bounding boxes in boundary coordinates, a tensor of size (n_boxes, 4)
    :return: bounding boxes in center-size coordinates, a tensor of size (n_boxes, 4)
    """
    return torch.cat([(xy[:, 2:] + xy[:, :2]) / 2,  # c_x, c_y
                      xy[:, 2:] - xy[:, :2]], 1)  # w, h


def cxcy_to_xy(cxcy):
    """
    Convert bounding boxes from center-size coordinates (c_x, c_y, w, h) to boundary coordinates (x_min, y_min, x_max, y_max).

    :param cxcy: bounding boxes in center-size coordinates, a tensor of size (n_boxes, 4)
    :return: bounding boxes in boundary coordinates, a tensor of size (n_boxes, 4)
    """
    return torch.cat([cxcy[:, :2] - (cxcy[:, 2:] / 2),  # x_min, y_min
                      cxcy[:, :2] + (cxcy[:, 2:] / 2)], 1)  # x_max, y_max


def cxcy_to_gcxgcy(cxcy, priors_cxcy):
    """
    Encode bounding boxes (that are in center-size form) w.r.t. the corresponding prior boxes (that are in center-size form).

    For the center coordinates, find the offset with respect to the prior box, and scale by the size of the prior box.
    For the size coordinates, scale by the size of the prior box, and convert to the log-space.

    In the model, we are predicting bounding box coordinates in this encoded form.

    :param cxcy: bounding boxes in center-size coordinates, a tensor of size (n_priors, 4)
    :param priors_cxcy: prior boxes with respect to which the encoding must be performed, a tensor of size (n_priors, 4)
    :return: encoded bounding boxes, a tensor of size (n_priors, 4)
    """

    # The 10 and 5 below are referred to as 'variances' in the original Caffe repo, completely empirical
    # They are for some sort of numerical conditioning, for 'scaling the localization gradient'
    # See https://github.com/weiliu89/caffe/issues/155
    return torch.cat([(cxcy[:, :2] - priors_cxcy[:, :2]) / (priors_cxcy[:, 2:] / 10),  # g_c_x, g_c_y
                      torch.log(cxcy[:, 2:] / priors_cxcy[:, 2:]) * 5], 1)  # g_w, g_h


def gcxgcy_to_cxcy(gcxgcy, priors_cxcy):
    """
    Decode bounding box coordinates predicted by the model, since they are encoded in the form mentioned above.

    They are decoded into center-size coordinates.

    This is the inverse of the function above.

    :param gcxgcy: encoded bounding boxes, i.e. output of the model, a tensor of size (n_priors, 4)
    :param priors_cxcy: prior boxes with respect to which the encoding is defined, a tensor of size (n_priors, 4)
    :return: decoded bounding boxes in center-size form, a tensor of size (n_priors, 4)
    """

    return torch.cat([gcxgcy[:, :2] * priors_cxcy[:, 2:] / 10 + priors_cxcy[:, :2],  # c_x, c_y
                      torch.exp(gcxgcy[:, 2:] / 5) * priors_cxcy[:, 2:]], 1)  # w, h


def find_intersection(set_1, set_2):
    """
    Find the intersection of every box combination between two sets of boxes that are in boundary coordinates.

    :param set_1: set 1, a tensor of dimensions (n1, 4)
    :param set_2: set 2, a tensor of dimensions (n2, 4)
    :return: intersection of each of the boxes in set 1 with respect to each of the boxes in set 2, a tensor of dimensions (n1, n2)
    """

    # PyTorch auto-broadcasts singleton dimensions
    lower_bounds = torch.max(set_1[:, :2].unsqueeze(1), set_2[:, :2].unsqueeze(0))  # (n1, n2, 2)
    upper_bounds = torch.min(set_1[:, 2:].unsqueeze(1), set_2[:, 2:].unsqueeze(0))  # (n1, n2, 2)
    intersection_dims = torch.clamp(upper_bounds - lower_bounds, min=0)  # (n1, n2, 2)
    return intersection_dims[:, :, 0] * intersection_dims[:, :, 1]  # (n1, n2)


def find_jaccard_overlap(set_1, set_2):
    """
    Find the Jaccard Overlap (IoU) of every box combination between two sets of boxes that are in boundary coordinates.

    :param set_1: set 1, a tensor of dimensions (n1, 4)
    :param set_2: set 2, a tensor of dimensions (n2, 4)
    :return: Jaccard Overlap of each of the boxes in set 1 with respect to each of the boxes in set 2, a tensor of dimensions (n1, n2)
    """

    # Find intersections
    intersection = find_intersection(set_1, set_2)  # (n1, n2)

    # Find areas of each box in both sets
    areas_set_1 = (set_1[:, 2] - set_1[:, 0]) * (set_1[:, 3] - set_1[:, 1])  # (n1)
    areas_set_2 = (set_2[:, 2] - set_2[:, 0]) * (set_2[:, 3] - set_2[:, 1])  # (n2)

    # Find the union
    # PyTorch auto-broadcasts singleton dimensions
    union = areas_set_1.unsqueeze(1) + areas_set_2.unsqueeze(0) - intersection  # (n1, n2)

    return intersection / union  # (n1, n2)


def adjust_learning_rate(optimizer, scale):
    """
    Scale learning rate by a specified factor.

    :param optimizer: optimizer whose learning rate must be shrunk.
    :param scale: factor to multiply learning rate with.
    """
    for param_group in optimizer.param_groups:
        param_group['lr'] = param_group['lr'] * scale
    print("DECAYING learning rate.\n The new LR is %f\n" % (optimizer.param_groups[1]['lr'],))


class AverageMeter(object):
    """
    Keeps track of most recent, average, sum, and count of a metric.
    """

    def __init__(self):
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


# ---------------------------------------------------------------- model.py (reduced SSD)
class BaseConvolutions(nn.Module):
    """Stand-in for VGGBase: returns a low-level map (conv4_3's role, 8x8) and a higher one (conv7's role, 4x4)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 64, 3, padding=1)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv6 = nn.Conv2d(64, 64, 3, padding=1)
        self.conv7 = nn.Conv2d(64, 64, 1)

    def forward(self, image):
        out = self.pool(F.relu(self.conv1(image)))  # (N, 16, 32, 32)
        out = self.pool(F.relu(self.conv2(out)))  # (N, 32, 16, 16)
        out = self.pool(F.relu(self.conv3(out)))  # (N, 64, 8, 8)
        conv4_3_feats = out
        out = self.pool(F.relu(self.conv6(out)))  # (N, 64, 4, 4)
        conv7_feats = F.relu(self.conv7(out))
        return conv4_3_feats, conv7_feats


class AuxiliaryConvolutions(nn.Module):
    def __init__(self):
        super(AuxiliaryConvolutions, self).__init__()
        self.conv8_1 = nn.Conv2d(64, 32, kernel_size=1, padding=0)
        self.conv8_2 = nn.Conv2d(32, 64, kernel_size=3, stride=2, padding=1)  # dim. reduction because stride > 1
        self.conv9_1 = nn.Conv2d(64, 32, kernel_size=1, padding=0)
        self.conv9_2 = nn.Conv2d(32, 64, kernel_size=3, padding=0)  # dim. reduction because padding = 0
        self.init_conv2d()

    def init_conv2d(self):
        for c in self.children():
            if isinstance(c, nn.Conv2d):
                nn.init.xavier_uniform_(c.weight)
                nn.init.constant_(c.bias, 0.)

    def forward(self, conv7_feats):
        out = F.relu(self.conv8_1(conv7_feats))
        out = F.relu(self.conv8_2(out))  # (N, 64, 2, 2)
        conv8_2_feats = out
        out = F.relu(self.conv9_1(out))
        out = F.pad(out, (1, 0, 1, 0))
        conv9_2_feats = F.relu(self.conv9_2(out))  # (N, 64, 1, 1)
        return conv8_2_feats, conv9_2_feats


class PredictionConvolutions(nn.Module):
    def __init__(self, n_classes):
        super(PredictionConvolutions, self).__init__()
        self.n_classes = n_classes
        n_boxes = {'conv4_3': 4, 'conv7': 6, 'conv8_2': 6, 'conv9_2': 4}
        self.names = list(n_boxes)
        self.loc_convs = nn.ModuleDict({k: nn.Conv2d(64, n_boxes[k] * 4, kernel_size=3, padding=1) for k in n_boxes})
        self.cl_convs = nn.ModuleDict({k: nn.Conv2d(64, n_boxes[k] * n_classes, kernel_size=3, padding=1) for k in n_boxes})
        self.init_conv2d()

    def init_conv2d(self):
        for c in self.modules():
            if isinstance(c, nn.Conv2d):
                nn.init.xavier_uniform_(c.weight)
                nn.init.constant_(c.bias, 0.)

    def forward(self, *feats):
        batch_size = feats[0].size(0)
        locs, classes_scores = [], []
        for name, f in zip(self.names, feats):
            l = self.loc_convs[name](f).permute(0, 2, 3, 1).contiguous()  # to match prior-box order (after .view())
            locs.append(l.view(batch_size, -1, 4))
            c = self.cl_convs[name](f).permute(0, 2, 3, 1).contiguous()
            classes_scores.append(c.view(batch_size, -1, self.n_classes))
        return torch.cat(locs, dim=1), torch.cat(classes_scores, dim=1)


class SSD(nn.Module):
    def __init__(self, n_classes):
        super(SSD, self).__init__()

        self.n_classes = n_classes

        self.base = BaseConvolutions()
        self.aux_convs = AuxiliaryConvolutions()
        self.pred_convs = PredictionConvolutions(n_classes)

        # Since lower level features (conv4_3_feats) have considerably larger scales, we take the L2 norm and rescale
        # Rescale factor is initially set at 20, but is learned for each channel during back-prop
        self.rescale_factors = nn.Parameter(torch.FloatTensor(1, 64, 1, 1))  # there are 64 channels in conv4_3_feats here
        nn.init.constant_(self.rescale_factors, 20)

        # Prior boxes
        self.priors_cxcy = self.create_prior_boxes()

    def forward(self, image):
        conv4_3_feats, conv7_feats = self.base(image)

        # Rescale conv4_3 after L2 norm
        norm = conv4_3_feats.pow(2).sum(dim=1, keepdim=True).sqrt()
        conv4_3_feats = conv4_3_feats / norm
        conv4_3_feats = conv4_3_feats * self.rescale_factors

        conv8_2_feats, conv9_2_feats = self.aux_convs(conv7_feats)
        locs, classes_scores = self.pred_convs(conv4_3_feats, conv7_feats, conv8_2_feats, conv9_2_feats)
        return locs, classes_scores

    def create_prior_boxes(self):
        fmap_dims = {'conv4_3': 8,
                     'conv7': 4,
                     'conv8_2': 2,
                     'conv9_2': 1}

        obj_scales = {'conv4_3': 0.15,
                      'conv7': 0.3,
                      'conv8_2': 0.55,
                      'conv9_2': 0.8}

        aspect_ratios = {'conv4_3': [1., 2., 0.5],
                         'conv7': [1., 2., 3., 0.5, .333],
                         'conv8_2': [1., 2., 3., 0.5, .333],
                         'conv9_2': [1., 2., 0.5]}

        fmaps = list(fmap_dims.keys())

        prior_boxes = []

        for k, fmap in enumerate(fmaps):
            for i in range(fmap_dims[fmap]):
                for j in range(fmap_dims[fmap]):
                    cx = (j + 0.5) / fmap_dims[fmap]
                    cy = (i + 0.5) / fmap_dims[fmap]

                    for ratio in aspect_ratios[fmap]:
                        prior_boxes.append([cx, cy, obj_scales[fmap] * sqrt(ratio), obj_scales[fmap] / sqrt(ratio)])

                        # For an aspect ratio of 1, use an additional prior whose scale is the geometric mean of the
                        # scale of the current feature map and the scale of the next feature map
                        if ratio == 1.:
                            try:
                                additional_scale = sqrt(obj_scales[fmap] * obj_scales[fmaps[k + 1]])
                            # For the last feature map, there is no "next" feature map
                            except IndexError:
                                additional_scale = 1.
                            prior_boxes.append([cx, cy, additional_scale, additional_scale])

        prior_boxes = torch.FloatTensor(prior_boxes).to(device)
        prior_boxes.clamp_(0, 1)  # this line has no effect; see Remarks section in tutorial

        return prior_boxes


class MultiBoxLoss(nn.Module):
    """
    The MultiBox loss, a loss function for object detection.

    This is a combination of:
    (1) a localization loss for the predicted locations of the boxes, and
    (2) a confidence loss for the predicted class scores.
    """

    def __init__(self, priors_cxcy, threshold=0.5, neg_pos_ratio=3, alpha=1.):
        super(MultiBoxLoss, self).__init__()
        self.priors_cxcy = priors_cxcy
        self.priors_xy = cxcy_to_xy(priors_cxcy)
        self.threshold = threshold
        self.neg_pos_ratio = neg_pos_ratio
        self.alpha = alpha

        self.smooth_l1 = nn.L1Loss()  # *smooth* L1 loss in the paper; see Remarks section in the tutorial
        self.cross_entropy = nn.CrossEntropyLoss(reduce=False)

    def forward(self, predicted_locs, predicted_scores, boxes, labels):
        """
        Forward propagation.

        :param predicted_locs: predicted locations/boxes w.r.t the 8732 prior boxes, a tensor of dimensions (N, 8732, 4)
        :param predicted_scores: class scores for each of the encoded locations/boxes, a tensor of dimensions (N, 8732, n_classes)
        :param boxes: true  object bounding boxes in boundary coordinates, a list of N tensors
        :param labels: true object labels, a list of N tensors
        :return: multibox loss, a scalar
        """
        batch_size = predicted_locs.size(0)
        n_priors = self.priors_cxcy.size(0)
        n_classes = predicted_scores.size(2)

        assert n_priors == predicted_locs.size(1) == predicted_scores.size(1)

        true_locs = torch.zeros((batch_size, n_priors, 4), dtype=torch.float).to(device)  # (N, 8732, 4)
        true_classes = torch.zeros((batch_size, n_priors), dtype=torch.long).to(device)  # (N, 8732)

        # For each image
        for i in range(batch_size):
            n_objects = boxes[i].size(0)

            overlap = find_jaccard_overlap(boxes[i],
                                           self.priors_xy)  # (n_objects, 8732)

            # For each prior, find the object that has the maximum overlap
            overlap_for_each_prior, object_for_each_prior = overlap.max(dim=0)  # (8732)

            # We don't want a situation where an object is not represented in our positive (non-background) priors -
            # 1. An object might not be the best object for all priors, and is therefore not in object_for_each_prior.
            # 2. All priors with the object may be assigned as background based on the threshold (0.5).

            # To remedy this -
            # First, find the prior that has the maximum overlap for each object.
            _, prior_for_each_object = overlap.max(dim=1)  # (N_o)

            # Then, assign each object to the corresponding maximum-overlap-prior. (This fixes 1.)
            object_for_each_prior[prior_for_each_object] = torch.LongTensor(range(n_objects)).to(device)

            # To ensure these priors qualify, artificially give them an overlap of greater than 0.5. (This fixes 2.)
            overlap_for_each_prior[prior_for_each_object] = 1.

            # Labels for each prior
            label_for_each_prior = labels[i][object_for_each_prior]  # (8732)
            # Set priors whose overlaps with objects are less than the threshold to be background (no object)
            label_for_each_prior[overlap_for_each_prior < self.threshold] = 0  # (8732)

            # Store
            true_classes[i] = label_for_each_prior

            # Encode center-size object coordinates into the form we regressed predicted boxes to
            true_locs[i] = cxcy_to_gcxgcy(xy_to_cxcy(boxes[i][object_for_each_prior]), self.priors_cxcy)  # (8732, 4)

        # Identify priors that are positive (object/non-background)
        positive_priors = true_classes != 0  # (N, 8732)

        # LOCALIZATION LOSS

        # Localization loss is computed only over positive (non-background) priors
        loc_loss = self.smooth_l1(predicted_locs[positive_priors], true_locs[positive_priors])  # (), scalar

        # Note: indexing with a torch.uint8 (byte) tensor flattens the tensor when indexing is across multiple dimensions (N & 8732)
        # So, if predicted_locs has the shape (N, 8732, 4), predicted_locs[positive_priors] will have (total positives, 4)

        # CONFIDENCE LOSS

        # Confidence loss is computed over positive priors and the most difficult (hardest) negative priors in each image
        # That is, FOR EACH IMAGE,
        # we will take the hardest (neg_pos_ratio * n_positives) negative priors, i.e where there is maximum loss
        # This is called Hard Negative Mining - it concentrates on hardest negatives in each image, and also minimizes pos/neg imbalance

        # Number of positive and hard-negative priors per image
        n_positives = positive_priors.sum(dim=1)  # (N)
        n_hard_negatives = self.neg_pos_ratio * n_positives  # (N)

        # First, find the loss for all priors
        conf_loss_all = self.cross_entropy(predicted_scores.view(-1, n_classes), true_classes.view(-1))  # (N * 8732)
        conf_loss_all = conf_loss_all.view(batch_size, n_priors)  # (N, 8732)

        # We already know which priors are positive
        conf_loss_pos = conf_loss_all[positive_priors]  # (sum(n_positives))

        # Next, find which priors are hard-negative
        # To do this, sort ONLY negative priors in each image in order of decreasing loss and take top n_hard_negatives
        conf_loss_neg = conf_loss_all.clone()  # (N, 8732)
        conf_loss_neg[positive_priors] = 0.  # (N, 8732), positive priors are ignored (never in top n_hard_negatives)
        conf_loss_neg, _ = conf_loss_neg.sort(dim=1, descending=True)  # (N, 8732), sorted by decreasing hardness
        hardness_ranks = torch.LongTensor(range(n_priors)).unsqueeze(0).expand_as(conf_loss_neg).to(device)  # (N, 8732)
        hard_negatives = hardness_ranks < n_hard_negatives.unsqueeze(1)  # (N, 8732)
        conf_loss_hard_neg = conf_loss_neg[hard_negatives]  # (sum(n_hard_negatives))

        # As in the paper, averaged over positive priors only, although computed over both positive and hard-negative priors
        conf_loss = (conf_loss_hard_neg.sum() + conf_loss_pos.sum()) / n_positives.sum().float()  # (), scalar

        # TOTAL LOSS

        return conf_loss + self.alpha * loc_loss


# ---------------------------------------------------------------- datasets.py stand-in (synthetic boxes)
class SyntheticBoxesDataset(torch.utils.data.Dataset):
    COLOURS = np.array([[1.0, -1.0, -1.0], [-1.0, 1.0, -1.0], [-1.0, -1.0, 1.0]], dtype=np.float32)

    def __init__(self, n, seed, max_objects=2):
        rng = np.random.RandomState(seed)
        self.items = []
        for _ in range(n):
            image = (0.3 * rng.randn(3, 64, 64)).astype(np.float32)
            boxes, labels = [], []
            for _ in range(rng.randint(1, max_objects + 1)):
                w, h = rng.randint(10, 40, 2)
                x0, y0 = rng.randint(0, 64 - w), rng.randint(0, 64 - h)
                c = rng.randint(0, 3)
                image[:, y0:y0 + h, x0:x0 + w] = self.COLOURS[c][:, None, None] + 0.3 * rng.randn(3, h, w)
                boxes.append([x0 / 64, y0 / 64, (x0 + w) / 64, (y0 + h) / 64])
                labels.append(c + 1)
            self.items.append((torch.from_numpy(image), torch.FloatTensor(boxes), torch.LongTensor(labels),
                               torch.zeros(len(labels), dtype=torch.uint8)))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def collate_fn(self, batch):
        images = list()
        boxes = list()
        labels = list()
        difficulties = list()

        for b in batch:
            images.append(b[0])
            boxes.append(b[1])
            labels.append(b[2])
            difficulties.append(b[3])

        images = torch.stack(images, dim=0)

        return images, boxes, labels, difficulties  # tensor (N, 3, 300, 300), 3 lists of N tensors each


# ---------------------------------------------------------------- train.py
n_classes = 4  # background + 3
batch_size = 8  # batch size
iterations = 120  # number of iterations to train
print_freq = 40  # print training status every __ batches
lr = 1e-3  # learning rate
decay_lr_at = [80, 100]  # decay learning rate after these many iterations
decay_lr_to = 0.1  # decay learning rate to this fraction of the existing learning rate
momentum = 0.9  # momentum
weight_decay = 5e-4  # weight decay
grad_clip = None  # clip if gradients are exploding


def evaluate(model, criterion, heldout):
    """held-out MultiBox loss, and the IoU of the best-scoring decoded box with its image's first object"""
    model.eval()
    with torch.no_grad():
        images, boxes, labels, _ = heldout.collate_fn([heldout[i] for i in range(len(heldout))])
        predicted_locs, predicted_scores = model(images)
        loss = criterion(predicted_locs, predicted_scores, boxes, labels).item()
        scores = F.softmax(predicted_scores, dim=2)[:, :, 1:].max(dim=2).values  # best non-background score per prior
        best = scores.argmax(dim=1)
        ious = []
        for i in range(images.size(0)):
            box = cxcy_to_xy(gcxgcy_to_cxcy(predicted_locs[i, best[i]].unsqueeze(0), model.priors_cxcy[best[i]].unsqueeze(0)))
            ious.append(find_jaccard_overlap(box, boxes[i]).max().item())
    model.train()
    return loss, float(np.mean(ious))


def main():
    global decay_lr_at
    start_epoch = 0
    model = SSD(n_classes=n_classes)
    # Initialize the optimizer, with twice the default learning rate for biases, as in the original Caffe repo
    biases = list()
    not_biases = list()
    for param_name, param in model.named_parameters():
        if param.requires_grad:
            if param_name.endswith('.bias'):
                biases.append(param)
            else:
                not_biases.append(param)
    optimizer = torch.optim.SGD(params=[{'params': biases, 'lr': 2 * lr}, {'params': not_biases}],
                                lr=lr, momentum=momentum, weight_decay=weight_decay)

    model = model.to(device)
    criterion = MultiBoxLoss(priors_cxcy=model.priors_cxcy).to(device)

    train_dataset = SyntheticBoxesDataset(480, seed=1)
    heldout = SyntheticBoxesDataset(64, seed=2)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=batch_size, shuffle=True,
                                               collate_fn=train_dataset.collate_fn)

    first = evaluate(model, criterion, heldout)
    print('before training: held-out loss %.4f, IoU of the best-scoring box %.3f' % first)

    # To convert iterations to epochs, divide iterations by the number of iterations per epoch
    # The paper trains for 120,000 iterations with a batch size of 32, decays after 80,000 and 100,000 iterations
    epochs = iterations // (len(train_dataset) // 32)
    decay_lr_at = [it // (len(train_dataset) // 32) for it in decay_lr_at]

    for epoch in range(start_epoch, epochs):
        # Decay learning rate at particular epochs
        if epoch in decay_lr_at:
            adjust_learning_rate(optimizer, decay_lr_to)

        train(train_loader=train_loader, model=model, criterion=criterion, optimizer=optimizer, epoch=epoch)

    last = evaluate(model, criterion, heldout)
    print('after training: held-out loss %.4f, IoU of the best-scoring box %.3f' % last)
    print('[summary] held-out loss first=%.4f last=%.4f decreased=%s; best-box IoU first=%.3f last=%.3f'
          % (first[0], last[0], last[0] < first[0], first[1], last[1]))


def train(train_loader, model, criterion, optimizer, epoch):
    model.train()  # training mode enables dropout
    losses = AverageMeter()  # loss

    # Batches
    for i, (images, boxes, labels, _) in enumerate(train_loader):
        # Move to default device
        images = images.to(device)
        boxes = [b.to(device) for b in boxes]
        labels = [l.to(device) for l in labels]

        # Forward prop.
        predicted_locs, predicted_scores = model(images)

        # Loss
        loss = criterion(predicted_locs, predicted_scores, boxes, labels)  # scalar

        # Backward prop.
        optimizer.zero_grad()
        loss.backward()

        # Update model
        optimizer.step()

        losses.update(loss.item(), images.size(0))

        # Print status
        if i % print_freq == 0:
            print('Epoch: [{0}][{1}/{2}]\tLoss {loss.val:.4f} ({loss.avg:.4f})'.format(epoch, i, len(train_loader), loss=losses))
    del predicted_locs, predicted_scores, images, boxes, labels  # free some memory since their histories may be stored


if __name__ == '__main__':
    torch.manual_seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    main()
