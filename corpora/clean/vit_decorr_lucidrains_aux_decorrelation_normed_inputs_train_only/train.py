# Source: lucidrains/vit-pytorch, train_vit_decorr.py, vit_pytorch/vit_with_decorr.py, commit 69d24fe9e3024c0d4b02761123b8583a24ebed1e
# https://github.com/lucidrains/vit-pytorch
#
# ViT trained with an auxiliary decorrelation loss (arXiv 2510.14657 without the decorrelation module): every
# attention and feed-forward block returns its LayerNorm-ed input, all of them are stacked and the loss penalises
# the off-diagonal entries of their (uncentred) feature second-moment matrices, divided by d(d-1), summed over
# layers per sample and averaged; the aux loss is only computed when self.training (otherwise a registered zero
# buffer is returned); total = CE + 0.1 * decorr; positional embedding added in place (x += ...) to the output of
# torch.cat; Adam(3e-4); backward through accelerator.backward, then optim.step() and zero_grad() AFTER the step.
# Adaptation: torchvision/accelerate/wandb/einops are not installed: CIFAR100 -> 640 synthetic 32x32 images of 10
# classes (+ 320 held out) normalised with (0.5, 0.5); the Accelerator is a CPU stand-in whose backward() calls
# loss.backward() and whose prepare() returns its arguments; wandb is a no-op stub; the einops calls are replaced
# by equivalent torch code for the patterns used (the pack/unpack branch of token sampling is unused with
# decorr_sample_frac=1); model dim 128 -> 64, depth 6 -> 2, heads 8 -> 4, dim_head 64 -> 16, mlp_dim 512 -> 128,
# patch_size 4 -> 8; EPOCHS 10 kept; loss printed every 20 steps instead of every step; held-out accuracy printed
# before and after training.
import torch
import torch.nn.functional as F
from torch import nn, stack, tensor
from torch.nn import Module, ModuleList
from torch.utils.data import DataLoader, TensorDataset


# ---------------------------------------------------------------- einops stand-ins for the patterns used
def rearrange(t, pattern, **kw):
    if pattern == 'b n (h d) -> b h n d':
        return t.reshape(t.shape[0], t.shape[1], kw['h'], -1).transpose(1, 2)
    if pattern == 'b h n d -> b n (h d)':
        return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1)
    if pattern == '... n d -> ... 1 n d':
        return t.unsqueeze(-3)
    if pattern == 'b -> b 1':
        return t[:, None]
    if pattern == 'l b n d -> n b l d':
        return t.permute(2, 1, 0, 3)
    raise NotImplementedError(pattern)


def repeat(t, pattern, b):
    assert pattern == '1 1 d -> b 1 d'
    return t.expand(b, -1, -1)


def reduce(t, pattern, op):
    assert pattern == '... b s d e -> b' and op == 'sum'
    return t.movedim(-4, 0).reshape(t.shape[-4], -1).sum(-1)


def einsum(a, b, pattern):
    if pattern == '... s n d, ... s n e -> ... s d e':
        return torch.einsum('...nd,...ne->...de', a, b)
    if pattern == '... n d, s d e -> ... s n e':
        return torch.einsum('...nd,sde->...sne', a, b)
    raise NotImplementedError(pattern)


def pack(*a, **k):
    raise NotImplementedError('einops.pack (token sampling) is not used with decorr_sample_frac=1')


unpack = pack


