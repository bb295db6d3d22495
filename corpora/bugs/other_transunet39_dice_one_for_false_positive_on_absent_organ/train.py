# Source: Beckschen/TransUNet, utils.py (DiceLoss, calculate_metric_percase, test_single_volume), trainer.py (trainer_synapse), test.py (inference), datasets/dataset_synapse.py (random_rot_flip, RandomGenerator), commit 02ef0010b36eb8328b5e689eadaf613602edf9b8
# Report: https://github.com/Beckschen/TransUNet/issues/39
# TransUNet on Synapse multi-organ CT: slice-wise training with 0.5 * CE + 0.5 * DiceLoss, SGD with
# the poly learning-rate decay, random rot90/flip augmentation, then volume-wise inference
# (test_single_volume: argmax per slice, stacked into a volume) and the per-organ Dice / HD95 of
# calculate_metric_percase averaged over test volumes. The R50-ViT encoder is replaced by a small
# U-Net, the CT volumes by synthetic 12x32x32 volumes with 3 organs of which the third is missing
# from half of the cases; medpy's dc / hd95 are re-implemented in numpy, SimpleITK output is removed.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.modules.loss import CrossEntropyLoss
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(1234)
np.random.seed(1234)
torch.set_num_threads(1)


class DiceLoss(nn.Module):
    def __init__(self, n_classes):
        super(DiceLoss, self).__init__()
        self.n_classes = n_classes

    def _one_hot_encoder(self, input_tensor):
        tensor_list = []
        for i in range(self.n_classes):
            temp_prob = input_tensor == i
            tensor_list.append(temp_prob.unsqueeze(1))
        output_tensor = torch.cat(tensor_list, dim=1)
        return output_tensor.float()

    def _dice_loss(self, score, target):
        target = target.float()
        smooth = 1e-5
        intersect = torch.sum(score * target)
        y_sum = torch.sum(target * target)
        z_sum = torch.sum(score * score)
        loss = (2 * intersect + smooth) / (z_sum + y_sum + smooth)
        loss = 1 - loss
        return loss

    def forward(self, inputs, target, weight=None, softmax=False):
        if softmax:
            inputs = torch.softmax(inputs, dim=1)
        target = self._one_hot_encoder(target)
        if weight is None:
            weight = [1] * self.n_classes
        assert inputs.size() == target.size(), 'predict {} & target {} shape do not match'.format(inputs.size(), target.size())
        loss = 0.0
        for i in range(0, self.n_classes):
            dice = self._dice_loss(inputs[:, i], target[:, i])
            loss += dice * weight[i]
        return loss / self.n_classes


def _surface(mask):
    inner = mask.copy()
    for ax in range(mask.ndim):
        inner &= np.roll(mask, 1, ax) & np.roll(mask, -1, ax)
    return np.argwhere(mask & ~inner)


def dc(result, reference):
    result = np.atleast_1d(result.astype(bool))
    reference = np.atleast_1d(reference.astype(bool))
    intersection = np.count_nonzero(result & reference)
    size_i1 = np.count_nonzero(result)
    size_i2 = np.count_nonzero(reference)
    try:
        dc = 2. * intersection / float(size_i1 + size_i2)
    except ZeroDivisionError:
        dc = 0.0
    return dc


def hd95(result, reference):
    a, b = _surface(result.astype(bool)), _surface(reference.astype(bool))
    d = np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))
    return np.percentile(np.hstack((d.min(1), d.min(0))), 95)


def calculate_metric_percase(pred, gt):
    pred[pred > 0] = 1
    gt[gt > 0] = 1
    if pred.sum() > 0 and gt.sum() > 0:
        dice = dc(pred, gt)
        hd = hd95(pred, gt)
        return dice, hd
    elif pred.sum() > 0 and gt.sum() == 0:
        return 1, 0
    else:
        return 0, 0


def test_single_volume(image, label, net, classes, patch_size=[32, 32]):
    image, label = image.squeeze(0).cpu().detach().numpy(), label.squeeze(0).cpu().detach().numpy()
    prediction = np.zeros_like(label)
    for ind in range(image.shape[0]):
        slice = image[ind, :, :]
        input = torch.from_numpy(slice).unsqueeze(0).unsqueeze(0).float()
        net.eval()
        with torch.no_grad():
            outputs = net(input)
            out = torch.argmax(torch.softmax(outputs, dim=1), dim=1).squeeze(0)
            prediction[ind] = out.cpu().detach().numpy()
    metric_list = []
    for i in range(1, classes):
        metric_list.append(calculate_metric_percase(prediction == i, label == i))
    return metric_list


