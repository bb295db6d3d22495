# Source: wolny/pytorch-3dunet, unet3d/trainer.py, unet3d/model.py, unet3d/buildingblocks.py, commit 41e2aeb610b7a7036e74f3abe593f9e6fee2b822
# Report: https://github.com/wolny/pytorch-3dunet/issues/53
import torch
from torch import nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


def conv3d(in_channels, out_channels, kernel_size, bias, padding=1):
    return nn.Conv3d(in_channels, out_channels, kernel_size, padding=padding, bias=bias)


def create_conv(in_channels, out_channels, kernel_size, order, num_groups, padding=1):
    assert 'c' in order, "Conv layer MUST be present"
    modules = []
    for i, char in enumerate(order):
        if char == 'r':
            modules.append(('ReLU', nn.ReLU(inplace=True)))
        elif char == 'c':
            bias = not ('g' in order or 'b' in order)
            modules.append(('conv', conv3d(in_channels, out_channels, kernel_size, bias, padding=padding)))
        elif char == 'g':
            num_channels = in_channels if i < order.index('c') else out_channels
            if num_channels < num_groups:
                num_groups = 1
            modules.append(('groupnorm', nn.GroupNorm(num_groups=num_groups, num_channels=num_channels)))
        elif char == 'b':
            if i < order.index('c'):
                modules.append(('batchnorm', nn.BatchNorm3d(in_channels)))
            else:
                modules.append(('batchnorm', nn.BatchNorm3d(out_channels)))
        else:
            raise ValueError(f"Unsupported layer type '{char}'")
    return modules


class SingleConv(nn.Sequential):
    def __init__(self, in_channels, out_channels, kernel_size=3, order='crg', num_groups=8, padding=1):
        super(SingleConv, self).__init__()
        for name, module in create_conv(in_channels, out_channels, kernel_size, order, num_groups, padding=padding):
            self.add_module(name, module)


class DoubleConv(nn.Sequential):
    def __init__(self, in_channels, out_channels, encoder, kernel_size=3, order='crg', num_groups=8):
        super(DoubleConv, self).__init__()
        if encoder:
            conv1_in_channels = in_channels
            conv1_out_channels = out_channels // 2
            if conv1_out_channels < in_channels:
                conv1_out_channels = in_channels
            conv2_in_channels, conv2_out_channels = conv1_out_channels, out_channels
        else:
            conv1_in_channels, conv1_out_channels = in_channels, out_channels
            conv2_in_channels, conv2_out_channels = out_channels, out_channels
        self.add_module('SingleConv1', SingleConv(conv1_in_channels, conv1_out_channels, kernel_size, order, num_groups))
        self.add_module('SingleConv2', SingleConv(conv2_in_channels, conv2_out_channels, kernel_size, order, num_groups))


class Encoder(nn.Module):
    def __init__(self, in_channels, out_channels, apply_pooling=True, basic_module=DoubleConv,
                 conv_layer_order='crg', num_groups=8):
        super(Encoder, self).__init__()
        self.pooling = nn.MaxPool3d(kernel_size=2) if apply_pooling else None
        self.basic_module = basic_module(in_channels, out_channels, encoder=True, order=conv_layer_order,
                                         num_groups=num_groups)

    def forward(self, x):
        if self.pooling is not None:
            x = self.pooling(x)
        return self.basic_module(x)


class Decoder(nn.Module):
    def __init__(self, in_channels, out_channels, basic_module=DoubleConv, conv_layer_order='crg', num_groups=8):
        super(Decoder, self).__init__()
        self.basic_module = basic_module(in_channels, out_channels, encoder=False, order=conv_layer_order,
                                         num_groups=num_groups)

    def forward(self, encoder_features, x):
        x = F.interpolate(x, size=encoder_features.size()[2:], mode='nearest')
        x = torch.cat((encoder_features, x), dim=1)
        return self.basic_module(x)


class UNet3D(nn.Module):
    def __init__(self, in_channels, out_channels, final_sigmoid, f_maps=64, layer_order='crg', num_groups=8,
                 **kwargs):
        super(UNet3D, self).__init__()
        encoders = []
        for i, out_feature_num in enumerate(f_maps):
            if i == 0:
                encoder = Encoder(in_channels, out_feature_num, apply_pooling=False, basic_module=DoubleConv,
                                  conv_layer_order=layer_order, num_groups=num_groups)
            else:
                encoder = Encoder(f_maps[i - 1], out_feature_num, basic_module=DoubleConv,
                                  conv_layer_order=layer_order, num_groups=num_groups)
            encoders.append(encoder)
        self.encoders = nn.ModuleList(encoders)
        decoders = []
        reversed_f_maps = list(reversed(f_maps))
        for i in range(len(reversed_f_maps) - 1):
            in_feature_num = reversed_f_maps[i] + reversed_f_maps[i + 1]
            out_feature_num = reversed_f_maps[i + 1]
            decoders.append(Decoder(in_feature_num, out_feature_num, basic_module=DoubleConv,
                                    conv_layer_order=layer_order, num_groups=num_groups))
        self.decoders = nn.ModuleList(decoders)
        self.final_conv = nn.Conv3d(f_maps[0], out_channels, 1)
        self.final_activation = nn.Sigmoid() if final_sigmoid else nn.Softmax(dim=1)

    def forward(self, x):
        encoders_features = []
        for encoder in self.encoders:
            x = encoder(x)
            encoders_features.insert(0, x)
        encoders_features = encoders_features[1:]
        for decoder, encoder_features in zip(self.decoders, encoders_features):
            x = decoder(encoder_features, x)
        x = self.final_conv(x)
        # apply final_activation (i.e. Sigmoid or Softmax) only for prediction. During training the network outputs
        # logits and it's up to the user to normalize it before visualising with tensorboard or computing validation metric
        if not self.training:
            x = self.final_activation(x)
        return x


