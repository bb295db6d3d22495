# Source: conditionWang/NTL, src/augmentation/gan_aug_cifar_sm.py, commit c183e7157ec29d3ab7c8e15d36bbc965911f8827
# Report: https://github.com/conditionWang/NTL/issues/3
# NTL's GAN-based domain augmentation: a conditional GAN (generator + discriminator with an
# adversarial and an auxiliary class head, plus an information loss) is first trained on the
# source domain; then, for each augmentation round and each of 4 directions, copies of both
# networks are loaded, a joint Adam over both copies is built, and the generator copy is pushed
# away from the source features (clamped MMD) while keeping its class (auxiliary cross-entropy),
# with a quarter-slice of the generator's conv gradients zeroed per direction. CIFAR-10 is
# replaced by synthetic 3x16x16 class patterns, the networks are narrowed (same layer kinds),
# the checkpoint files by in-memory state dicts, image files by returned tensors, and cv2 /
# torchvision / CUDA are removed. The augmented samples are scored by the source-trained
# discriminator (class agreement, feature MMD to the source).
import argparse
import copy
import itertools
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--n_epochs", type=int, default=4, help="number of epochs of training")
parser.add_argument("--n_epochs_aug", type=int, default=1, help="number of epochs of augmentation")
parser.add_argument("--batch_size", type=int, default=64, help="size of the batches")
parser.add_argument("--lr", type=float, default=0.001, help="adam: learning rate")
parser.add_argument("--b1", type=float, default=0.5, help="adam: decay of first order momentum of gradient")
parser.add_argument("--b2", type=float, default=0.999, help="adam: decay of first order momentum of gradient")
parser.add_argument("--latent_dim", type=int, default=32, help="dimensionality of the latent space")
parser.add_argument("--n_classes", type=int, default=10, help="number of classes for dataset")
parser.add_argument("--img_size", type=int, default=16, help="size of each image dimension")
parser.add_argument("--after_size", type=int, default=1, help="size of each image dimension")
parser.add_argument("--channels", type=int, default=3, help="number of image channels")
parser.add_argument("--sample_interval", type=int, default=8, help="interval between image sampling")
parser.add_argument("--direction", type=int, default=4, help="the direction of augmentation")
parser.add_argument("--data", type=str, default='cifar', help="source domain")
parser.add_argument("--aug_number", type=int, default=2, help="source domain")
parser.add_argument("--model_load", type=bool, default=True, help="source domain")

opt = parser.parse_args([])

SEED = 2021
torch.set_num_threads(1)


