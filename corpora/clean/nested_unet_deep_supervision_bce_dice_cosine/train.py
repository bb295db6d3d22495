# Source: 4uiiurz1/pytorch-nested-unet, train.py + archs.py + losses.py + metrics.py + dataset.py + utils.py,
# commit 557ea02f0b5d45ec171aae2282d2cd21562a633e
# https://github.com/4uiiurz1/pytorch-nested-unet
#
# UNet++ (NestedUNet) with deep supervision: four 1x1 heads on x0_1..x0_4, the BCE+Dice loss averaged over the
# four outputs, IoU measured on the last output only (sigmoid > 0.5 on .data in numpy); the optimizer is built
# from filter(lambda p: p.requires_grad, ...), the Dataset returns a third item (a dict of ids) that the loop
# ignores, drop_last=True on the training loader, CosineAnnealingLR stepped per epoch, best-IoU bookkeeping.
# Adaptation: the DSB2018 nuclei images are not shipped, so 96 synthetic 32x32 RGB images with elliptical
# "nuclei" and their binary masks are generated; albumentations (RandomRotate90/Flip/colour/Normalize) become
# numpy rot90/flip + per-image normalisation; nb_filter [32..512] -> [4..64]; input 96 -> 32; epochs 100 -> 8;
# optimizer SGD -> Adam (a choice of the script) lr 1e-3 -> 3e-3; num_workers 4 -> 0; .cuda() dropped; no
# config.yml / log.csv / model.pth files; tqdm bars removed.
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from sklearn.model_selection import train_test_split
from torch.optim import lr_scheduler


# ------------------------------------------------------------------------------------------------ utils.py
class AverageMeter(object):
    """Computes and stores the average and current value"""

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


# ---------------------------------------------------------------------------------------------- metrics.py
def iou_score(output, target):
    smooth = 1e-5

    if torch.is_tensor(output):
        output = torch.sigmoid(output).data.cpu().numpy()
    if torch.is_tensor(target):
        target = target.data.cpu().numpy()
    output_ = output > 0.5
    target_ = target > 0.5
    intersection = (output_ & target_).sum()
    union = (output_ | target_).sum()

    return (intersection + smooth) / (union + smooth)


# ----------------------------------------------------------------------------------------------- losses.py
class BCEDiceLoss(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, input, target):
        bce = F.binary_cross_entropy_with_logits(input, target)
        smooth = 1e-5
        input = torch.sigmoid(input)
        num = target.size(0)
        input = input.view(num, -1)
        target = target.view(num, -1)
        intersection = (input * target)
        dice = (2. * intersection.sum(1) + smooth) / (input.sum(1) + target.sum(1) + smooth)
        dice = 1 - dice.sum() / num
        return 0.5 * bce + dice


# ------------------------------------------------------------------------------------------------ archs.py
class VGGBlock(nn.Module):
    def __init__(self, in_channels, middle_channels, out_channels):
        super().__init__()
        self.relu = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_channels, middle_channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(middle_channels)
        self.conv2 = nn.Conv2d(middle_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)

        return out


