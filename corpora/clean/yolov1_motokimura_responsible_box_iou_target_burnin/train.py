# Source: motokimura/yolo_v1_pytorch, train_yolo.py, loss.py, yolo_v1.py, voc.py, darknet.py, util_layers.py, commit c3e60d7abdb6a36c472e4dae55ed696dfc08dd43
# https://github.com/motokimura/yolo_v1_pytorch
#
# YOLO v1 training as written in this repo: the target tensor repeats the same box in both of a cell's B slots,
# and the loss picks the "responsible" predictor per object cell with an IoU computed on fresh FloatTensor copies
# of the predictions, then regresses that predictor's confidence onto the IoU value taken through .data (a
# constant target); uint8 (ByteTensor) masks select object / no-object cells and confidence columns; sqrt of w/h;
# sum-reduced MSE terms weighted by lambda_coord=5 and lambda_noobj=0.5, divided by the batch size; a sigmoid output
# layer; `bn=True` selects the conv head branch WITHOUT BatchNorm (the flag is inverted) while the DarkNet features
# keep BatchNorm; Dropout(0.5) after the first FC; a polynomial burn-in of the LR inside epoch 0 (update_lr called
# every iteration with float(i) / (len - 1)), then LR steps at epochs 1/75/105; validation predictions under
# torch.no_grad() but the loss computed outside it; SGD with momentum and weight decay 5e-4.
# Adaptation: Pascal VOC and the ImageNet-pretrained DarkNet are replaced by synthetic 3x56x56 images with one or two
# filled rectangles of 3 colour classes (boxes normalised to [0, 1], encoded by the repo's VOCDataset.encode with
# S=7, B=2, C=20) and a randomly initialised 3-block DarkNet-style feature extractor with BatchNorm (the features
# load no weights); head channels 1024 -> 32 and FC 4096 -> 256; batch 64 -> 16; 135 -> 4 epochs, with the epoch-75/105
# steps never reached; DataParallel, .cuda(), tensorboardX (stand-in writer) and the weight files are not used; the
# log file is an in-memory buffer; seeds fixed.
import copy
import io
import math
import os
from datetime import datetime

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
from torch.utils.data import DataLoader, Dataset

CH = 32  # 1024 in the repository
FC = 256  # 4096 in the repository
VAL_LOSS = []


class SummaryWriter:
    """tensorboardX stand-in."""

    def __init__(self, log_dir=None):
        self.scalars = {}

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append((step, value))

    def close(self):
        pass


# -------------------------------------------------------------------------------------------- util_layers.py
class Flatten(nn.Module):
    def __init__(self):
        super(Flatten, self).__init__()

    def forward(self, x):
        return x.view(x.size(0), -1)