class Rearrange(Module):
    """einops Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)')."""

    def __init__(self, pattern, p1, p2):
        super().__init__()
        self.p1, self.p2 = p1, p2

    def forward(self, x):
        b, c, H, W = x.shape
        x = x.reshape(b, c, H // self.p1, self.p1, W // self.p2, self.p2)
        return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (H // self.p1) * (W // self.p2), self.p1 * self.p2 * c)


# ---------------------------------------------------------------- vit_pytorch/vit_with_decorr.py
# helpers

def exists(v):
    return v is not None

def default(v, d):
    return v if exists(v) else d

def pair(t):
    return t if isinstance(t, tuple) else (t, t)

def divisible_by(num, den):
    return (num % den) == 0

# decorr loss

class DecorrelationLoss(Module):
    def __init__(
        self,
        sample_frac = 1.,
        soft_validate_num_sampled = False,
        use_subspace = False,
        dim = None,
        dim_subspace = 64,
        num_subspaces = 1,
        mean_center = False, # covariance if true
        across_depth = False
    ):
        super().__init__()
        assert 0. <= sample_frac <= 1.
        self.need_sample = sample_frac < 1. and not across_depth
        self.sample_frac = sample_frac

        self.soft_validate_num_sampled = soft_validate_num_sampled
        self.use_subspace = use_subspace
        self.dim_subspace = dim_subspace
        self.num_subspaces = num_subspaces
        self.mean_center = mean_center

        self.register_buffer('zero', tensor(0.), persistent = False)

        if use_subspace:
            assert exists(dim), 'dim must be passed in if using subspaces'
            assert exists(dim_subspace) or num_subspaces == 1, 'dim_subspace must be provided if num_subspace greater than one'
            assert dim_subspace < dim, 'subspace dimension must be less than or equal to feature dimension'

            self.register_buffer('proj', torch.empty(num_subspaces, dim, dim_subspace), persistent = True)

            for i in range(num_subspaces):
                nn.init.orthogonal_(self.proj[i])

    def forward(
        self,
        tokens
    ):
        batch, seq_len, dim, device = *tokens.shape[-3:], tokens.device

        if self.need_sample:
            num_sampled = int(seq_len * self.sample_frac)

            assert self.soft_validate_num_sampled or num_sampled >= 2.

            if num_sampled <= 1:
                return self.zero

            tokens, packed_shape = pack([tokens], '* n d e')

            indices = torch.randn(tokens.shape[:2]).argsort(dim = -1)[..., :num_sampled, :]

            batch_arange = torch.arange(tokens.shape[0], device = tokens.device)
            batch_arange = rearrange(batch_arange, 'b -> b 1')

            tokens = tokens[batch_arange, indices]
            tokens, = unpack(tokens, packed_shape, '* n d e')

        if self.use_subspace:
            tokens = einsum(tokens, self.proj, '... n d, s d e -> ... s n e')
            dim = self.dim_subspace
        else:
            tokens = rearrange(tokens, '... n d -> ... 1 n d')

        if self.mean_center:
            tokens = tokens - tokens.mean(dim = -2, keepdim = True)

        dist = einsum(tokens, tokens, '... s n d, ... s n e -> ... s d e') / tokens.shape[-2]
        eye = torch.eye(dim, device = device)

        loss = dist.pow(2) * (1. - eye) / ((dim - 1) * dim)

        loss = reduce(loss, '... b s d e -> b', 'sum')
        return loss.mean()

# classes

class FeedForward(Module):
    def __init__(self, dim, hidden_dim, dropout = 0.):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

        self.net = nn.Sequential(
            nn.Linear(dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, dim),
            nn.Dropout(dropout)
        )

    def forward(self, x):
        normed = self.norm(x)
        return self.net(normed), normed

class Attention(Module):
    def __init__(self, dim, heads = 8, dim_head = 64, dropout = 0.):
        super().__init__()
        inner_dim = dim_head *  heads
        project_out = not (heads == 1 and dim_head == dim)

        self.norm = nn.LayerNorm(dim)
        self.heads = heads
        self.scale = dim_head ** -0.5

        self.attend = nn.Softmax(dim = -1)
        self.dropout = nn.Dropout(dropout)

        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias = False)

        self.to_out = nn.Sequential(
            nn.Linear(inner_dim, dim),
            nn.Dropout(dropout)
        ) if project_out else nn.Identity()

    def forward(self, x):
        normed = self.norm(x)

        qkv = self.to_qkv(normed).chunk(3, dim = -1)
        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h = self.heads), qkv)

        dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale

        attn = self.attend(dots)
        attn = self.dropout(attn)

        out = torch.matmul(attn, v)
        out = rearrange(out, 'b h n d -> b n (h d)')

        return self.to_out(out), normed