class SmallUNet(nn.Module):
    def __init__(self, num_classes, c=16):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(1, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True))
        self.enc2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, padding=1), nn.BatchNorm2d(2 * c), nn.ReLU(inplace=True))
        self.dec = nn.Sequential(nn.Conv2d(3 * c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True))
        self.segmentation_head = nn.Conv2d(c, num_classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        d = self.dec(torch.cat([e1, F.interpolate(e2, scale_factor=2, mode='bilinear', align_corners=False)], 1))
        return self.segmentation_head(d)


def make_volume(rng, depth=12, size=32, with_organ3=True):
    yy, xx = np.mgrid[:size, :size]
    label = np.zeros((depth, size, size), np.int64)
    c1 = rng.uniform(10, 14, 2); c2 = rng.uniform(20, 24, 2); c3 = rng.uniform(18, 22, 2) + [0, -10]
    for z in range(depth):
        r1 = 7 + 2 * np.sin(np.pi * z / depth)
        label[z][(yy - c1[0]) ** 2 + (xx - c1[1]) ** 2 < r1 ** 2] = 1
        if 2 <= z < depth - 2:
            label[z][(yy - c2[0]) ** 2 + (xx - c2[1]) ** 2 < 16] = 2
        if with_organ3 and 4 <= z < depth - 3:
            label[z][(yy - c3[0]) ** 2 + (xx - c3[1]) ** 2 < 9] = 3
    intensity = np.array([0.0, 1.0, 1.6, 2.0])
    image = intensity[label] + rng.normal(0, 0.45, label.shape)
    return image.astype(np.float32), label


def random_rot_flip(image, label):
    k = np.random.randint(0, 4)
    image = np.rot90(image, k)
    label = np.rot90(label, k)
    axis = np.random.randint(0, 2)
    image = np.flip(image, axis=axis).copy()
    label = np.flip(label, axis=axis).copy()
    return image, label


class RandomGenerator(object):
    def __call__(self, sample):
        image, label = sample['image'], sample['label']
        if np.random.random() > 0.5:
            image, label = random_rot_flip(image, label)
        image = torch.from_numpy(image.astype(np.float32)).unsqueeze(0)
        label = torch.from_numpy(label.astype(np.float32))
        return {'image': image, 'label': label.long()}


class SliceDataset(Dataset):
    def __init__(self, volumes, transform=None):
        self.items = [(img[z], lab[z]) for img, lab in volumes for z in range(img.shape[0])]
        self.transform = transform

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        image, label = self.items[idx]
        sample = {'image': image, 'label': label}
        if self.transform:
            sample = self.transform(sample)
        return sample


class Args:
    num_classes = 4
    base_lr = 0.05
    batch_size = 24
    max_epochs = 10
    img_size = 32


def trainer_synapse(args, model, db_train):
    base_lr = args.base_lr
    num_classes = args.num_classes
    trainloader = DataLoader(db_train, batch_size=args.batch_size, shuffle=True)
    model.train()
    ce_loss = CrossEntropyLoss()
    dice_loss = DiceLoss(num_classes)
    optimizer = optim.SGD(model.parameters(), lr=base_lr, momentum=0.9, weight_decay=0.0001)
    iter_num = 0
    max_epoch = args.max_epochs
    max_iterations = args.max_epochs * len(trainloader)
    print("{} iterations per epoch. {} max iterations ".format(len(trainloader), max_iterations))
    for epoch_num in range(max_epoch):
        for i_batch, sampled_batch in enumerate(trainloader):
            image_batch, label_batch = sampled_batch['image'], sampled_batch['label']
            outputs = model(image_batch)
            loss_ce = ce_loss(outputs, label_batch[:].long())
            loss_dice = dice_loss(outputs, label_batch, softmax=True)
            loss = 0.5 * loss_ce + 0.5 * loss_dice
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            lr_ = base_lr * (1.0 - iter_num / max_iterations) ** 0.9
            for param_group in optimizer.param_groups:
                param_group['lr'] = lr_
            iter_num = iter_num + 1
        print('epoch %d : loss : %f, loss_ce: %f' % (epoch_num, loss.item(), loss_ce.item()))
    return "Training Finished!"


def inference(args, model, test_volumes):
    model.eval()
    metric_list = 0.0
    for i_batch, (image, label) in enumerate(test_volumes):
        image, label = torch.from_numpy(image)[None], torch.from_numpy(label)[None]
        metric_i = test_single_volume(image, label, model, classes=args.num_classes, patch_size=[args.img_size, args.img_size])
        metric_list += np.array(metric_i)
        print('idx %d case case%04d mean_dice %f mean_hd95 %f' % (i_batch, i_batch, np.mean(metric_i, axis=0)[0], np.mean(metric_i, axis=0)[1]))
    metric_list = metric_list / len(test_volumes)
    for i in range(1, args.num_classes):
        print('Mean class %d mean_dice %f mean_hd95 %f' % (i, metric_list[i - 1][0], metric_list[i - 1][1]))
    performance = np.mean(metric_list, axis=0)[0]
    mean_hd95 = np.mean(metric_list, axis=0)[1]
    print('Testing performance in best val model: mean_dice : %f mean_hd95 : %f' % (performance, mean_hd95))
    return "Testing Finished!"


if __name__ == "__main__":
    args = Args()
    rng = np.random.default_rng(0)
    train_volumes = [make_volume(rng, with_organ3=True) for _ in range(12)]
    test_volumes = [make_volume(rng, with_organ3=(i % 2 == 0)) for i in range(8)]
    db_train = SliceDataset(train_volumes, transform=RandomGenerator())
    print("The length of train set is: {}".format(len(db_train)))
    model = SmallUNet(args.num_classes)
    print(trainer_synapse(args, model, db_train))
    print(inference(args, model, test_volumes))