class NestedUNet(nn.Module):
    def __init__(self, num_classes, input_channels=3, deep_supervision=False, **kwargs):
        super().__init__()

        nb_filter = [4, 8, 16, 32, 64]

        self.deep_supervision = deep_supervision

        self.pool = nn.MaxPool2d(2, 2)
        self.up = nn.Upsample(scale_factor=2, mode='bilinear', align_corners=True)

        self.conv0_0 = VGGBlock(input_channels, nb_filter[0], nb_filter[0])
        self.conv1_0 = VGGBlock(nb_filter[0], nb_filter[1], nb_filter[1])
        self.conv2_0 = VGGBlock(nb_filter[1], nb_filter[2], nb_filter[2])
        self.conv3_0 = VGGBlock(nb_filter[2], nb_filter[3], nb_filter[3])
        self.conv4_0 = VGGBlock(nb_filter[3], nb_filter[4], nb_filter[4])

        self.conv0_1 = VGGBlock(nb_filter[0]+nb_filter[1], nb_filter[0], nb_filter[0])
        self.conv1_1 = VGGBlock(nb_filter[1]+nb_filter[2], nb_filter[1], nb_filter[1])
        self.conv2_1 = VGGBlock(nb_filter[2]+nb_filter[3], nb_filter[2], nb_filter[2])
        self.conv3_1 = VGGBlock(nb_filter[3]+nb_filter[4], nb_filter[3], nb_filter[3])

        self.conv0_2 = VGGBlock(nb_filter[0]*2+nb_filter[1], nb_filter[0], nb_filter[0])
        self.conv1_2 = VGGBlock(nb_filter[1]*2+nb_filter[2], nb_filter[1], nb_filter[1])
        self.conv2_2 = VGGBlock(nb_filter[2]*2+nb_filter[3], nb_filter[2], nb_filter[2])

        self.conv0_3 = VGGBlock(nb_filter[0]*3+nb_filter[1], nb_filter[0], nb_filter[0])
        self.conv1_3 = VGGBlock(nb_filter[1]*3+nb_filter[2], nb_filter[1], nb_filter[1])

        self.conv0_4 = VGGBlock(nb_filter[0]*4+nb_filter[1], nb_filter[0], nb_filter[0])

        if self.deep_supervision:
            self.final1 = nn.Conv2d(nb_filter[0], num_classes, kernel_size=1)
            self.final2 = nn.Conv2d(nb_filter[0], num_classes, kernel_size=1)
            self.final3 = nn.Conv2d(nb_filter[0], num_classes, kernel_size=1)
            self.final4 = nn.Conv2d(nb_filter[0], num_classes, kernel_size=1)
        else:
            self.final = nn.Conv2d(nb_filter[0], num_classes, kernel_size=1)

    def forward(self, input):
        x0_0 = self.conv0_0(input)
        x1_0 = self.conv1_0(self.pool(x0_0))
        x0_1 = self.conv0_1(torch.cat([x0_0, self.up(x1_0)], 1))

        x2_0 = self.conv2_0(self.pool(x1_0))
        x1_1 = self.conv1_1(torch.cat([x1_0, self.up(x2_0)], 1))
        x0_2 = self.conv0_2(torch.cat([x0_0, x0_1, self.up(x1_1)], 1))

        x3_0 = self.conv3_0(self.pool(x2_0))
        x2_1 = self.conv2_1(torch.cat([x2_0, self.up(x3_0)], 1))
        x1_2 = self.conv1_2(torch.cat([x1_0, x1_1, self.up(x2_1)], 1))
        x0_3 = self.conv0_3(torch.cat([x0_0, x0_1, x0_2, self.up(x1_2)], 1))

        x4_0 = self.conv4_0(self.pool(x3_0))
        x3_1 = self.conv3_1(torch.cat([x3_0, self.up(x4_0)], 1))
        x2_2 = self.conv2_2(torch.cat([x2_0, x2_1, self.up(x3_1)], 1))
        x1_3 = self.conv1_3(torch.cat([x1_0, x1_1, x1_2, self.up(x2_2)], 1))
        x0_4 = self.conv0_4(torch.cat([x0_0, x0_1, x0_2, x0_3, self.up(x1_3)], 1))

        if self.deep_supervision:
            output1 = self.final1(x0_1)
            output2 = self.final2(x0_2)
            output3 = self.final3(x0_3)
            output4 = self.final4(x0_4)
            return [output1, output2, output3, output4]

        else:
            output = self.final(x0_4)
            return output