def setup_seed(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


setup_seed(SEED)

FloatTensor = torch.FloatTensor
LongTensor = torch.LongTensor


def weights_init_normal(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
        torch.nn.init.constant_(m.bias.data, 0.0)


def to_categorical(y, num_columns):
    """Returns one-hot encoded Variable"""
    y_cat = np.zeros((y.shape[0], num_columns))
    y_cat[range(y.shape[0]), y] = 1.0

    return Variable(FloatTensor(y_cat))


class ResidualBlock(nn.Module):
    def __init__(self, in_features):
        super(ResidualBlock, self).__init__()
        self.conv_block = nn.Sequential(
            nn.Conv2d(in_features, in_features, kernel_size=3, stride=1, padding=1),
            nn.BatchNorm2d(in_features, 0.8),
            nn.PReLU(),
            nn.Conv2d(in_features, in_features, kernel_size=3, stride=1, padding=1),
            nn.BatchNorm2d(in_features, 0.8),
        )

    def forward(self, x):
        return x + self.conv_block(x)


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        input_dim = opt.latent_dim + opt.n_classes

        self.linear = torch.nn.Linear(input_dim, 128 * opt.after_size * opt.after_size)

        self.conv1 = nn.Sequential(
            nn.ConvTranspose2d(in_channels=128, out_channels=64, kernel_size=4, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True)
        )
        self.conv2 = nn.Sequential(
            nn.ConvTranspose2d(in_channels=64, out_channels=32, kernel_size=4, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True)
        )
        self.conv3 = nn.Sequential(
            nn.ConvTranspose2d(in_channels=32, out_channels=16, kernel_size=4, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True)
        )
        self.conv4 = nn.Sequential(
            nn.ConvTranspose2d(in_channels=16, out_channels=3, kernel_size=4, stride=2, padding=1, bias=False)
        )
        self.out = torch.nn.Tanh()

    def forward(self, noise, labels):
        # Project and reshape
        gen_input = torch.cat((noise, labels), -1)
        x = self.linear(gen_input)
        x = x.view(x.shape[0], 128, opt.after_size, opt.after_size)
        # Convolutional layers
        x = self.conv1(x)
        x = self.conv2(x)
        x = self.conv3(x)
        x = self.conv4(x)
        # Apply Tanh
        x = self.out(x)
        return x


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()

        def discriminator_block(in_filters, out_filters, bn=True):
            """Returns layers of each discriminator block"""
            block = [nn.Conv2d(in_filters, out_filters, 3, 2, 1), nn.LeakyReLU(0.2, inplace=True), nn.Dropout2d(0.25)]
            if bn:
                block.append(nn.BatchNorm2d(out_filters, 0.8))
            return block

        self.conv_blocks = nn.Sequential(
            *discriminator_block(opt.channels, 16, bn=False),
            ResidualBlock(16),
            *discriminator_block(16, 32),
            ResidualBlock(32),
            *discriminator_block(32, 64),
            *discriminator_block(64, 128),
        )

        # The height and width of downsampled image
        ds_size = opt.img_size // 2 ** 4

        # Output layers
        self.adv_layer = nn.Sequential(nn.Linear(128 * ds_size ** 2, 64),
                                       nn.ReLU(True),
                                       nn.Dropout(),
                                       nn.Linear(64, 1))
        self.aux_layer = nn.Sequential(nn.Linear(128 * ds_size ** 2, 64),
                                       nn.ReLU(True),
                                       nn.Dropout(),
                                       nn.Linear(64, opt.n_classes))

    def forward(self, img):
        out = self.conv_blocks(img)
        out = out.view(out.shape[0], -1)
        validity = self.adv_layer(out)
        label = self.aux_layer(out)

        return out, validity, label


class MMD_loss(nn.Module):
    def __init__(self, kernel_mul=2.0, kernel_num=5):
        super(MMD_loss, self).__init__()
        self.kernel_num = kernel_num
        self.kernel_mul = kernel_mul
        self.fix_sigma = None
        return

    def guassian_kernel(self, source, target, kernel_mul=2.0, kernel_num=5, fix_sigma=None):
        n_samples = int(source.size()[0]) + int(target.size()[0])
        total = torch.cat([source, target], dim=0)

        total0 = total.unsqueeze(0).expand(int(total.size(0)), int(total.size(0)), int(total.size(1)))
        total1 = total.unsqueeze(1).expand(int(total.size(0)), int(total.size(0)), int(total.size(1)))
        L2_distance = ((total0 - total1) ** 2).sum(2)
        if fix_sigma:
            bandwidth = fix_sigma
        else:
            bandwidth = torch.sum(L2_distance.data) / (n_samples ** 2 - n_samples)
        bandwidth /= kernel_mul ** (kernel_num // 2)
        bandwidth_list = [bandwidth * (kernel_mul ** i) for i in range(kernel_num)]
        kernel_val = [torch.exp(-L2_distance / bandwidth_temp) for bandwidth_temp in bandwidth_list]
        return sum(kernel_val)

    def forward(self, source, target):
        batch_size = int(source.size()[0])
        kernels = self.guassian_kernel(source, target, kernel_mul=self.kernel_mul, kernel_num=self.kernel_num,
                                       fix_sigma=self.fix_sigma)
        XX = kernels[:batch_size, :batch_size]
        YY = kernels[batch_size:, batch_size:]
        XY = kernels[:batch_size, batch_size:]
        YX = kernels[batch_size:, :batch_size]
        loss = torch.mean(XX + YY - XY - YX)
        return loss


def return_cifar10(opt):
    g = torch.Generator().manual_seed(7)
    n = 1024
    protos = torch.rand(opt.n_classes, opt.channels, 4, 4, generator=g) * 2 - 1
    protos = F.interpolate(protos, size=opt.img_size, mode="bilinear", align_corners=False)
    labels = torch.randint(0, opt.n_classes, (n,), generator=g)
    imgs = (protos[labels] + 0.3 * torch.randn(n, opt.channels, opt.img_size, opt.img_size, generator=g)).clamp(-1, 1)
    return DataLoader(TensorDataset(imgs, labels), batch_size=opt.batch_size, shuffle=True, drop_last=True)


# Loss functions
adversarial_loss = torch.nn.MSELoss()
categorical_loss = torch.nn.KLDivLoss()
restrain_loss = torch.nn.CrossEntropyLoss()
continuous_loss = torch.nn.MSELoss()
mmd = MMD_loss()

# Initialize generator and discriminator
generator = Generator()
discriminator = Discriminator()

# Initialize weights
generator.apply(weights_init_normal)
discriminator.apply(weights_init_normal)

# Configure data loader
dataloader = return_cifar10(opt)

# Optimizers
optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
optimizer_info = torch.optim.Adam(itertools.chain(generator.parameters(), discriminator.parameters()), lr=opt.lr,
                                  betas=(opt.b1, opt.b2))


def save_image_aug(generator, index):
    with torch.no_grad():
        label = np.random.randint(0, opt.n_classes, opt.batch_size)
        z = Variable(FloatTensor(np.random.normal(0, 1, (opt.batch_size, opt.latent_dim))))
        label_input = to_categorical(label, num_columns=opt.n_classes)
        # Generate a batch of images
        batch_temp = generator(z, label_input)
    return label, batch_temp


def freeze_direction(model, layer_names, d):
    for name, child in model.named_children():
        if name not in layer_names:
            continue

        for param in child.parameters():
            if param.size(0) % 4 == 0:
                inter = param.size(0) // 4
                param.grad[0:(d) * inter] = 0


def train():
    # ----------
    #  Training
    # ----------

    for epoch in range(opt.n_epochs):
        for i, (imgs, labels) in enumerate(dataloader):

            batch_size = imgs.shape[0]

            # Adversarial ground truths
            valid = Variable(FloatTensor(batch_size, 1).fill_(1.0), requires_grad=False)
            fake = Variable(FloatTensor(batch_size, 1).fill_(0.0), requires_grad=False)

            # Configure input
            real_imgs = Variable(imgs.type(FloatTensor))
            real_labels = Variable(labels.type(LongTensor))

            # -----------------
            #  Train Generator
            # -----------------

            optimizer_G.zero_grad()

            # Sample noise and labels as generator input
            z = Variable(FloatTensor(np.random.normal(0, 1, (batch_size, opt.latent_dim))))
            label_input = to_categorical(labels.numpy(), num_columns=opt.n_classes)

            # Generate a batch of images
            gen_imgs = generator(z, label_input)

            # Loss measures generator's ability to fool the discriminator
            _, validity, cls_gen = discriminator(gen_imgs)
            fake_cls_loss = categorical_loss(F.log_softmax(cls_gen, dim=1), label_input)
            g_loss = adversarial_loss(validity, valid)

            g_loss.backward()
            optimizer_G.step()

            # ---------------------
            #  Train Discriminator
            # ---------------------

            # Loss for real images
            _, real_pred, pred_label = discriminator(real_imgs)
            d_real_loss = adversarial_loss(real_pred, valid)
            class_loss = categorical_loss(F.log_softmax(pred_label, dim=1), label_input)

            # Loss for fake images
            _, fake_pred, _ = discriminator(gen_imgs.detach())
            d_fake_loss = adversarial_loss(fake_pred, fake)

            # Total discriminator loss
            d_advloss = (d_real_loss + d_fake_loss) / 2

            optimizer_D.zero_grad()
            if d_advloss.item() > 0.2 or g_loss.item() < 0.3:
                para_d = 1.0
            else:
                para_d = 0

            d_loss = para_d * d_advloss + class_loss * 10.0
            d_loss.backward()
            optimizer_D.step()

            # ------------------
            # Information Loss
            # ------------------

            optimizer_info.zero_grad()

            # Sample labels
            sampled_labels = np.random.randint(0, opt.n_classes, batch_size)

            # Ground truth labels
            gt_labels = Variable(LongTensor(sampled_labels), requires_grad=False)

            # Sample noise, labels and code as generator input
            z = Variable(FloatTensor(np.random.normal(0, 1, (batch_size, opt.latent_dim))))
            label_input = to_categorical(sampled_labels, num_columns=opt.n_classes)

            gen_imgs = generator(z, label_input)
            _, _, pred_label = discriminator(gen_imgs)

            info_loss = categorical_loss(F.log_softmax(pred_label, dim=1), label_input)

            info_loss.backward()
            optimizer_info.step()

            # --------------
            # Log Progress
            # --------------

            batches_done = epoch * len(dataloader) + i

            if batches_done % (opt.sample_interval * 2) == 0:
                print("[Epoch %d/%d] [Batch %d/%d] [D loss: %f] [G loss: %f] [Fake cls loss: %f] [Real cls loss: %f] [Info loss: %f]"
                      % (epoch, opt.n_epochs, i, len(dataloader), d_loss.item(), g_loss.item(), fake_cls_loss.item(),
                         class_loss.item(), info_loss.item()))

    if opt.n_epochs != 0:
        saved_generator = copy.deepcopy(generator.state_dict())
        saved_discriminator = copy.deepcopy(discriminator.state_dict())
        print('save models ok ...')
    print('\n start augmentation')

    labels_save = []
    images_save = []
    drift = []
    for aug_index in range(opt.aug_number):
        print('augmentation round {}\n'.format(aug_index))
        generator_aug = Generator()
        discriminator_aug = Discriminator()
        aug_dis = 0.1 + aug_index * 0.1
        for d in range(opt.direction):
            if opt.model_load:
                generator_aug.load_state_dict(saved_generator)
                discriminator_aug.load_state_dict(saved_discriminator)
                optimizer_aug = torch.optim.Adam(
                    itertools.chain(generator_aug.parameters(), discriminator_aug.parameters()), lr=opt.lr, betas=(opt.b1, opt.b2)
                )
            for epoch in range(opt.n_epochs_aug):
                for param in discriminator.parameters():
                    param.requires_grad = False
                for i, (imgs, labels) in enumerate(dataloader):

                    batch_size = imgs.shape[0]

                    # Adversarial ground truths
                    valid = Variable(FloatTensor(batch_size, 1).fill_(1.0), requires_grad=False)
                    fake = Variable(FloatTensor(batch_size, 1).fill_(0.0), requires_grad=False)

                    # Configure input
                    real_imgs = Variable(imgs.type(FloatTensor))
                    real_labels = Variable(labels.type(LongTensor).squeeze())
                    label_input = to_categorical(np.squeeze(labels.numpy()), num_columns=opt.n_classes)

                    # -----------------
                    #  Train Generator
                    # -----------------

                    optimizer_aug.zero_grad()

                    # Sample noise and labels as generator input
                    z = Variable(FloatTensor(np.random.normal(0, 1, (batch_size, opt.latent_dim))))

                    # Generate a batch of images
                    gen_imgs = generator_aug(z, label_input)

                    # Loss measures generator's ability to fool the discriminator
                    gen_fe_dis, gen_valid, gen_pred_label = discriminator_aug(gen_imgs)
                    real_fe_dis, _, real_pred_label = discriminator_aug(real_imgs)

                    mmd_loss = mmd(gen_fe_dis, real_fe_dis.detach())
                    mmd_loss = torch.clamp(mmd_loss, 0, aug_dis)
                    class_loss = restrain_loss(F.log_softmax(gen_pred_label, dim=1), real_labels) * 0.5
                    domain_loss = adversarial_loss(gen_valid, valid) * 0.5

                    g_loss = class_loss - mmd_loss

                    g_loss.backward()
                    layer_names = ['conv1', 'conv2', 'conv3', 'conv4']
                    freeze_direction(generator_aug, layer_names, d)
                    optimizer_aug.step()

                    # --------------
                    # Log Progress
                    # --------------

                    batches_done = epoch * len(dataloader) + i
                    if batches_done % opt.sample_interval == 0:
                        print(
                            "[Epoch %d/%d] [Batch %d/%d] [G loss: %f], [Cls loss: %f] [MMD: %f]"
                            % (epoch, opt.n_epochs_aug, i, len(dataloader), g_loss.item(), class_loss.item(), mmd_loss.item())
                        )
            change = max((p - saved_discriminator[k]).abs().max().item()
                         for k, p in discriminator_aug.named_parameters())
            drift.append(change)
            print("round %d direction %d: discriminator_aug max |change| since load %.5f" % (aug_index, d, change))
            for i in range(4):
                label, batch = save_image_aug(generator_aug, (aug_index * 4 + i) * opt.batch_size)
                labels_save.append(label)
                images_save.append(batch)

    # ------------------------------------------------------
    # Score the augmented set with the source discriminator
    # ------------------------------------------------------
    discriminator.eval()
    aug_labels = torch.as_tensor(np.concatenate(labels_save))
    aug_images = torch.cat(images_save)
    real_images = torch.cat([imgs for imgs, _ in dataloader])[:len(aug_images)]
    with torch.no_grad():
        aug_fe, _, aug_logits = discriminator(aug_images)
        real_fe, _, _ = discriminator(real_images)
        agree = (aug_logits.argmax(1) == aug_labels).float().mean().item()
        shift = mmd(aug_fe[:256], real_fe[:256]).item()
        pixel_shift = (aug_images.mean(0) - real_images.mean(0)).abs().mean().item()
    print("augmented samples: %d, discriminator_aug drift median %.5f" % (len(aug_labels), float(np.median(drift))))
    print("source discriminator agrees with the augmented labels on %.2f%% of samples" % (100 * agree))
    print("feature MMD augmented vs source (source discriminator): %.4f, mean pixel shift %.4f" % (shift, pixel_shift))


if __name__ == "__main__":
    train()