class Transformer(Module):
    def __init__(self, dim, depth, heads, dim_head, mlp_dim, dropout = 0.):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.layers = ModuleList([])

        for _ in range(depth):
            self.layers.append(ModuleList([
                Attention(dim, heads = heads, dim_head = dim_head, dropout = dropout),
                FeedForward(dim, mlp_dim, dropout = dropout)
            ]))

    def forward(self, x):

        normed_inputs = []
        layer_outputs = []

        for attn, ff in self.layers:
            attn_out, attn_normed_inp = attn(x)
            layer_outputs.append(attn_out)
            x = attn_out + x

            ff_out, ff_normed_inp = ff(x)
            layer_outputs.append(ff_out)
            x = ff_out + x

            normed_inputs.append(attn_normed_inp)
            normed_inputs.append(ff_normed_inp)

        return self.norm(x), stack(normed_inputs), stack(layer_outputs)

class ViT(Module):
    def __init__(
        self,
        *,
        image_size,
        patch_size,
        num_classes,
        dim,
        depth,
        heads,
        mlp_dim,
        pool = 'cls',
        channels = 3,
        dim_head = 64,
        dropout = 0.,
        emb_dropout = 0.,
        decorr_sample_frac = 1.,
        decorr_use_subspace = False,
        decorr_dim_subspace = 64,
        decorr_num_subspaces = 1,
        decorr_mean_center = False,
        decorr_layer_outputs_across_depth = False
    ):
        super().__init__()
        image_height, image_width = pair(image_size)
        self.patch_size = patch_height, patch_width = pair(patch_size)

        assert divisible_by(image_height, patch_height) and divisible_by(image_width, patch_width), 'Image dimensions must be divisible by the patch size.'

        num_patches = (image_height // patch_height) * (image_width // patch_width)
        patch_dim = channels * patch_height * patch_width
        assert pool in {'cls', 'mean'}, 'pool type must be either cls (cls token) or mean (mean pooling)'

        self.to_patch_embedding = nn.Sequential(
            Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)', p1 = patch_height, p2 = patch_width),
            nn.LayerNorm(patch_dim),
            nn.Linear(patch_dim, dim),
            nn.LayerNorm(dim),
        )

        self.pos_embedding = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.dropout = nn.Dropout(emb_dropout)

        self.transformer = Transformer(dim, depth, heads, dim_head, mlp_dim, dropout)

        self.pool = pool
        self.to_latent = nn.Identity()

        self.mlp_head = nn.Linear(dim, num_classes)

        # decorrelation loss related

        self.decorr_layer_outputs_across_depth = decorr_layer_outputs_across_depth

        self.has_decorr_loss = decorr_sample_frac > 0.

        if self.has_decorr_loss:
            self.decorr_loss = DecorrelationLoss(decorr_sample_frac, use_subspace = decorr_use_subspace, dim = dim, dim_subspace = decorr_dim_subspace, num_subspaces = decorr_num_subspaces, mean_center = decorr_mean_center, across_depth = self.decorr_layer_outputs_across_depth)

        self.register_buffer('zero', torch.tensor(0.), persistent = False)

    def forward(
        self,
        img,
        return_decorr_aux_loss = None
    ):
        return_decorr_aux_loss = default(return_decorr_aux_loss, self.training) and self.has_decorr_loss

        x = self.to_patch_embedding(img)
        b, n, _ = x.shape

        cls_tokens = repeat(self.cls_token, '1 1 d -> b 1 d', b = b)
        x = torch.cat((cls_tokens, x), dim=1)
        x += self.pos_embedding[:, :(n + 1)]
        x = self.dropout(x)

        x, normed_layer_inputs, layer_outputs = self.transformer(x)

        # maybe return decor loss

        decorr_aux_loss = self.zero

        if return_decorr_aux_loss:
            decorr_inputs = normed_layer_inputs

            if self.decorr_layer_outputs_across_depth:
                decorr_inputs = rearrange(layer_outputs, 'l b n d -> n b l d')

            decorr_aux_loss = self.decorr_loss(decorr_inputs)

        x = x.mean(dim = 1) if self.pool == 'mean' else x[:, 0]

        x = self.to_latent(x)
        return self.mlp_head(x), decorr_aux_loss


