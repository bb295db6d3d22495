# Source: cccntu/minLoRA, minlora/model.py (LoRAParametrization, add_lora, merge_lora) + minlora/utils.py (get_lora_params,
# get_lora_state_dict, name_is_lora) + README.md "Training a model with minLoRA" / "Loading and Inferencing", commit d47a4c93df87540bb396172cfac1f3246e7db5f9
# LoRA through torch.nn.utils.parametrize: each Linear.weight becomes weight.original + B @ A * scaling; the optimizer
# receives only the lora_A/lora_B parameters (README step 2); after training the adapters are exported, re-loaded with
# strict=False into a fresh LoRA model and merged into plain Linear weights.
# Suspicious-looking but correct patterns kept from the original:
#   - the base weights (parametrizations.weight.original) keep requires_grad=True but are in no optimizer: they get a
#     .grad every backward which optimizer.zero_grad() never clears (it only knows the LoRA params), so those grads
#     grow step after step while the weights stay bit-identical
#   - lora_B is zero-initialised: the LoRA model equals the base model at step 0 and lora_A has zero gradient at the
#     first step; biases are not adapted
#   - model.weight is recomputed by the parametrization at every access (a non-leaf tensor, not a Parameter)
#   - load_state_dict(lora_state_dict, strict=False) with most keys missing, then merge_lora removes the
#     parametrizations with leave_parametrized=True
#   - a dropout mask buffer of ones exists even with lora_dropout_p=0 (the identity lambda is used instead)
# Adaptation: the README's training step "# ..." is filled with a plain AdamW loop; the base model is a small MLP
# pre-trained in the script on task A (synthetic 2-D spirals, 3 classes), LoRA then adapts it to task B (the same
# inputs rotated by 90 degrees); the nanoGPT example is not used; apply_lora iterates over
# list(layer.parametrizations.keys()) because current PyTorch deletes the ModuleDict entry during removal.
import math
from functools import partial

import torch
import torch.nn.utils.parametrize as parametrize
from torch import nn
class LoRAParametrization(nn.Module):
    def __init__(self, fan_in, fan_out, fan_in_fan_out=False, rank=4, lora_dropout_p=0.0, lora_alpha=1):
        super().__init__()
        # if weight is stored as (fan_out, fan_in), the memory layout of A & B follows (W + BA)x
        # otherwise, it's x(W + AB). This allows us to tie the weights between linear layers and embeddings
        self.swap = (lambda x: (x[1], x[0])) if fan_in_fan_out else (lambda x: x)
        self.lora_A = nn.Parameter(torch.zeros(self.swap((rank, fan_in))))
        self.lora_B = nn.Parameter(torch.zeros(self.swap((fan_out, rank))))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.lora_alpha, self.rank = lora_alpha, rank
        self.scaling = lora_alpha / rank
        self.lora_dropout = nn.Dropout(p=lora_dropout_p) if lora_dropout_p > 0 else lambda x: x
        self.dropout_fn = self._dropout if lora_dropout_p > 0 else lambda x: x
        self.register_buffer("lora_dropout_mask", torch.ones(self.swap((1, fan_in)), dtype=self.lora_A.dtype))
        self.forward_fn = self.lora_forward

    def _dropout(self, A):
        # to mimic the original implementation: A @ dropout(x), we do (A * dropout(ones)) @ x
        return A * self.lora_dropout(self.lora_dropout_mask)

    def lora_forward(self, X):
        return X + torch.matmul(*self.swap((self.lora_B, self.dropout_fn(self.lora_A)))).view(X.shape) * self.scaling

    def forward(self, X):
        return self.forward_fn(X)

    def disable_lora(self):
        self.forward_fn = lambda x: x

    def enable_lora(self):
        self.forward_fn = self.lora_forward

    @classmethod
    def from_linear(cls, layer, rank=4, lora_dropout_p=0.0, lora_alpha=1):
        fan_out, fan_in = layer.weight.shape
        return cls(
            fan_in, fan_out, fan_in_fan_out=False, rank=rank, lora_dropout_p=lora_dropout_p, lora_alpha=lora_alpha
        )

    @classmethod
    def from_conv2d(cls, layer, rank=4, lora_dropout_p=0.0, lora_alpha=1):
        fan_out, fan_in = layer.weight.view(layer.weight.shape[0], -1).shape
        return cls(
            fan_in, fan_out, fan_in_fan_out=False, rank=rank, lora_dropout_p=lora_dropout_p, lora_alpha=lora_alpha
        )

    @classmethod
    def from_embedding(cls, layer, rank=4, lora_dropout_p=0.0, lora_alpha=1):
        fan_in, fan_out = layer.weight.shape
        return cls(
            fan_in, fan_out, fan_in_fan_out=True, rank=rank, lora_dropout_p=lora_dropout_p, lora_alpha=lora_alpha
        )


default_lora_config = {  # specify which layers to add lora to, by default only add to linear layers
    nn.Linear: {
        "weight": partial(LoRAParametrization.from_linear, rank=4),
    },
}


