# Source: microsoft/ProDA, models/adaptation_modelv2.py (CustomModel.step_distillation), models/utils.py (cross_entropy2d), commit 9ba80c7dbbd23ba1a126e3f4003a72f27d121a1f
# Report: https://github.com/microsoft/ProDA/issues/20
# ProDA's distillation stage: a student segmentation network is trained on labelled source
# images (cross_entropy2d), on target images with the pseudo labels of the adapted teacher,
# and with a KL distillation term towards the teacher's soft predictions. DeepLabV2 /
# ResNet-101, GTA5 -> Cityscapes and the strong augmentations are reduced to a small conv
# net on synthetic 16x16 images with 4 classes; the target domain has a colour shift. The
# teacher (the adapted model of the previous stage) is trained here on the target domain.
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(1)

N_CLASS = 4


class Opt:
    distillation = 1.0
    rce = False
    rce_alpha = 0.1
    rce_beta = 1.0
    S_pseudo = 0


def make_images(n, shift, seed):
    g = torch.Generator().manual_seed(seed)
    label = torch.zeros(n, 16, 16, dtype=torch.long)
    for i in range(n):
        cx, cy = torch.randint(0, 16, (2,), generator=g).tolist()
        yy, xx = torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij")
        label[i] = ((xx > cx).long() + 2 * (yy > cy).long())
    colors = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 0]])
    img = colors[label].permute(0, 3, 1, 2) + 0.6 * torch.randn(n, 3, 16, 16, generator=g)
    img = img + torch.tensor(shift).view(1, 3, 1, 1)
    return img, label


def cross_entropy2d(input, target, weight=None, size_average=True, reduction='mean'):
    n, c, h, w = input.size()
    nt, ht, wt = target.size()
    if h != ht or w != wt:
        raise NotImplementedError('sizes of input and label are not consistent')
    return F.cross_entropy(input, target, weight=weight, ignore_index=250, reduction=reduction)


class SegNet(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, padding=2, dilation=2), nn.ReLU())
        self.classifier = nn.Conv2d(width, N_CLASS, 1)

    def forward(self, x, ssl=False):
        return {'out': self.classifier(self.body(x))}


class CustomModel:
    def __init__(self, opt, teacher):
        self.opt = opt
        self.BaseNet_DP = SegNet()
        self.teacher_DP = teacher
        self.BaseOpti = torch.optim.SGD(self.BaseNet_DP.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)

    def step_distillation(self, source_x, source_label, target_x, target_imageS=None, target_params=None, target_lp=None):

        source_out = self.BaseNet_DP(source_x, ssl=True)
        source_outputUp = F.interpolate(source_out['out'], size=source_x.size()[2:], mode='bilinear', align_corners=True)
        loss_GTA = cross_entropy2d(input=source_outputUp, target=source_label)
        loss_GTA.backward()

        threshold_arg = target_lp.unsqueeze(1)
        target_out = self.BaseNet_DP(target_x)
        target_out['out'] = F.interpolate(target_out['out'], size=threshold_arg.shape[2:], mode='bilinear', align_corners=True)
        batch, _, w, h = threshold_arg.shape
        loss = cross_entropy2d(input=target_out['out'], target=threshold_arg.reshape([batch, w, h]), size_average=True, reduction='mean')

        if self.opt.distillation > 0:
            student = F.softmax(target_out['out'], dim=1)
            with torch.no_grad():
                teacher_out = self.teacher_DP(target_imageS)
                teacher_out['out'] = F.interpolate(teacher_out['out'], size=threshold_arg.shape[2:], mode='bilinear', align_corners=True)
                teacher = F.softmax(teacher_out['out'], dim=1)

            loss_kd = F.kl_div(student, teacher, reduction='none')
            mask = (teacher != 250).float()
            loss_kd = (loss_kd * mask).sum() / mask.sum()
            loss = loss + self.opt.distillation * loss_kd

        loss.backward()
        self.BaseOpti.step()
        self.BaseOpti.zero_grad()
        return loss_GTA.item(), loss.item(), loss_kd.item()


def train_teacher(target_x, target_y):
    teacher = SegNet(width=32)
    opt = torch.optim.Adam(teacher.parameters(), lr=3e-3)
    for step in range(150):
        idx = torch.randint(0, target_x.size(0), (16,))
        loss = cross_entropy2d(teacher(target_x[idx])['out'], target_y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return teacher.eval()


def evaluate(net, teacher, x, y):
    with torch.no_grad():
        s = net(x)['out']
        t = teacher(x)['out']
        acc = (s.argmax(1) == y).float().mean().item()
        kl = F.kl_div(F.log_softmax(s, 1), F.softmax(t, 1), reduction='none').sum(1).mean().item()
    return acc, kl


def main():
    source_x, source_y = make_images(256, [0.0, 0.0, 0.0], 0)
    target_x, target_y = make_images(256, [0.8, -0.5, 0.4], 1)
    val_x, val_y = make_images(64, [0.8, -0.5, 0.4], 2)
    teacher = train_teacher(target_x, target_y)
    with torch.no_grad():
        target_lp = teacher(target_x)['out'].argmax(1)
    model = CustomModel(Opt(), teacher)
    for epoch in range(5):
        perm = torch.randperm(256)
        logs = []
        for i in range(0, 256, 16):
            idx = perm[i:i + 16]
            logs.append(model.step_distillation(source_x[idx], source_y[idx], target_x[idx], target_imageS=target_x[idx], target_lp=target_lp[idx]))
        acc, kl = evaluate(model.BaseNet_DP, teacher, val_x, val_y)
        n = len(logs)
        print(f"epoch {epoch}: loss_GTA {sum(l[0] for l in logs) / n:.4f} loss {sum(l[1] for l in logs) / n:.4f} "
              f"loss_kd {sum(l[2] for l in logs) / n:.4f} | target val acc {acc:.4f} KL(teacher||student) {kl:.4f}")


if __name__ == '__main__':
    main()