# ---------------------------------------------------------------- stand-ins: accelerate, wandb, CIFAR100
class Accelerator:
    def prepare(self, *objs):
        return objs

    def backward(self, loss):
        loss.backward()

    def print(self, *a, **k):
        print(*a, **k)


class wandb:
    class run:
        name = None

    @staticmethod
    def init(**kw):
        pass

    @staticmethod
    def log(d):
        pass


def synthetic_cifar(n, seed):
    g = torch.Generator().manual_seed(1234)
    protos = torch.nn.functional.avg_pool2d(torch.rand(10, 3, 36, 36, generator=g), 5, 1, 0)
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    noise = torch.nn.functional.avg_pool2d(torch.randn(n, 3, 36, 36, generator=g), 5, 1, 0)
    images = (0.6 * protos[labels] + 0.2 + 0.5 * noise).clamp(0, 1)
    return (images - 0.5) / 0.5, labels


@torch.no_grad()
def heldout_accuracy(vit, images, labels):
    vit.eval()
    logits, _ = vit(images)
    vit.train()
    return (logits.argmax(-1) == labels).float().mean().item()


# ---------------------------------------------------------------- train_vit_decorr.py
BATCH_SIZE = 32
LEARNING_RATE = 3e-4
EPOCHS = 10
DECORR_LOSS_WEIGHT = 1e-1

TRACK_EXPERIMENT_ONLINE = False


def main():
    torch.manual_seed(0)
    images, labels = synthetic_cifar(640, 1)
    test_images, test_labels = synthetic_cifar(320, 2)
    dataset = TensorDataset(images, labels)
    dataloader = DataLoader(dataset, batch_size = BATCH_SIZE, shuffle = True)

    vit = ViT(
        dim = 64,
        num_classes = 100,
        image_size = 32,
        patch_size = 8,
        depth = 2,
        heads = 4,
        dim_head = 16,
        mlp_dim = 64 * 2,
        decorr_sample_frac = 1.,        # use all tokens
        decorr_use_subspace = False,    # use subspace
        decorr_dim_subspace = 64,
        decorr_num_subspaces = 4,
        decorr_layer_outputs_across_depth = False
    )

    from torch.optim import Adam

    optim = Adam(vit.parameters(), lr = LEARNING_RATE)

    accelerator = Accelerator()

    vit, optim, dataloader = accelerator.prepare(vit, optim, dataloader)

    wandb.init(
        project = 'vit-decorr',
        mode = 'disabled' if not TRACK_EXPERIMENT_ONLINE else 'online'
    )

    wandb.run.name = 'baseline'

    acc0 = heldout_accuracy(vit, test_images, test_labels)
    print(f'held-out accuracy before training: {acc0:.3f}')
    step = 0
    for _ in range(EPOCHS):
        for images, labels in dataloader:

            logits, decorr_aux_loss = vit(images)
            loss = F.cross_entropy(logits, labels)


            total_loss = (
                loss +
                decorr_aux_loss * DECORR_LOSS_WEIGHT
            )

            wandb.log(dict(loss = loss, decorr_loss = decorr_aux_loss))

            if step % 20 == 0:
                accelerator.print(f'loss: {loss.item():.3f} | decorr aux loss: {decorr_aux_loss.item():.3f}')
            step += 1

            accelerator.backward(total_loss)
            optim.step()
            optim.zero_grad()

    acc1 = heldout_accuracy(vit, test_images, test_labels)
    print(f'held-out accuracy after training: {acc1:.3f}')
    print(f'[summary] heldout_acc first={acc0:.3f} last={acc1:.3f} increased={acc1 > acc0}')


if __name__ == '__main__':
    torch.set_num_threads(1)
    main()