# ----------------------------------------------------------------------------------------- darknet.py (small)
def darknet_features():
    """Stand-in for DarkNet(conv_only=True, bn=True).features: conv + BatchNorm + LeakyReLU blocks, 56 -> 14 px."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.LeakyReLU(0.1, inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(16, CH, 3, padding=1, bias=False), nn.BatchNorm2d(CH), nn.LeakyReLU(0.1, inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(CH, CH, 3, padding=1, bias=False), nn.BatchNorm2d(CH), nn.LeakyReLU(0.1, inplace=True),
    )


# ------------------------------------------------------------------------------------------------ yolo_v1.py
class YOLOv1(nn.Module):
    def __init__(self, features, num_bboxes=2, num_classes=20, bn=True):
        super(YOLOv1, self).__init__()

        self.feature_size = 7
        self.num_bboxes = num_bboxes
        self.num_classes = num_classes

        self.features = features
        self.conv_layers = self._make_conv_layers(bn)
        self.fc_layers = self._make_fc_layers()

    def _make_conv_layers(self, bn):
        if bn:
            net = nn.Sequential(
                nn.Conv2d(CH, CH, 3, padding=1),
                nn.LeakyReLU(0.1, inplace=True),
                nn.Conv2d(CH, CH, 3, stride=2, padding=1),
                nn.LeakyReLU(0.1),

                nn.Conv2d(CH, CH, 3, padding=1),
                nn.LeakyReLU(0.1, inplace=True),
                nn.Conv2d(CH, CH, 3, padding=1),
                nn.LeakyReLU(0.1, inplace=True)
            )

        else:
            net = nn.Sequential(
                nn.Conv2d(CH, CH, 3, padding=1),
                nn.BatchNorm2d(CH),
                nn.LeakyReLU(0.1, inplace=True),
                nn.Conv2d(CH, CH, 3, stride=2, padding=1),
                nn.BatchNorm2d(CH),
                nn.LeakyReLU(0.1),

                nn.Conv2d(CH, CH, 3, padding=1),
                nn.BatchNorm2d(CH),
                nn.LeakyReLU(0.1, inplace=True),
                nn.Conv2d(CH, CH, 3, padding=1),
                nn.BatchNorm2d(CH),
                nn.LeakyReLU(0.1, inplace=True)
            )

        return net

    def _make_fc_layers(self):
        S, B, C = self.feature_size, self.num_bboxes, self.num_classes

        net = nn.Sequential(
            Flatten(),
            nn.Linear(7 * 7 * CH, FC),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Dropout(0.5, inplace=False), # is it okay to use Dropout with BatchNorm?
            nn.Linear(FC, S * S * (5 * B + C)),
            nn.Sigmoid()
        )

        return net

    def forward(self, x):
        S, B, C = self.feature_size, self.num_bboxes, self.num_classes

        x = self.features(x)
        x = self.conv_layers(x)
        x = self.fc_layers(x)

        x = x.view(-1, S, S, 5 * B + C)
        return x


# --------------------------------------------------------------------------------------------------- loss.py
class Loss(nn.Module):

    def __init__(self, feature_size=7, num_bboxes=2, num_classes=20, lambda_coord=5.0, lambda_noobj=0.5):
        """ Constructor.
        Args:
            feature_size: (int) size of input feature map.
            num_bboxes: (int) number of bboxes per each cell.
            num_classes: (int) number of the object classes.
            lambda_coord: (float) weight for bbox location/size losses.
            lambda_noobj: (float) weight for no-objectness loss.
        """
        super(Loss, self).__init__()

        self.S = feature_size
        self.B = num_bboxes
        self.C = num_classes
        self.lambda_coord = lambda_coord
        self.lambda_noobj = lambda_noobj


    def compute_iou(self, bbox1, bbox2):
        """ Compute the IoU (Intersection over Union) of two set of bboxes, each bbox format: [x1, y1, x2, y2].
        Args:
            bbox1: (Tensor) bounding bboxes, sized [N, 4].
            bbox2: (Tensor) bounding bboxes, sized [M, 4].
        Returns:
            (Tensor) IoU, sized [N, M].
        """
        N = bbox1.size(0)
        M = bbox2.size(0)

        # Compute left-top coordinate of the intersections
        lt = torch.max(
            bbox1[:, :2].unsqueeze(1).expand(N, M, 2), # [N, 2] -> [N, 1, 2] -> [N, M, 2]
            bbox2[:, :2].unsqueeze(0).expand(N, M, 2)  # [M, 2] -> [1, M, 2] -> [N, M, 2]
        )
        # Conpute right-bottom coordinate of the intersections
        rb = torch.min(
            bbox1[:, 2:].unsqueeze(1).expand(N, M, 2), # [N, 2] -> [N, 1, 2] -> [N, M, 2]
            bbox2[:, 2:].unsqueeze(0).expand(N, M, 2)  # [M, 2] -> [1, M, 2] -> [N, M, 2]
        )
        # Compute area of the intersections from the coordinates
        wh = rb - lt   # width and height of the intersection, [N, M, 2]
        wh[wh < 0] = 0 # clip at 0
        inter = wh[:, :, 0] * wh[:, :, 1] # [N, M]

        # Compute area of the bboxes
        area1 = (bbox1[:, 2] - bbox1[:, 0]) * (bbox1[:, 3] - bbox1[:, 1]) # [N, ]
        area2 = (bbox2[:, 2] - bbox2[:, 0]) * (bbox2[:, 3] - bbox2[:, 1]) # [M, ]
        area1 = area1.unsqueeze(1).expand_as(inter) # [N, ] -> [N, 1] -> [N, M]
        area2 = area2.unsqueeze(0).expand_as(inter) # [M, ] -> [1, M] -> [N, M]

        # Compute IoU from the areas
        union = area1 + area2 - inter # [N, M, 2]
        iou = inter / union           # [N, M, 2]

        return iou

    def forward(self, pred_tensor, target_tensor):
        """ Compute loss for YOLO training.
        Args:
            pred_tensor: (Tensor) predictions, sized [n_batch, S, S, Bx5+C], 5=len([x, y, w, h, conf]).
            target_tensor: (Tensor) targets, sized [n_batch, S, S, Bx5+C].
        Returns:
            (Tensor): loss, sized [1, ].
        """
        # TODO: Romove redundant dimensions for some Tensors.

        S, B, C = self.S, self.B, self.C
        N = 5 * B + C    # 5=len([x, y, w, h, conf]

        batch_size = pred_tensor.size(0)
        coord_mask = target_tensor[:, :, :, 4] > 0  # mask for the cells which contain objects. [n_batch, S, S]
        noobj_mask = target_tensor[:, :, :, 4] == 0 # mask for the cells which do not contain objects. [n_batch, S, S]
        coord_mask = coord_mask.unsqueeze(-1).expand_as(target_tensor) # [n_batch, S, S] -> [n_batch, S, S, N]
        noobj_mask = noobj_mask.unsqueeze(-1).expand_as(target_tensor) # [n_batch, S, S] -> [n_batch, S, S, N]

        coord_pred = pred_tensor[coord_mask].view(-1, N)            # pred tensor on the cells which contain objects. [n_coord, N]
                                                                    # n_coord: number of the cells which contain objects.
        bbox_pred = coord_pred[:, :5*B].contiguous().view(-1, 5)    # [n_coord x B, 5=len([x, y, w, h, conf])]
        class_pred = coord_pred[:, 5*B:]                            # [n_coord, C]

        coord_target = target_tensor[coord_mask].view(-1, N)        # target tensor on the cells which contain objects. [n_coord, N]
                                                                    # n_coord: number of the cells which contain objects.
        bbox_target = coord_target[:, :5*B].contiguous().view(-1, 5)# [n_coord x B, 5=len([x, y, w, h, conf])]
        class_target = coord_target[:, 5*B:]                        # [n_coord, C]

        # Compute loss for the cells with no object bbox.
        noobj_pred = pred_tensor[noobj_mask].view(-1, N)        # pred tensor on the cells which do not contain objects. [n_noobj, N]
                                                                # n_noobj: number of the cells which do not contain objects.
        noobj_target = target_tensor[noobj_mask].view(-1, N)    # target tensor on the cells which do not contain objects. [n_noobj, N]
                                                                # n_noobj: number of the cells which do not contain objects.
        noobj_conf_mask = torch.ByteTensor(noobj_pred.size()).fill_(0) # [n_noobj, N]
        for b in range(B):
            noobj_conf_mask[:, 4 + b*5] = 1 # noobj_conf_mask[:, 4] = 1; noobj_conf_mask[:, 9] = 1
        noobj_pred_conf = noobj_pred[noobj_conf_mask]       # [n_noobj, 2=len([conf1, conf2])]
        noobj_target_conf = noobj_target[noobj_conf_mask]   # [n_noobj, 2=len([conf1, conf2])]
        loss_noobj = F.mse_loss(noobj_pred_conf, noobj_target_conf, reduction='sum')

        # Compute loss for the cells with objects.
        coord_response_mask = torch.ByteTensor(bbox_target.size()).fill_(0)    # [n_coord x B, 5]
        coord_not_response_mask = torch.ByteTensor(bbox_target.size()).fill_(1)# [n_coord x B, 5]
        bbox_target_iou = torch.zeros(bbox_target.size()).cpu()                    # [n_coord x B, 5], only the last 1=(conf,) is used

        # Choose the predicted bbox having the highest IoU for each target bbox.
        for i in range(0, bbox_target.size(0), B):
            pred = bbox_pred[i:i+B] # predicted bboxes at i-th cell, [B, 5=len([x, y, w, h, conf])]
            pred_xyxy = Variable(torch.FloatTensor(pred.size())) # [B, 5=len([x1, y1, x2, y2, conf])]
            # Because (center_x,center_y)=pred[:, 2] and (w,h)=pred[:,2:4] are normalized for cell-size and image-size respectively,
            # rescale (center_x,center_y) for the image-size to compute IoU correctly.
            pred_xyxy[:,  :2] = pred[:, :2]/float(S) - 0.5 * pred[:, 2:4]
            pred_xyxy[:, 2:4] = pred[:, :2]/float(S) + 0.5 * pred[:, 2:4]

            target = bbox_target[i] # target bbox at i-th cell. Because target boxes contained by each cell are identical in current implementation, enough to extract the first one.
            target = bbox_target[i].view(-1, 5) # target bbox at i-th cell, [1, 5=len([x, y, w, h, conf])]
            target_xyxy = Variable(torch.FloatTensor(target.size())) # [1, 5=len([x1, y1, x2, y2, conf])]
            # Because (center_x,center_y)=target[:, 2] and (w,h)=target[:,2:4] are normalized for cell-size and image-size respectively,
            # rescale (center_x,center_y) for the image-size to compute IoU correctly.
            target_xyxy[:,  :2] = target[:, :2]/float(S) - 0.5 * target[:, 2:4]
            target_xyxy[:, 2:4] = target[:, :2]/float(S) + 0.5 * target[:, 2:4]

            iou = self.compute_iou(pred_xyxy[:, :4], target_xyxy[:, :4]) # [B, 1]
            max_iou, max_index = iou.max(0)
            max_index = max_index.data.cpu()

            coord_response_mask[i+max_index] = 1
            coord_not_response_mask[i+max_index] = 0

            # "we want the confidence score to equal the intersection over union (IOU) between the predicted box and the ground truth"
            # from the original paper of YOLO.
            bbox_target_iou[i+max_index, torch.LongTensor([4]).cpu()] = (max_iou).data.cpu()
        bbox_target_iou = Variable(bbox_target_iou).cpu()

        # BBox location/size and objectness loss for the response bboxes.
        bbox_pred_response = bbox_pred[coord_response_mask].view(-1, 5)      # [n_response, 5]
        bbox_target_response = bbox_target[coord_response_mask].view(-1, 5)  # [n_response, 5], only the first 4=(x, y, w, h) are used
        target_iou = bbox_target_iou[coord_response_mask].view(-1, 5)        # [n_response, 5], only the last 1=(conf,) is used
        loss_xy = F.mse_loss(bbox_pred_response[:, :2], bbox_target_response[:, :2], reduction='sum')
        loss_wh = F.mse_loss(torch.sqrt(bbox_pred_response[:, 2:4]), torch.sqrt(bbox_target_response[:, 2:4]), reduction='sum')
        loss_obj = F.mse_loss(bbox_pred_response[:, 4], target_iou[:, 4], reduction='sum')

        # Class probability loss for the cells which contain objects.
        loss_class = F.mse_loss(class_pred, class_target, reduction='sum')

        # Total loss
        loss = self.lambda_coord * (loss_xy + loss_wh) + loss_obj + self.lambda_noobj * loss_noobj + loss_class
        loss = loss / float(batch_size)

        return loss


# ---------------------------------------------------------------------------------------- voc.py (synthetic)
class VOCDataset(Dataset):
    def __init__(self, is_train, n_images, seed, image_size=56, grid_size=7, num_bboxes=2, num_classes=20):
        self.is_train = is_train
        self.image_size = image_size
        self.S = grid_size
        self.B = num_bboxes
        self.C = num_classes
        rng = np.random.RandomState(seed)
        colours = np.array([[1.0, 0.2, 0.2], [0.2, 1.0, 0.2], [0.2, 0.2, 1.0]], dtype=np.float32)
        self.items = []
        for _ in range(n_images):
            img = np.full((3, image_size, image_size), 0.3, dtype=np.float32) + 0.1 * rng.randn(3, image_size, image_size).astype(np.float32)
            boxes, labels = [], []
            for _ in range(rng.randint(1, 3)):
                w, h = rng.randint(10, 30), rng.randint(10, 30)
                x1, y1 = rng.randint(0, image_size - w), rng.randint(0, image_size - h)
                c = rng.randint(3)
                img[:, y1:y1 + h, x1:x1 + w] = colours[c][:, None, None] + 0.05 * rng.randn(3, h, w)
                boxes.append([x1 / image_size, y1 / image_size, (x1 + w) / image_size, (y1 + h) / image_size])
                labels.append(c)
            target = self.encode(torch.tensor(boxes, dtype=torch.float32), torch.tensor(labels))
            self.items.append((torch.from_numpy(img), target))

    def __getitem__(self, idx):
        return self.items[idx]

    def __len__(self):
        return len(self.items)

    def encode(self, boxes, labels):
        """ Encode box coordinates and class labels as one target tensor.
        Args:
            boxes: (tensor) [[x1, y1, x2, y2]_obj1, ...], normalized from 0.0 to 1.0 w.r.t. image width/height.
            labels: (tensor) [c_obj1, c_obj2, ...]
        Returns:
            An encoded tensor sized [S, S, 5 x B + C], 5=(x, y, w, h, conf)
        """

        S, B, C = self.S, self.B, self.C
        N = 5 * B + C

        target = torch.zeros(S, S, N)
        cell_size = 1.0 / float(S)
        boxes_wh = boxes[:, 2:] - boxes[:, :2] # width and height for each box, [n, 2]
        boxes_xy = (boxes[:, 2:] + boxes[:, :2]) / 2.0 # center x & y for each box, [n, 2]
        for b in range(boxes.size(0)):
            xy, wh, label = boxes_xy[b], boxes_wh[b], int(labels[b])

            ij = (xy / cell_size).ceil() - 1.0
            i, j = int(ij[0]), int(ij[1]) # y & x index which represents its location on the grid.
            x0y0 = ij * cell_size # x & y of the cell left-top corner.
            xy_normalized = (xy - x0y0) / cell_size # x & y of the box on the cell, normalized from 0.0 to 1.0.

            # TBM, remove redundant dimensions from target tensor.
            # To remove these, loss implementation also has to be modified.
            for k in range(B):
                s = 5 * k
                target[j, i, s  :s+2] = xy_normalized
                target[j, i, s+2:s+4] = wh
                target[j, i, s+4    ] = 1.0
            target[j, i, 5*B + label] = 1.0

        return target


# ---------------------------------------------------------------------------------------------- train_yolo.py
# Frequency to print/log the results.
print_freq = 5
tb_log_freq = 5

# Training hyper parameters.
init_lr = 0.001
base_lr = 0.01
momentum = 0.9
weight_decay = 5.0e-4
num_epochs = 4
batch_size = 16

# Learning rate scheduling.
def update_lr(optimizer, epoch, burnin_base, burnin_exp=4.0):
    if epoch == 0:
        lr = init_lr + (base_lr - init_lr) * math.pow(burnin_base, burnin_exp)
    elif epoch == 1:
        lr = base_lr
    elif epoch == 75:
        lr = 0.001
    elif epoch == 105:
        lr = 0.0001
    else:
        return

    for param_group in optimizer.param_groups:
        param_group['lr'] = lr

def get_lr(optimizer):
    for param_group in optimizer.param_groups:
        return param_group['lr']

if __name__ == '__main__':
    torch.manual_seed(0)
    np.random.seed(0)

    # Load YOLO model (features: randomly initialised stand-in for the pre-trained DarkNet).
    yolo = YOLOv1(darknet_features())

    # Setup loss and optimizer.
    criterion = Loss(feature_size=yolo.feature_size)
    optimizer = torch.optim.SGD(yolo.parameters(), lr=init_lr, momentum=momentum, weight_decay=weight_decay)

    # Load (synthetic) Pascal-VOC dataset.
    train_dataset = VOCDataset(True, 320, seed=0)
    train_loader = DataLoader(train_dataset, batch_size=batch_size, shuffle=True, num_workers=0)

    val_dataset = VOCDataset(False, 96, seed=1)
    val_loader = DataLoader(val_dataset, batch_size=batch_size, shuffle=False, num_workers=0)

    print('Number of training images: ', len(train_dataset))

    # Open TensorBoardX summary writer
    log_dir = datetime.now().strftime('%b%d_%H-%M-%S')
    log_dir = os.path.join('results/yolo', log_dir)
    writer = SummaryWriter(log_dir=log_dir)

    # Training loop.
    logfile = io.StringIO()  # open(os.path.join(log_dir, 'log.txt'), 'w')
    best_val_loss = np.inf

    for epoch in range(num_epochs):
        print('\n')
        print('Starting epoch {} / {}'.format(epoch, num_epochs))

        # Training.
        yolo.train()
        total_loss = 0.0
        total_batch = 0

        for i, (imgs, targets) in enumerate(train_loader):
            # Update learning rate.
            update_lr(optimizer, epoch, float(i) / float(len(train_loader) - 1))
            lr = get_lr(optimizer)

            # Load data as a batch.
            batch_size_this_iter = imgs.size(0)
            imgs = Variable(imgs)
            targets = Variable(targets)
            imgs, targets = imgs.cpu(), targets.cpu()

            # Forward to compute loss.
            preds = yolo(imgs)
            loss = criterion(preds, targets)
            loss_this_iter = loss.item()
            total_loss += loss_this_iter * batch_size_this_iter
            total_batch += batch_size_this_iter

            # Backward to update model weight.
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            # Print current loss.
            if i % print_freq == 0:
                print('Epoch [%d/%d], Iter [%d/%d], LR: %.6f, Loss: %.4f, Average Loss: %.4f'
                % (epoch, num_epochs, i, len(train_loader), lr, loss_this_iter, total_loss / float(total_batch)))

            # TensorBoard.
            n_iter = epoch * len(train_loader) + i
            if n_iter % tb_log_freq == 0:
                writer.add_scalar('train/loss', loss_this_iter, n_iter)
                writer.add_scalar('lr', lr, n_iter)

        # Validation.
        yolo.eval()
        val_loss = 0.0
        total_batch = 0

        for i, (imgs, targets) in enumerate(val_loader):
            # Load data as a batch.
            batch_size_this_iter = imgs.size(0)
            imgs = Variable(imgs)
            targets = Variable(targets)
            imgs, targets = imgs.cpu(), targets.cpu()

            # Forward to compute validation loss.
            with torch.no_grad():
                preds = yolo(imgs)
            loss = criterion(preds, targets)
            loss_this_iter = loss.item()
            val_loss += loss_this_iter * batch_size_this_iter
            total_batch += batch_size_this_iter
        val_loss /= float(total_batch)

        # Save results.
        logfile.writelines(str(epoch + 1) + '\t' + str(val_loss) + '\n')
        logfile.flush()
        VAL_LOSS.append(val_loss)
        if best_val_loss > val_loss:
            best_val_loss = val_loss
            best_state = copy.deepcopy(yolo.state_dict())  # torch.save(..., 'model_best.pth')

        # Print.
        print('Epoch [%d/%d], Val Loss: %.4f, Best Val Loss: %.4f'
        % (epoch + 1, num_epochs, val_loss, best_val_loss))

        # TensorBoard.
        writer.add_scalar('test/loss', val_loss, epoch + 1)

    writer.close()
    logfile.close()
    print('[summary] val loss first=%.4f last=%.4f best=%.4f decreased=%s' % (VAL_LOSS[0], VAL_LOSS[-1], best_val_loss, VAL_LOSS[-1] < VAL_LOSS[0]))