def apply_lora(layer, register=True, merge=False, lora_config=default_lora_config):
    """add lora parametrization to a layer, designed to be used with model.apply"""
    if register:
        if type(layer) in lora_config:
            for attr_name, parametrization in lora_config[type(layer)].items():
                parametrize.register_parametrization(layer, attr_name, parametrization(layer))
    else:  # this will remove all parametrizations, use with caution
        if hasattr(layer, "parametrizations"):
            for attr_name in list(layer.parametrizations.keys()):
                parametrize.remove_parametrizations(layer, attr_name, leave_parametrized=merge)


def add_lora(model, lora_config=default_lora_config):
    """add lora parametrization to all layers in a model. Calling it twice will add lora twice"""
    model.apply(partial(apply_lora, lora_config=lora_config))


def add_lora_by_name(model, target_module_names, lora_config=default_lora_config):
    """Add LoRA parameterization to specific layers in a model by names"""
    for name, layer in model.named_modules():
        if any([m in name for m in target_module_names]):
            add_lora(layer, lora_config=lora_config)


def merge_lora(model):
    """merge lora parametrization to all layers in a model. This will remove all parametrization"""
    model.apply(partial(apply_lora, register=False, merge=True))


def remove_lora(model):
    """remove lora parametrization to all layers in a model. This will remove all parametrization"""
    model.apply(partial(apply_lora, register=False, merge=False))


def apply_to_lora(fn):
    """apply a function to LoRAParametrization layers, designed to be used with model.apply"""

    def apply_fn(layer):
        if isinstance(layer, LoRAParametrization):
            fn(layer)

    return apply_fn


def name_is_lora(name):
    return (
        len(name.split(".")) >= 4
        and (name.split(".")[-4]) == "parametrizations"
        and name.split(".")[-1] in ["lora_A", "lora_B"]
    )


def get_params_by_name(model, print_shapes=False, name_filter=None):
    for n, p in model.named_parameters():
        if name_filter is None or name_filter(n):
            if print_shapes:
                print(n, p.shape)
            yield p


def get_lora_params(model, print_shapes=False):
    return get_params_by_name(model, print_shapes=print_shapes, name_filter=name_is_lora)


def get_lora_state_dict(model):
    return {k: v for k, v in model.state_dict().items() if name_is_lora(k)}


def spirals(n, rotate=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    r = torch.rand(n, generator=g)
    t = r * 4 + y * (2 * math.pi / 3) + 0.2 * torch.randn(n, generator=g)
    x = torch.stack([r * torch.cos(t), r * torch.sin(t)], 1)
    if rotate:
        x = torch.stack([-x[:, 1], x[:, 0]], 1)
    return x, y


def make_model():
    return nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def fit(model, optimizer, x, y, steps):
    for step in range(steps):
        idx = torch.randint(0, len(x), (128,))
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def main():
    torch.manual_seed(0)
    xa, ya = spirals(2000, rotate=False, seed=1)
    xb, yb = spirals(2000, rotate=True, seed=2)
    xb_test, yb_test = spirals(1000, rotate=True, seed=3)

    # base model trained normally on task A
    model = make_model()
    fit(model, torch.optim.AdamW(model.parameters(), lr=1e-2), xa, ya, 300)
    base_state = {k: v.clone() for k, v in model.state_dict().items()}
    print(f"base model: task A acc {accuracy(model, xa, ya):.3f}, task B acc {accuracy(model, xb_test, yb_test):.3f}")

    # Step 1: Add LoRA to the model
    add_lora(model)
    # Step 2: Collect the parameters, pass them to the optimizer
    parameters = [
        {"params": list(get_lora_params(model))},
    ]
    optimizer = torch.optim.AdamW(parameters, lr=1e-2)
    acc0 = accuracy(model, xb_test, yb_test)
    print(f"LoRA params: {sum(p.numel() for g in parameters for p in g['params'])}, task B acc at step 0 {acc0:.3f}")
    # Step 3: Train the model
    for rnd in range(4):
        loss = fit(model, optimizer, xb, yb, 100)
        orig_grad = model[2].parametrizations.weight.original.grad.norm().item()
        print(f"round {rnd} loss {loss:.4f} task B acc {accuracy(model, xb_test, yb_test):.3f} "
              f"(|grad| of layer 2 weight.original: {orig_grad:.2f})")
    acc1 = accuracy(model, xb_test, yb_test)
    unchanged = all(torch.equal(model[i].parametrizations.weight.original, base_state[f"{i}.weight"]) for i in (0, 2, 4))
    print(f"base weights unchanged: {unchanged}")
    # Step 4: export the LoRA parameters
    lora_state_dict = get_lora_state_dict(model)

    # Loading and inferencing: fresh base model + LoRA, load adapters with strict=False, merge
    model2 = make_model()
    model2.load_state_dict(base_state)
    add_lora(model2)
    _ = model2.load_state_dict(lora_state_dict, strict=False)
    merge_lora(model2)
    with torch.no_grad():
        same = torch.allclose(model2(xb_test), model(xb_test), atol=1e-5)
    print(f"merged model matches LoRA model: {same}, merged task B acc {accuracy(model2, xb_test, yb_test):.3f}")
    print(f"[summary] taskB_accuracy first={acc0:.3f} last={acc1:.3f} increased={acc1 > acc0}")


if __name__ == "__main__":
    main()