# ---------------------------------------------------------------------------------------------- dataset.py
def make_nuclei(n, size=32, seed=0):
    """DSB2018 stand-in: purple-ish elliptical nuclei on a dark textured background, uint8 HWC + mask HW1."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    images, masks = {}, {}
    for i in range(n):
        mask = np.zeros((size, size), bool)
        for _ in range(rng.randint(2, 6)):
            cy, cx = rng.uniform(3, size - 3, 2)
            ry, rx = rng.uniform(2, 5, 2)
            mask |= ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
        colour = rng.uniform(120, 220, 3)
        img = rng.uniform(10, 60, (size, size, 3)) + mask[..., None] * colour
        img_id = f"{i:06x}"
        images[img_id] = np.clip(img, 0, 255).astype(np.uint8)
        masks[img_id] = (mask[..., None] * 255).astype(np.uint8)
    return images, masks


class Dataset(torch.utils.data.Dataset):
    def __init__(self, img_ids, images, masks, num_classes, transform=None):
        self.img_ids = img_ids
        self.images, self.masks = images, masks
        self.num_classes = num_classes
        self.transform = transform

    def __len__(self):
        return len(self.img_ids)

    def __getitem__(self, idx):
        img_id = self.img_ids[idx]

        img = self.images[img_id]
        mask = np.dstack([self.masks[img_id] for _ in range(self.num_classes)])

        if self.transform is not None:
            augmented = self.transform(image=img, mask=mask)
            img = augmented['image']
            mask = augmented['mask']

        img = img.astype('float32') / 255
        img = img.transpose(2, 0, 1)
        mask = mask.astype('float32') / 255
        mask = mask.transpose(2, 0, 1)

        return np.ascontiguousarray(img), np.ascontiguousarray(mask), {'img_id': img_id}


class TrainTransform:
    """RandomRotate90 + Flip + Normalize (albumentations stand-in)."""
    def __init__(self, seed=0):
        self.rng = np.random.RandomState(seed)

    def __call__(self, image, mask):
        k = self.rng.randint(4)
        image, mask = np.rot90(image, k), np.rot90(mask, k)
        if self.rng.rand() < 0.5:
            image, mask = image[:, ::-1], mask[:, ::-1]
        return {'image': normalize(image), 'mask': mask}


def normalize(image):
    mean, std = np.array([0.485, 0.456, 0.406]) * 255, np.array([0.229, 0.224, 0.225]) * 255
    return ((image - mean) / std * 255).astype('float32')


def val_transform(image, mask):
    return {'image': normalize(image), 'mask': mask}


# ------------------------------------------------------------------------------------------------ train.py
def train(config, train_loader, model, criterion, optimizer):
    avg_meters = {'loss': AverageMeter(),
                  'iou': AverageMeter()}

    model.train()

    for input, target, _ in train_loader:
        # compute output
        if config['deep_supervision']:
            outputs = model(input)
            loss = 0
            for output in outputs:
                loss += criterion(output, target)
            loss /= len(outputs)
            iou = iou_score(outputs[-1], target)
        else:
            output = model(input)
            loss = criterion(output, target)
            iou = iou_score(output, target)

        # compute gradient and do optimizing step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        avg_meters['loss'].update(loss.item(), input.size(0))
        avg_meters['iou'].update(iou, input.size(0))

    return OrderedDict([('loss', avg_meters['loss'].avg),
                        ('iou', avg_meters['iou'].avg)])


def validate(config, val_loader, model, criterion):
    avg_meters = {'loss': AverageMeter(),
                  'iou': AverageMeter()}

    # switch to evaluate mode
    model.eval()

    with torch.no_grad():
        for input, target, _ in val_loader:
            # compute output
            if config['deep_supervision']:
                outputs = model(input)
                loss = 0
                for output in outputs:
                    loss += criterion(output, target)
                loss /= len(outputs)
                iou = iou_score(outputs[-1], target)
            else:
                output = model(input)
                loss = criterion(output, target)
                iou = iou_score(output, target)

            avg_meters['loss'].update(loss.item(), input.size(0))
            avg_meters['iou'].update(iou, input.size(0))

    return OrderedDict([('loss', avg_meters['loss'].avg),
                        ('iou', avg_meters['iou'].avg)])


def main():
    torch.manual_seed(0)
    config = {'name': 'dsb2018_32_NestedUNet_wDS', 'epochs': 8, 'batch_size': 8, 'arch': 'NestedUNet',
              'deep_supervision': True, 'input_channels': 3, 'num_classes': 1, 'loss': 'BCEDiceLoss',
              'optimizer': 'Adam', 'lr': 3e-3, 'momentum': 0.9, 'weight_decay': 1e-4, 'nesterov': False,
              'scheduler': 'CosineAnnealingLR', 'min_lr': 1e-5, 'early_stopping': -1, 'num_workers': 0}

    print('-' * 20)
    for key in config:
        print('%s: %s' % (key, config[key]))
    print('-' * 20)

    criterion = BCEDiceLoss()

    # create model
    print("=> creating model %s" % config['arch'])
    model = NestedUNet(config['num_classes'], config['input_channels'], config['deep_supervision'])

    params = filter(lambda p: p.requires_grad, model.parameters())
    if config['optimizer'] == 'Adam':
        optimizer = optim.Adam(
            params, lr=config['lr'], weight_decay=config['weight_decay'])
    elif config['optimizer'] == 'SGD':
        optimizer = optim.SGD(params, lr=config['lr'], momentum=config['momentum'],
                              nesterov=config['nesterov'], weight_decay=config['weight_decay'])
    else:
        raise NotImplementedError

    scheduler = lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=config['epochs'], eta_min=config['min_lr'])

    # Data loading code
    images, masks = make_nuclei(96)
    img_ids = sorted(images)
    train_img_ids, val_img_ids = train_test_split(img_ids, test_size=0.2, random_state=41)

    train_dataset = Dataset(img_ids=train_img_ids, images=images, masks=masks,
                            num_classes=config['num_classes'], transform=TrainTransform())
    val_dataset = Dataset(img_ids=val_img_ids, images=images, masks=masks,
                          num_classes=config['num_classes'], transform=val_transform)
    train_loader = torch.utils.data.DataLoader(
        train_dataset,
        batch_size=config['batch_size'],
        shuffle=True,
        num_workers=config['num_workers'],
        drop_last=True)
    val_loader = torch.utils.data.DataLoader(
        val_dataset,
        batch_size=config['batch_size'],
        shuffle=False,
        num_workers=config['num_workers'],
        drop_last=False)

    log = OrderedDict([('epoch', []), ('lr', []), ('loss', []), ('iou', []), ('val_loss', []), ('val_iou', [])])

    best_iou = 0
    trigger = 0
    for epoch in range(config['epochs']):
        print('Epoch [%d/%d]' % (epoch, config['epochs']))

        # train for one epoch
        train_log = train(config, train_loader, model, criterion, optimizer)
        # evaluate on validation set
        val_log = validate(config, val_loader, model, criterion)

        scheduler.step()

        print('loss %.4f - iou %.4f - val_loss %.4f - val_iou %.4f'
              % (train_log['loss'], train_log['iou'], val_log['loss'], val_log['iou']))

        log['epoch'].append(epoch)
        log['lr'].append(config['lr'])
        log['loss'].append(train_log['loss'])
        log['iou'].append(train_log['iou'])
        log['val_loss'].append(val_log['loss'])
        log['val_iou'].append(val_log['iou'])

        trigger += 1

        if val_log['iou'] > best_iou:
            best_iou = val_log['iou']
            print("=> saved best model")
            trigger = 0

        # early stopping
        if config['early_stopping'] >= 0 and trigger >= config['early_stopping']:
            print("=> early stopping")
            break
    print(f"[summary] val_iou first={log['val_iou'][0]:.4f} last={log['val_iou'][-1]:.4f} "
          f"increased={log['val_iou'][-1] > log['val_iou'][0]}")


if __name__ == '__main__':
    main()
