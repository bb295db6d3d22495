# Source: milesial/Pytorch-UNet, train.py (train_model) + evaluate.py + utils/dice_score.py + unet/unet_model.py + unet/unet_parts.py, commit 21d7850f2af30a9695bbeea75f3136aa538cfc4a
# U-Net segmentation: CrossEntropy + multiclass soft Dice loss under torch.autocast (bf16 on CPU), GradScaler with
# unscale_ -> clip_grad_norm_ -> step -> update, RMSprop(momentum=0.999), ReduceLROnPlateau('max') on validation Dice.
# Suspicious-looking but correct patterns kept from the original:
#   - autocast on the CPU device type (bf16 activations) while parameters/grads stay fp32; the softmax for the dice
#     term is cast back with .float(); a GradScaler is created with enabled=amp even though bf16 needs no scaling
#   - optimizer.zero_grad(set_to_none=True) between forward and backward (after the loss is computed)
#   - grad_scaler.unscale_(optimizer) before clip_grad_norm_(..., 1.0)
#   - ReduceLROnPlateau in 'max' mode, stepped with a Dice score (higher is better), only at evaluation rounds
#     (division_step = n_train // (5 * batch_size)), i.e. several times per epoch
#   - inputs converted to channels_last; bias=False convs followed by BatchNorm; evaluate() is decorated with
#     torch.inference_mode() and calls net.train() itself before returning
#   - validation Dice ignores the background channel (mask[:, 1:]); dice's torch.where(sets_sum == 0, inter, ...)
#     keeps empty masks from dividing by zero
#   - RMSprop with momentum 0.999 and weight_decay 1e-8 (the repository defaults)
# Adaptation: Carvana images replaced by synthetic 3x48x48 images with a bright ellipse (2 classes); UNet widths
# 64..1024 -> 8..128 (bilinear=False, same blocks); wandb/tqdm/logging/checkpoint saving removed;
# torch.cuda.amp.GradScaler -> torch.amp.GradScaler(device.type) (CPU); lr 1e-5 -> 1e-4, 4 epochs, batch 4;
# num_workers 0.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch import optim
from torch.utils.data import DataLoader, Dataset, random_split


def dice_coeff(input: Tensor, target: Tensor, reduce_batch_first: bool = False, epsilon: float = 1e-6):
    # Average of Dice coefficient for all batches, or for a single mask
    assert input.size() == target.size()
    assert input.dim() == 3 or not reduce_batch_first

    sum_dim = (-1, -2) if input.dim() == 2 or not reduce_batch_first else (-1, -2, -3)

    inter = 2 * (input * target).sum(dim=sum_dim)
    sets_sum = input.sum(dim=sum_dim) + target.sum(dim=sum_dim)
    sets_sum = torch.where(sets_sum == 0, inter, sets_sum)

    dice = (inter + epsilon) / (sets_sum + epsilon)
    return dice.mean()


def multiclass_dice_coeff(input: Tensor, target: Tensor, reduce_batch_first: bool = False, epsilon: float = 1e-6):
    # Average of Dice coefficient for all classes
    return dice_coeff(input.flatten(0, 1), target.flatten(0, 1), reduce_batch_first, epsilon)


def dice_loss(input: Tensor, target: Tensor, multiclass: bool = False):
    # Dice loss (objective to minimize) between 0 and 1
    fn = multiclass_dice_coeff if multiclass else dice_coeff
    return 1 - fn(input, target, reduce_batch_first=True)
