"""Neural style transfer: a frozen CNN (eval(), requires_grad_(False)) rebuilt as an nn.Sequential
with ContentLoss / StyleLoss modules that store their loss on self (targets detached), the input
image itself optimized by LBFGS([input_img]) with input_img.requires_grad_(True), clamped in place
under no_grad inside the closure.

Source: pytorch/tutorials, advanced_source/neural_style_tutorial.py,
commit 8bcd0ac63dff35599649fc78711b6c155717823f.
Reduced: a 3-conv CNN with random weights for VGG19, 16x16 images, 3 LBFGS steps (max_iter 3).
"""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class ContentLoss(nn.Module):
    def __init__(self, target):
        super(ContentLoss, self).__init__()
        self.target = target.detach()

    def forward(self, input):
        self.loss = F.mse_loss(input, self.target)
        return input


def gram_matrix(input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)


class StyleLoss(nn.Module):
    def __init__(self, target_feature):
        super(StyleLoss, self).__init__()
        self.target = gram_matrix(target_feature).detach()

    def forward(self, input):
        G = gram_matrix(input)
        self.loss = F.mse_loss(G, self.target)
        return input


class Normalization(nn.Module):
    def __init__(self, mean, std):
        super(Normalization, self).__init__()
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def forward(self, img):
        return (img - self.mean) / self.std


content_layers_default = ["conv_2"]
style_layers_default = ["conv_1", "conv_2", "conv_3"]


def get_style_model_and_losses(cnn, normalization_mean, normalization_std, style_img, content_img,
                               content_layers=content_layers_default, style_layers=style_layers_default):
    normalization = Normalization(normalization_mean, normalization_std)
    content_losses, style_losses = [], []
    model = nn.Sequential(normalization)
    i = 0
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = "conv_{}".format(i)
        elif isinstance(layer, nn.ReLU):
            name = "relu_{}".format(i)
            layer = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d):
            name = "pool_{}".format(i)
        else:
            raise RuntimeError("Unrecognized layer: {}".format(layer.__class__.__name__))
        model.add_module(name, layer)
        if name in content_layers:
            target = model(content_img).detach()
            content_loss = ContentLoss(target)
            model.add_module("content_loss_{}".format(i), content_loss)
            content_losses.append(content_loss)
        if name in style_layers:
            target_feature = model(style_img).detach()
            style_loss = StyleLoss(target_feature)
            model.add_module("style_loss_{}".format(i), style_loss)
            style_losses.append(style_loss)
    for i in range(len(model) - 1, -1, -1):
        if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
            break
    model = model[:(i + 1)]
    return model, style_losses, content_losses


def build():
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(8, 8, 3, padding=1),
                        nn.ReLU(inplace=True), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True)).eval()
    cnn = copy.deepcopy(cnn)
    content_img, style_img = torch.rand(1, 3, 16, 16), torch.rand(1, 3, 16, 16)
    input_img = content_img.clone()
    model, style_losses, content_losses = get_style_model_and_losses(
        cnn, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225], style_img, content_img)
    input_img.requires_grad_(True)
    model.eval()
    model.requires_grad_(False)
    optimizer = optim.LBFGS([input_img], max_iter=3)
    style_weight, content_weight = 1000000, 1

    def train():
        run = [0]
        while run[0] <= 6:
            def closure():
                with torch.no_grad():
                    input_img.clamp_(0, 1)
                optimizer.zero_grad()
                model(input_img)
                style_score = 0
                content_score = 0
                for sl in style_losses:
                    style_score += sl.loss
                for cl in content_losses:
                    content_score += cl.loss
                style_score *= style_weight
                content_score *= content_weight
                loss = style_score + content_score
                loss.backward()
                run[0] += 1
                return style_score + content_score
            optimizer.step(closure)
        with torch.no_grad():
            input_img.clamp_(0, 1)
        return input_img

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
