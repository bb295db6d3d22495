# Source: lucidrains/byol-pytorch, byol_pytorch/byol_pytorch.py + README.md (usage loop),
# commit 299312613c1f44923e7869d1c82be7d536c2c42b
# https://github.com/lucidrains/byol-pytorch
#
# BYOL as packaged by byol-pytorch: the representation is captured by a forward HOOK on the backbone's
# 'avgpool' layer (the backbone's own fc output is computed and thrown away, so fc gets no gradient); the
# projector is created lazily by a @singleton on the first forward, which BYOL.__init__ triggers with a mock
# batch of randn images in train mode (BatchNorm statistics updated by noise); the target encoder is a deepcopy
# made inside forward, registered as a submodule with requires_grad=False and therefore inside
# Adam(learner.parameters()); EMA by reassigning .data; targets computed under no_grad and detached twice;
# simplicial embeddings (softmax over groups of 8) before the projector; loss 2 - 2cos per view pair.
# Adaptation: torchvision/einops are not installed: the default torchvision augmentation is replaced through
# the library's augment_fn argument by a tensor augmentation (random resized crop by interpolation, flip,
# brightness/contrast jitter, normalisation), einops.rearrange in SEM by the equivalent reshape; the ResNet-50 is
# a 3-stage BasicBlock ResNet (width 16) with an avgpool layer; image_size 256 -> 16; projection 256/4096 -> 64/128,
# SEM 32x8 -> 16x8; sample_unlabelled_images() draws batches of 64 from 512 synthetic images; 100 -> 60 steps.
from __future__ import annotations

