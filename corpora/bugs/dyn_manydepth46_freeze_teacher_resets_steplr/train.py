# Source: nianticlabs/manydepth, manydepth/trainer.py (Trainer.__init__, train, freeze_teacher, run_epoch, compute_losses), manydepth/options.py, commit a36212bda725438c0b96ce0793a92f9c148914bf
# Report: https://github.com/nianticlabs/manydepth/issues/46
# ManyDepth: a multi-frame depth network (encoder + depth) is trained by self-supervised
# reprojection of the previous frame, together with a single-frame teacher (mono_encoder +
# mono_depth) and a pose network; at freeze_teacher_epoch the teacher and pose networks are
# frozen and the optimizer is rebuilt over the multi-frame network only. Adam (lr 1e-4),
# StepLR(step 15, gamma 0.1), 20 epochs, as in options.py. The ResNet encoders, cost
# volume and KITTI frames are reduced to small 1-D conv nets on synthetic image rows: the
# previous frame is the current one seen from a camera shifted sideways, so pixels move by
# shift * disparity.
import torch
from torch import nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(0)
torch.set_num_threads(1)

W = 64


class Options:
    learning_rate = 1e-4
    num_epochs = 20
    scheduler_step_size = 15
    freeze_teacher_epoch = 15
    freeze_teacher_step = -1
    freeze_teacher_and_pose = False
    batch_size = 12
    disparity_smoothness = 1e-3
    log_frequency = 250


def make_scenes(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.linspace(-1, 1, W)
    freqs = torch.rand(n, 4, 1, generator=g) * 6 + 2
    phases = torch.rand(n, 4, 1, generator=g) * 6.28
    texture = lambda u: torch.sin(freqs * u.unsqueeze(1) + phases).sum(1)
    disp = 0.2 + 0.6 * torch.sigmoid(3 * torch.sin(x * (torch.rand(n, 1, generator=g) * 3 + 1) + torch.rand(n, 1, generator=g) * 6))
    shift = (torch.rand(n, 1, generator=g) * 0.1 + 0.05)
    prev = texture(x.expand(n, W))
    cur = texture(x + shift * disp)
    noise = 0.05 * torch.randn(n, W, generator=g)
    return [{("color", 0, 0): (cur + noise)[i:i + Options.batch_size, None, None],
             ("color", -1, 0): prev[i:i + Options.batch_size, None, None],
             "disp_gt": disp[i:i + Options.batch_size]} for i in range(0, n, Options.batch_size)]


def conv_net(c_in, c_out, act):
    return nn.Sequential(nn.Conv1d(c_in, 32, 5, padding=2), nn.ELU(), nn.Conv1d(32, 32, 5, padding=2), nn.ELU(),
                         nn.Conv1d(32, c_out, 5, padding=2), act)


class DepthNet(nn.Module):
    def __init__(self, n_frames):
        super().__init__()
        self.net = conv_net(n_frames, 1, nn.Sigmoid())

    def forward(self, frames):
        return {("disp", 0): self.net(torch.cat(frames, 1).squeeze(2)).unsqueeze(2)}


class PoseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(conv_net(2, 8, nn.ELU()), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, 1))

    def forward(self, frames):
        return 0.1 * torch.tanh(self.net(torch.cat(frames, 1).squeeze(2)))


def warp(src, disp, shift):
    x = torch.linspace(-1, 1, W).view(1, 1, W, 1)
    gx = x + shift.view(-1, 1, 1, 1) * disp.permute(0, 1, 3, 2)
    grid = torch.cat([gx, torch.zeros_like(gx)], -1)
    return F.grid_sample(src, grid, padding_mode="border", align_corners=True)


def get_smooth_loss(disp, img):
    grad_disp_x = torch.abs(disp[:, :, :, :-1] - disp[:, :, :, 1:])
    grad_img_x = torch.mean(torch.abs(img[:, :, :, :-1] - img[:, :, :, 1:]), 1, keepdim=True)
    return (grad_disp_x * torch.exp(-grad_img_x)).mean()