class DoubleConv(nn.Module):
    """(convolution => [BN] => ReLU) * 2"""

    def __init__(self, in_channels, out_channels, mid_channels=None):
        super().__init__()
        if not mid_channels:
            mid_channels = out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(mid_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True)
        )

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    """Downscaling with maxpool then double conv"""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.maxpool_conv = nn.Sequential(
            nn.MaxPool2d(2),
            DoubleConv(in_channels, out_channels)
        )

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    """Upscaling then double conv"""

    def __init__(self, in_channels, out_channels, bilinear=True):
        super().__init__()

        # if bilinear, use the normal convolutions to reduce the number of channels
        if bilinear:
            self.up = nn.Upsample(scale_factor=2, mode='bilinear', align_corners=True)
            self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)
        else:
            self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
            self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        # input is CHW
        diffY = x2.size()[2] - x1.size()[2]
        diffX = x2.size()[3] - x1.size()[3]

        x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2,
                        diffY // 2, diffY - diffY // 2])
        # if you have padding issues, see
        # https://github.com/HaiyongJiang/U-Net-Pytorch-Unstructured-Buggy/commit/0e854509c2cea854e247a9c615f175f76fbb2e3a
        # https://github.com/xiaopeng-liao/Pytorch-UNet/commit/8ebac70e633bac59fc22bb5195e513d5832fb3bd
        x = torch.cat([x2, x1], dim=1)
        return self.conv(x)


class OutConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(OutConv, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x):
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, n_channels, n_classes, bilinear=False, base=8):
        super(UNet, self).__init__()
        self.n_channels = n_channels
        self.n_classes = n_classes
        self.bilinear = bilinear

        self.inc = (DoubleConv(n_channels, base))
        self.down1 = (Down(base, base * 2))
        self.down2 = (Down(base * 2, base * 4))
        self.down3 = (Down(base * 4, base * 8))
        factor = 2 if bilinear else 1
        self.down4 = (Down(base * 8, base * 16 // factor))
        self.up1 = (Up(base * 16, base * 8 // factor, bilinear))
        self.up2 = (Up(base * 8, base * 4 // factor, bilinear))
        self.up3 = (Up(base * 4, base * 2 // factor, bilinear))
        self.up4 = (Up(base * 2, base, bilinear))
        self.outc = (OutConv(base, n_classes))

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x5 = self.down4(x4)
        x = self.up1(x5, x4)
        x = self.up2(x, x3)
        x = self.up3(x, x2)
        x = self.up4(x, x1)
        logits = self.outc(x)
        return logits


@torch.inference_mode()
def evaluate(net, dataloader, device, amp):
    net.eval()
    num_val_batches = len(dataloader)
    dice_score = 0

    # iterate over the validation set
    with torch.autocast(device.type if device.type != 'mps' else 'cpu', enabled=amp):
        for batch in dataloader:
            image, mask_true = batch['image'], batch['mask']

            # move images and labels to correct device and type
            image = image.to(device=device, dtype=torch.float32, memory_format=torch.channels_last)
            mask_true = mask_true.to(device=device, dtype=torch.long)

            # predict the mask
            mask_pred = net(image)

            assert mask_true.min() >= 0 and mask_true.max() < net.n_classes, 'True mask indices should be in [0, n_classes['
            # convert to one-hot format
            mask_true = F.one_hot(mask_true, net.n_classes).permute(0, 3, 1, 2).float()
            mask_pred = F.one_hot(mask_pred.argmax(dim=1), net.n_classes).permute(0, 3, 1, 2).float()
            # compute the Dice score, ignoring background
            dice_score += multiclass_dice_coeff(mask_pred[:, 1:], mask_true[:, 1:], reduce_batch_first=False)

    net.train()
    return dice_score / max(num_val_batches, 1)


class BasicDataset(Dataset):
    """ Synthetic stand-in for the Carvana images/masks: one bright ellipse per image, mask values {0, 1}. """
    def __init__(self, n=72, size=48, seed=0):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing='ij')
        self.items = []
        for _ in range(n):
            cy, cx = torch.randint(12, size - 12, (2,), generator=g).tolist()
            ry, rx = torch.randint(5, 12, (2,), generator=g).tolist()
            mask = (((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1).long()
            img = 0.25 * torch.randn(3, size, size, generator=g) + mask.float() * torch.tensor([0.8, 0.5, 0.2]).view(3, 1, 1)
            self.items.append({'image': img, 'mask': mask})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def train_model(
        model,
        device,
        epochs: int = 4,
        batch_size: int = 4,
        learning_rate: float = 1e-4,
        val_percent: float = 0.1,
        amp: bool = True,
        weight_decay: float = 1e-8,
        momentum: float = 0.999,
        gradient_clipping: float = 1.0,
):
    # 1. Create dataset
    dataset = BasicDataset()

    # 2. Split into train / validation partitions
    n_val = int(len(dataset) * val_percent)
    n_train = len(dataset) - n_val
    train_set, val_set = random_split(dataset, [n_train, n_val], generator=torch.Generator().manual_seed(0))

    # 3. Create data loaders
    loader_args = dict(batch_size=batch_size, num_workers=0)
    train_loader = DataLoader(train_set, shuffle=True, **loader_args)
    val_loader = DataLoader(val_set, shuffle=False, drop_last=True, **loader_args)

    # 4. Set up the optimizer, the loss, the learning rate scheduler and the loss scaling for AMP
    optimizer = optim.RMSprop(model.parameters(),
                              lr=learning_rate, weight_decay=weight_decay, momentum=momentum, foreach=True)
    scheduler = optim.lr_scheduler.ReduceLROnPlateau(optimizer, 'max', patience=5)  # goal: maximize Dice score
    grad_scaler = torch.amp.GradScaler(device.type, enabled=amp)
    criterion = nn.CrossEntropyLoss() if model.n_classes > 1 else nn.BCEWithLogitsLoss()
    global_step = 0

    first_score = evaluate(model, val_loader, device, amp)
    print('Validation Dice score before training: {:.4f}'.format(float(first_score)))
    val_score = first_score
    # 5. Begin training
    for epoch in range(1, epochs + 1):
        model.train()
        epoch_loss = 0
        for batch in train_loader:
            images, true_masks = batch['image'], batch['mask']

            assert images.shape[1] == model.n_channels, \
                f'Network has been defined with {model.n_channels} input channels, ' \
                f'but loaded images have {images.shape[1]} channels. Please check that ' \
                'the images are loaded correctly.'

            images = images.to(device=device, dtype=torch.float32, memory_format=torch.channels_last)
            true_masks = true_masks.to(device=device, dtype=torch.long)

            with torch.autocast(device.type if device.type != 'mps' else 'cpu', enabled=amp):
                masks_pred = model(images)
                if model.n_classes == 1:
                    loss = criterion(masks_pred.squeeze(1), true_masks.float())
                    loss += dice_loss(F.sigmoid(masks_pred.squeeze(1)), true_masks.float(), multiclass=False)
                else:
                    loss = criterion(masks_pred, true_masks)
                    loss += dice_loss(
                        F.softmax(masks_pred, dim=1).float(),
                        F.one_hot(true_masks, model.n_classes).permute(0, 3, 1, 2).float(),
                        multiclass=True
                    )

            optimizer.zero_grad(set_to_none=True)
            grad_scaler.scale(loss).backward()
            grad_scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clipping)
            grad_scaler.step(optimizer)
            grad_scaler.update()

            global_step += 1
            epoch_loss += loss.item()

            # Evaluation round
            division_step = (n_train // (5 * batch_size))
            if division_step > 0:
                if global_step % division_step == 0:
                    val_score = evaluate(model, val_loader, device, amp)
                    scheduler.step(val_score)
        print('Epoch {} train loss {:.4f} validation Dice score {:.4f} lr {:g}'.format(
            epoch, epoch_loss / len(train_loader), float(val_score), optimizer.param_groups[0]['lr']))
    return float(first_score), float(val_score)


def main():
    torch.manual_seed(0)
    device = torch.device('cpu')
    model = UNet(n_channels=3, n_classes=2, bilinear=False)
    model = model.to(memory_format=torch.channels_last)
    first, last = train_model(model=model, device=device)
    print('[summary] val_dice first={:.4f} last={:.4f} increased={}'.format(first, last, last > first))


if __name__ == '__main__':
    main()