import copy
import random
from functools import wraps

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn import Module


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision.models.resnet.ResNet reduced in width/depth (BasicBlock, layers [1, 1, 1], base width 16)."""

    def __init__(self, layers=(1, 1, 1), num_classes=1000, zero_init_residual=False, width=16):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(width, layers[0])
        self.layer2 = self._make_layer(width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(width * 4, layers[2], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 4, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        for _ in range(1, blocks):
            layers.append(BasicBlock(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes=1000, zero_init_residual=False, **kwargs):
    return ResNet((1, 1, 1), num_classes=num_classes, zero_init_residual=zero_init_residual)


# helper functions

def exists(v):
    return v is not None

def default(val, def_val):
    return def_val if val is None else val

def divisible_by(num, den):
    return (num % den) == 0

def l2norm(t):
    return F.normalize(t, dim = -1, p = 2)

def flatten(t):
    return t.reshape(t.shape[0], -1)

def singleton(cache_key):
    def inner_fn(fn):
        @wraps(fn)
        def wrapper(self, *args, **kwargs):
            instance = getattr(self, cache_key)
            if instance is not None:
                return instance

            instance = fn(self, *args, **kwargs)
            setattr(self, cache_key, instance)
            return instance
        return wrapper
    return inner_fn

def get_module_device(module):
    return next(module.parameters()).device

def set_requires_grad(model, val):
    for p in model.parameters():
        p.requires_grad = val

def MaybeSyncBatchnorm(is_distributed = None):
    is_distributed = default(is_distributed, dist.is_initialized() and dist.get_world_size() > 1)
    return nn.SyncBatchNorm if is_distributed else nn.BatchNorm1d

# loss fn

def cosine_loss_fn(x, y):
    x = l2norm(x)
    y = l2norm(y)
    return 2 - 2 * (x * y).sum(dim = -1)

# simplicial embeddings
# Lavoie et al - https://arxiv.org/abs/2204.00616

class SEM(Module):
    def __init__(
        self,
        dim,
        temperature = 0.1,
        dim_simplex = 8
    ):
        super().__init__()
        assert divisible_by(dim, dim_simplex), f'{dim} must be divisible by {dim_simplex}'
        self.dim = dim
        self.dim_simplex = dim_simplex
        self.temperature = temperature

    def forward(
        self,
        t
    ):
        t = t.reshape(*t.shape[:-1], -1, self.dim_simplex)  # rearrange '... (l v) -> ... l v'
        t = (t / self.temperature).softmax(dim = -1)
        return t.reshape(*t.shape[:-2], -1)  # rearrange '... l v -> ... (l v)'

# exponential moving average

class EMA():
    def __init__(self, beta):
        super().__init__()
        self.beta = beta

    def update_average(self, old, new):
        if old is None:
            return new
        return old * self.beta + (1 - self.beta) * new

def update_moving_average(ema_updater, ma_model, current_model):
    for current_params, ma_params in zip(current_model.parameters(), ma_model.parameters()):
        old_weight, up_weight = ma_params.data, current_params.data
        ma_params.data = ema_updater.update_average(old_weight, up_weight)

# MLP class for projector and predictor

def MLP(dim, projection_size, hidden_size = 4096, sync_batchnorm = None):
    return nn.Sequential(
        nn.Linear(dim, hidden_size),
        MaybeSyncBatchnorm(sync_batchnorm)(hidden_size),
        nn.ReLU(inplace = True),
        nn.Linear(hidden_size, projection_size)
    )

def SimSiamMLP(dim, projection_size, hidden_size = 4096, sync_batchnorm = None):
    return nn.Sequential(
        nn.Linear(dim, hidden_size, bias = False),
        MaybeSyncBatchnorm(sync_batchnorm)(hidden_size),
        nn.ReLU(inplace = True),
        nn.Linear(hidden_size, hidden_size, bias = False),
        MaybeSyncBatchnorm(sync_batchnorm)(hidden_size),
        nn.ReLU(inplace = True),
        nn.Linear(hidden_size, projection_size, bias = False),
        MaybeSyncBatchnorm(sync_batchnorm)(projection_size, affine = False)
    )

# a wrapper class for the base neural network
# will manage the interception of the hidden layer output
# and pipe it into the projecter and predictor nets

class NetWrapper(Module):
    def __init__(
        self,
        net,
        projection_size,
        projection_hidden_size,
        layer = -2,
        use_simsiam_mlp = False,
        sync_batchnorm = None,
        use_simplicial_embeddings = False,
        sem_num_simplices = 32,
        sem_simplex_dim = 8,
        sem_temperature = 0.1
    ):
        super().__init__()
        self.net = net
        self.layer = layer

        self.projector = None
        self.projection_size = projection_size
        self.projection_hidden_size = projection_hidden_size

        self.sync_batchnorm = sync_batchnorm

        # sim siam

        self.use_simsiam_mlp = use_simsiam_mlp

        # simplicial embeddings

        self.use_simplicial_embeddings = use_simplicial_embeddings
        self.sem_num_simplices = sem_num_simplices
        self.sem_simplex_dim = sem_simplex_dim
        self.sem_temperature = sem_temperature

        # hooks

        self.hidden = {}
        self.hook_registered = False

    def _find_layer(self):
        if type(self.layer) == str:
            modules = dict([*self.net.named_modules()])
            return modules.get(self.layer, None)
        elif type(self.layer) == int:
            children = [*self.net.children()]
            return children[self.layer]
        return None

    def _hook(self, _, input, output):
        device = input[0].device
        self.hidden[device] = flatten(output)

    def _register_hook(self):
        layer = self._find_layer()
        assert layer is not None, f'hidden layer ({self.layer}) not found'
        handle = layer.register_forward_hook(self._hook)
        self.hook_registered = True

    @singleton('projector')
    def _get_projector(self, hidden):
        _, dim = hidden.shape
        create_mlp_fn = MLP if not self.use_simsiam_mlp else SimSiamMLP

        projector_input_dim = dim

        if self.use_simplicial_embeddings:
            sem_dim = self.sem_num_simplices * self.sem_simplex_dim
            projector_input_dim = sem_dim

        projector = create_mlp_fn(projector_input_dim, self.projection_size, self.projection_hidden_size, sync_batchnorm = self.sync_batchnorm)

        if self.use_simplicial_embeddings:
            Norm = MaybeSyncBatchnorm(self.sync_batchnorm)

            embedder = nn.Sequential(
                nn.Linear(dim, sem_dim),
                Norm(sem_dim)
            )

            sem = SEM(sem_dim, temperature = self.sem_temperature, dim_simplex = self.sem_simplex_dim)

            projector = nn.Sequential(embedder, sem, projector)

        return projector.to(hidden)

    def get_representation(self, x):
        if self.layer == -1:
            return self.net(x)

        if not self.hook_registered:
            self._register_hook()

        self.hidden.clear()
        _ = self.net(x)
        hidden = self.hidden[x.device]
        self.hidden.clear()

        assert hidden is not None, f'hidden layer {self.layer} never emitted an output'
        return hidden

    def forward(self, x, return_projection = True):
        representation = self.get_representation(x)

        if not return_projection:
            return representation

        projector = self._get_projector(representation)
        projection = projector(representation)
        return projection, representation

# main class

class BYOL(Module):
    def __init__(
        self,
        net,
        image_size,
        hidden_layer = -2,
        projection_size = 256,
        projection_hidden_size = 4096,
        augment_fn = None,
        augment_fn2 = None,
        moving_average_decay = 0.99,
        use_momentum = True,
        sync_batchnorm = None,
        use_simplicial_embeddings = True,
        sem_num_simplices = 32,
        sem_simplex_dim = 8,
        sem_temperature = 0.1
    ):
        super().__init__()
        self.net = net

        self.augment1 = augment_fn
        self.augment2 = default(augment_fn2, self.augment1)

        self.online_encoder = NetWrapper(
            net,
            projection_size,
            projection_hidden_size,
            layer = hidden_layer,
            use_simsiam_mlp = not use_momentum,
            sync_batchnorm = sync_batchnorm,
            use_simplicial_embeddings = use_simplicial_embeddings,
            sem_num_simplices = sem_num_simplices,
            sem_simplex_dim = sem_simplex_dim,
            sem_temperature = sem_temperature
        )

        self.use_momentum = use_momentum
        self.target_encoder = None
        self.target_ema_updater = EMA(moving_average_decay)

        self.online_predictor = MLP(projection_size, projection_size, projection_hidden_size)

        # get device of network and make wrapper same device
        device = get_module_device(net)
        self.to(device)

        # send a mock image tensor to instantiate singleton parameters
        self.forward(torch.randn(2, 3, image_size, image_size, device = device))

    @singleton('target_encoder')
    def _get_target_encoder(self):
        target_encoder = copy.deepcopy(self.online_encoder)
        set_requires_grad(target_encoder, False)
        return target_encoder

    def reset_moving_average(self):
        del self.target_encoder
        self.target_encoder = None

    def update_moving_average(self):
        assert self.use_momentum, 'you do not need to update the moving average, since you have turned off momentum for the target encoder'
        assert self.target_encoder is not None, 'target encoder has not been created yet'
        update_moving_average(self.target_ema_updater, self.target_encoder, self.online_encoder)

    def forward(
        self,
        x,
        return_embedding = False,
        return_projection = True
    ):
        assert not (self.training and x.shape[0] == 1), 'you must have greater than 1 sample when training, due to the batchnorm in the projection layer'

        if return_embedding:
            return self.online_encoder(x, return_projection = return_projection)

        image_one, image_two = self.augment1(x), self.augment2(x)

        images = torch.cat((image_one, image_two), dim = 0)

        online_projections, _ = self.online_encoder(images)
        online_predictions = self.online_predictor(online_projections)

        online_pred_one, online_pred_two = online_predictions.chunk(2, dim = 0)

        with torch.no_grad():
            target_encoder = self._get_target_encoder() if self.use_momentum else self.online_encoder

            target_projections, _ = target_encoder(images)
            target_projections = target_projections.detach()

            target_proj_one, target_proj_two = target_projections.chunk(2, dim = 0)

        loss_fn = cosine_loss_fn

        loss_one = loss_fn(online_pred_one, target_proj_two.detach())
        loss_two = loss_fn(online_pred_two, target_proj_one.detach())

        loss = loss_one + loss_two
        return loss.mean()


class TensorAugment(Module):
    """Batch tensor stand-in for the default torchvision augmentation (crop-resize, flip, jitter, normalise)."""

    def __init__(self, image_size):
        super().__init__()
        self.image_size = image_size

    def forward(self, x):
        n, _, h, w = x.shape
        s = random.randint(h * 3 // 4, h)
        a, b = random.randint(0, h - s), random.randint(0, w - s)
        x = F.interpolate(x[:, :, a:a + s, b:b + s], size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        if random.random() < 0.5:
            x = x.flip(-1)
        x = x * (0.8 + 0.4 * torch.rand(n, 1, 1, 1)) + 0.2 * (torch.rand(n, 1, 1, 1) - 0.5)
        return (x - 0.45) / 0.225


def main():
    random.seed(0)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    protos = F.avg_pool2d(torch.rand(10, 3, 20, 20, generator=g), 3, 1, 0)
    noise = F.avg_pool2d(torch.randn(512, 3, 20, 20, generator=g), 5, 1, 0)
    data = (0.5 * protos[torch.randint(0, 10, (512,), generator=g)][:, :, :16, :16] + 0.25 + 0.6 * noise).clamp(0, 1)

    resnet = resnet18()

    learner = BYOL(
        resnet,
        image_size = 16,
        hidden_layer = 'avgpool',
        projection_size = 64,
        projection_hidden_size = 128,
        sem_num_simplices = 16,
        augment_fn = TensorAugment(16),
    )

    opt = torch.optim.Adam(learner.parameters(), lr=3e-4)

    def sample_unlabelled_images():
        return data[torch.randint(0, 512, (64,))]

    losses = []
    for step in range(60):
        images = sample_unlabelled_images()
        loss = learner(images)
        opt.zero_grad()
        loss.backward()
        opt.step()
        learner.update_moving_average() # update moving average of target encoder
        losses.append(loss.item())
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    print(f"[summary] byol_loss(mean of 10 steps) first={first:.4f} last={last:.4f} decreased={last < first}")


if __name__ == "__main__":
    main()