class Trainer:
    def __init__(self, options):
        self.opt = options
        self.models = {}
        self.parameters_to_train = []
        self.train_teacher_and_pose = not self.opt.freeze_teacher_and_pose

        self.models["depth"] = DepthNet(2)
        self.parameters_to_train += list(self.models["depth"].parameters())
        self.models["mono_depth"] = DepthNet(1)
        if self.train_teacher_and_pose:
            self.parameters_to_train += list(self.models["mono_depth"].parameters())
        self.models["pose"] = PoseNet()
        if self.train_teacher_and_pose:
            self.parameters_to_train += list(self.models["pose"].parameters())

        self.model_optimizer = optim.Adam(self.parameters_to_train, self.opt.learning_rate)
        self.model_lr_scheduler = optim.lr_scheduler.StepLR(
            self.model_optimizer, self.opt.scheduler_step_size, 0.1)

        self.train_loader = make_scenes(96, 0)
        self.val_loader = make_scenes(48, 1)

    def set_train(self):
        for k, m in self.models.items():
            if self.train_teacher_and_pose:
                m.train()
            else:
                if k in ['depth']:
                    m.train()

    def set_eval(self):
        for m in self.models.values():
            m.eval()

    def train(self):
        self.epoch = 0
        self.step = 0
        for self.epoch in range(self.opt.num_epochs):
            if self.epoch == self.opt.freeze_teacher_epoch:
                self.freeze_teacher()

            self.run_epoch()

    def freeze_teacher(self):
        if self.train_teacher_and_pose:
            self.train_teacher_and_pose = False
            print('freezing teacher and pose networks!')

            # here we reinitialise our optimizer to ensure there are no updates to the
            # teacher and pose networks
            self.parameters_to_train = []
            self.parameters_to_train += list(self.models["depth"].parameters())
            self.model_optimizer = optim.Adam(self.parameters_to_train, self.opt.learning_rate)
            self.model_lr_scheduler = optim.lr_scheduler.StepLR(
                self.model_optimizer, self.opt.scheduler_step_size, 0.1)

            self.set_eval()
            self.set_train()

    def run_epoch(self):
        self.set_train()
        lr = self.model_optimizer.param_groups[0]["lr"]
        train_losses = []
        for batch_idx, inputs in enumerate(self.train_loader):
            outputs, losses = self.process_batch(inputs, is_train=True)
            self.model_optimizer.zero_grad()
            losses["loss"].backward()
            self.model_optimizer.step()
            train_losses.append(losses["loss"].item())

            if self.step == self.opt.freeze_teacher_step:
                self.freeze_teacher()

            self.step += 1
        self.model_lr_scheduler.step()
        print("epoch {:2d} lr {:.0e} train loss {:.5f} | val reproj {:.5f} disp err {:.5f}".format(
            self.epoch, lr, sum(train_losses) / len(train_losses), *self.val()))

    def process_batch(self, inputs, is_train=False):
        outputs = {}
        cur, prev = inputs[("color", 0, 0)], inputs[("color", -1, 0)]
        pose = self.models["pose"]([prev, cur])
        if not self.train_teacher_and_pose:
            pose = pose.detach()
        mono = self.models["mono_depth"]([cur])
        outputs[("mono_disp", 0)] = mono[("disp", 0)]
        outputs.update(self.models["depth"]([cur, prev]))
        outputs[("color", -1, 0)] = warp(prev, outputs[("disp", 0)], pose)
        outputs[("mono_color", -1, 0)] = warp(prev, outputs[("mono_disp", 0)], pose)
        losses = self.compute_losses(inputs, outputs, is_multi=True)
        if self.train_teacher_and_pose:
            losses["loss"] = losses["loss"] + self.compute_losses(inputs, {("disp", 0): outputs[("mono_disp", 0)],
                                                                           ("color", -1, 0): outputs[("mono_color", -1, 0)]})["loss"]
        return outputs, losses

    def compute_losses(self, inputs, outputs, is_multi=False):
        losses = {}
        disp = outputs[("disp", 0)]
        target = inputs[("color", 0, 0)]
        reprojection_loss = torch.abs(outputs[("color", -1, 0)] - target).mean()
        if is_multi:
            consistency_loss = torch.abs(disp - outputs[("mono_disp", 0)].detach()).mean() * 0.1
        else:
            consistency_loss = 0
        mean_disp = disp.mean(3, True)
        norm_disp = disp / (mean_disp + 1e-7)
        smooth_loss = get_smooth_loss(norm_disp, target)
        losses["reproj_loss"] = reprojection_loss
        losses["loss"] = reprojection_loss + consistency_loss + self.opt.disparity_smoothness * smooth_loss
        return losses

    def val(self):
        self.set_eval()
        reproj, err, n = 0.0, 0.0, 0
        with torch.no_grad():
            for inputs in self.val_loader:
                outputs, losses = self.process_batch(inputs)
                reproj += float(losses["reproj_loss"])
                err += float(torch.abs(outputs[("disp", 0)].squeeze(1).squeeze(1) - inputs["disp_gt"]).mean())
                n += 1
        self.set_train()
        return reproj / n, err / n


if __name__ == "__main__":
    Trainer(Options()).train()
