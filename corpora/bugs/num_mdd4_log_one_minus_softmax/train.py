# Source: thuml/MDD, model/MDD.py, commit 1f6f2ddfcc9239cb7da1a2dfcde9b87e40ba368c
# Report: https://github.com/thuml/MDD/issues/4
# Margin Disparity Discrepancy (MDD) domain adaptation: source classifier + adversarial
# classifier behind a gradient reversal layer. ResNet-50 features are replaced by a small
# MLP over synthetic 256-d "pooled features"; 31 classes as on Office-31.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class GradientReverseFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, coeff):
        ctx.coeff = coeff
        return input * 1.0

    @staticmethod
    def backward(ctx, grad_output):
        return -ctx.coeff * grad_output, None


class GradientReverseLayer(nn.Module):
    def __init__(self, iter_num=0, alpha=1.0, low_value=0.0, high_value=0.1, max_iter=1000.0):
        super(GradientReverseLayer, self).__init__()
        self.iter_num = iter_num
        self.alpha = alpha
        self.low_value = low_value
        self.high_value = high_value
        self.max_iter = max_iter

    def forward(self, input):
        self.iter_num += 1
        coeff = float(
            2.0 * (self.high_value - self.low_value) / (1.0 + np.exp(-self.alpha * self.iter_num / self.max_iter)) - (
                        self.high_value - self.low_value) + self.low_value)
        return GradientReverseFunction.apply(input, coeff)


class MDDNet(nn.Module):
    def __init__(self, use_bottleneck=True, bottleneck_dim=128, width=128, class_num=31):
        super(MDDNet, self).__init__()
        self.base_network = nn.Sequential(nn.Linear(256, 256), nn.ReLU())
        self.use_bottleneck = use_bottleneck
        self.grl_layer = GradientReverseLayer()
        self.bottleneck_layer_list = [nn.Linear(256, bottleneck_dim), nn.BatchNorm1d(bottleneck_dim), nn.ReLU(), nn.Dropout(0.5)]
        self.bottleneck_layer = nn.Sequential(*self.bottleneck_layer_list)
        self.classifier_layer_list = [nn.Linear(bottleneck_dim, width), nn.ReLU(), nn.Dropout(0.5),
                                      nn.Linear(width, class_num)]
        self.classifier_layer = nn.Sequential(*self.classifier_layer_list)
        self.classifier_layer_2_list = [nn.Linear(bottleneck_dim, width), nn.ReLU(), nn.Dropout(0.5),
                                        nn.Linear(width, class_num)]
        self.classifier_layer_2 = nn.Sequential(*self.classifier_layer_2_list)
        self.softmax = nn.Softmax(dim=1)

        self.bottleneck_layer[0].weight.data.normal_(0, 0.005)
        self.bottleneck_layer[0].bias.data.fill_(0.1)
        for dep in range(2):
            self.classifier_layer_2[dep * 3].weight.data.normal_(0, 0.01)
            self.classifier_layer_2[dep * 3].bias.data.fill_(0.0)
            self.classifier_layer[dep * 3].weight.data.normal_(0, 0.01)
            self.classifier_layer[dep * 3].bias.data.fill_(0.0)

        self.parameter_list = [{"params": self.base_network.parameters(), "lr": 0.1},
                               {"params": self.bottleneck_layer.parameters(), "lr": 1},
                               {"params": self.classifier_layer.parameters(), "lr": 1},
                               {"params": self.classifier_layer_2.parameters(), "lr": 1}]

    def forward(self, inputs):
        features = self.base_network(inputs)
        if self.use_bottleneck:
            features = self.bottleneck_layer(features)
        features_adv = self.grl_layer(features)
        outputs_adv = self.classifier_layer_2(features_adv)
        outputs = self.classifier_layer(features)
        softmax_outputs = self.softmax(outputs)
        return features, outputs, softmax_outputs, outputs_adv


class MDD(object):
    def __init__(self, width=128, class_num=31, use_bottleneck=True, srcweight=4):
        self.c_net = MDDNet(use_bottleneck, width, width, class_num)
        self.iter_num = 0
        self.class_num = class_num
        self.srcweight = srcweight

    def get_loss(self, inputs, labels_source):
        class_criterion = nn.CrossEntropyLoss()
        _, outputs, _, outputs_adv = self.c_net(inputs)
        classifier_loss = class_criterion(outputs.narrow(0, 0, labels_source.size(0)), labels_source)
        target_adv = outputs.max(1)[1]
        target_adv_src = target_adv.narrow(0, 0, labels_source.size(0))
        target_adv_tgt = target_adv.narrow(0, labels_source.size(0), inputs.size(0) - labels_source.size(0))
        classifier_loss_adv_src = class_criterion(outputs_adv.narrow(0, 0, labels_source.size(0)), target_adv_src)
        logloss_tgt = torch.log(1 - F.softmax(outputs_adv.narrow(0, labels_source.size(0), inputs.size(0) - labels_source.size(0)), dim=1))
        classifier_loss_adv_tgt = F.nll_loss(logloss_tgt, target_adv_tgt)
        transfer_loss = self.srcweight * classifier_loss_adv_src + classifier_loss_adv_tgt
        self.iter_num += 1
        total_loss = classifier_loss + transfer_loss
        return total_loss


class INVScheduler(object):
    def __init__(self, gamma, decay_rate, init_lr=0.001):
        self.gamma = gamma
        self.decay_rate = decay_rate
        self.init_lr = init_lr

    def next_optimizer(self, group_ratios, optimizer, num_iter):
        lr = self.init_lr * (1 + self.gamma * num_iter) ** (-self.decay_rate)
        i = 0
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr * group_ratios[i]
            i += 1
        return optimizer


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    class_num, dim, n = 31, 256, 620
    centers = rng.randn(class_num, dim).astype(np.float32) * 3.0
    ys = rng.randint(0, class_num, size=n)
    yt = rng.randint(0, class_num, size=n)
    xs = torch.from_numpy(np.maximum(centers[ys] + rng.randn(n, dim).astype(np.float32), 0) * 4.0)
    xt = torch.from_numpy(np.maximum(centers[yt] + 1.5 + rng.randn(n, dim).astype(np.float32), 0) * 4.0)
    ys = torch.from_numpy(ys)

    model_instance = MDD(width=128, class_num=class_num, srcweight=4)
    optimizer = torch.optim.SGD(model_instance.c_net.parameter_list, lr=0.004, momentum=0.9,
                                weight_decay=0.0005, nesterov=True)
    group_ratios = [group['lr'] for group in optimizer.param_groups]
    lr_scheduler = INVScheduler(gamma=0.001, decay_rate=0.75, init_lr=0.02)
    model_instance.c_net.train(True)
    bs = 32
    for it in range(150):
        idx_s = torch.from_numpy(rng.randint(0, n, size=bs))
        idx_t = torch.from_numpy(rng.randint(0, n, size=bs))
        inputs = torch.cat((xs[idx_s], xt[idx_t]), dim=0)
        optimizer = lr_scheduler.next_optimizer(group_ratios, optimizer, it / 5)
        optimizer.zero_grad()
        total_loss = model_instance.get_loss(inputs, ys[idx_s])
        total_loss.backward()
        optimizer.step()
        if it % 25 == 0 or it == 149:
            with torch.no_grad():
                model_instance.c_net.eval()
                _, outputs, _, _ = model_instance.c_net(xs)
                acc = (outputs.argmax(1) == ys).float().mean().item()
                model_instance.c_net.train(True)
            print("iter %d total_loss %.4f source_acc %.3f" % (it, total_loss.item(), acc))


if __name__ == "__main__":
    main()