class RunningAverage:
    def __init__(self):
        self.count = 0
        self.sum = 0
        self.avg = 0

    def update(self, value, n=1):
        self.count += n
        self.sum += value * n
        self.avg = self.sum / self.count


class DiceCoefficient:
    def __init__(self, epsilon=1e-6):
        self.epsilon = epsilon

    def __call__(self, input, target):
        intersect = (input * target).sum()
        return (2 * intersect + self.epsilon) / (input.sum() + target.sum() + self.epsilon)


class UNet3DTrainer:
    def __init__(self, model, optimizer, loss_criterion, eval_criterion, loaders, max_num_epochs,
                 validate_after_iters):
        self.model = model
        self.optimizer = optimizer
        self.loss_criterion = loss_criterion
        self.eval_criterion = eval_criterion
        self.loaders = loaders
        self.max_num_epochs = max_num_epochs
        self.validate_after_iters = validate_after_iters
        self.best_eval_score = float('-inf')
        self.num_iterations = 1
        self.num_epoch = 0

    def fit(self):
        for _ in range(self.num_epoch, self.max_num_epochs):
            self.train(self.loaders['train'])
            self.num_epoch += 1

    def train(self, train_loader):
        train_losses = RunningAverage()
        # sets the model in training mode
        self.model.train()
        for i, t in enumerate(train_loader):
            input, target = t
            output, loss = self._forward_pass(input, target)
            train_losses.update(loss.item(), input.size(0))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            if self.num_iterations % self.validate_after_iters == 0:
                # evaluate on validation set
                eval_score = self.validate(self.loaders['val'])
                if eval_score > self.best_eval_score:
                    self.best_eval_score = eval_score
                print(f'iter {self.num_iterations}: train loss {train_losses.avg:.4f}, val dice {eval_score:.4f}')
            self.num_iterations += 1

    def validate(self, val_loader):
        val_losses = RunningAverage()
        val_scores = RunningAverage()
        with torch.no_grad():
            for i, t in enumerate(val_loader):
                input, target = t
                output, loss = self._forward_pass(input, target)
                val_losses.update(loss.item(), input.size(0))
                # if model contains final_activation layer for normalizing logits apply it, otherwise both
                # the evaluation metric will be incorrectly computed
                if hasattr(self.model, 'final_activation') and self.model.final_activation is not None:
                    output = self.model.final_activation(output)
                eval_score = self.eval_criterion(output, target)
                val_scores.update(eval_score.item(), input.size(0))
        return val_scores.avg

    def _forward_pass(self, input, target):
        output = self.model(input)
        loss = self.loss_criterion(output, target)
        return output, loss


def make_volumes(n, generator):
    zz, yy, xx = torch.meshgrid(torch.arange(16.), torch.arange(16.), torch.arange(16.), indexing='ij')
    inputs, targets = [], []
    for _ in range(n):
        c = 5 + 6 * torch.rand(3, generator=generator)
        r = 3.5 + 2 * torch.rand(1, generator=generator)
        mask = (((zz - c[0]) ** 2 + (yy - c[1]) ** 2 + (xx - c[2]) ** 2) <= r ** 2).float()
        gain = 0.5 + torch.rand(1, generator=generator)
        inputs.append(gain * (mask + 0.6 * torch.randn(16, 16, 16, generator=generator)) + 0.8 * gain)
        targets.append(mask)
    return torch.stack(inputs)[:, None], torch.stack(targets)[:, None]


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    train_x, train_y = make_volumes(48, g)
    val_x, val_y = make_volumes(16, g)
    loaders = {'train': DataLoader(TensorDataset(train_x, train_y), batch_size=4, shuffle=True),
               'val': DataLoader(TensorDataset(val_x, val_y), batch_size=4, shuffle=False)}
    model = UNet3D(in_channels=1, out_channels=1, final_sigmoid=True, f_maps=[8, 16], layer_order='cbr')
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    trainer = UNet3DTrainer(model, optimizer, nn.BCEWithLogitsLoss(), DiceCoefficient(), loaders,
                            max_num_epochs=5, validate_after_iters=12)
    fit_bn = model.encoders[0].basic_module.SingleConv1.batchnorm
    trainer.fit()
    print(f'best val dice {trainer.best_eval_score:.4f}; first BatchNorm3d num_batches_tracked '
          f'{int(fit_bn.num_batches_tracked)} ({trainer.num_iterations - 1} training iterations)')
    # predictor: eval mode, final activation applied by the model
    model.eval()
    with torch.no_grad():
        pred = model(val_x)
    print(f'predictor (eval mode) dice on the validation volumes {DiceCoefficient()(pred, val_y).item():.4f}')


if __name__ == '__main__':
    main()
