"""Automatic mixed precision recipe: autocast around forward and loss, a GradScaler scaling the
loss, scaler.step / scaler.update, optimizer.zero_grad(set_to_none=True), and the checkpoint dict
{"model", "optimizer", "scaler"} state_dicts with the scaler restored on resume.

Source: pytorch/tutorials, recipes_source/recipes/amp_recipe.py,
commit db77dcf6e3637924f43852c014f2af9978b0f891.
Reduced: CPU autocast to bfloat16 (the recipe's CUDA float16), a 3-layer MLP at width 32,
4 random batches, an in-memory checkpoint.
"""

import io

import torch


def make_model(in_size, out_size, num_layers):
    layers = []
    for _ in range(num_layers - 1):
        layers.append(torch.nn.Linear(in_size, in_size))
        layers.append(torch.nn.ReLU())
    layers.append(torch.nn.Linear(in_size, out_size))
    return torch.nn.Sequential(*tuple(layers))


def build():
    torch.manual_seed(0)
    batch_size, in_size, out_size, num_layers, num_batches = 8, 32, 32, 3, 4
    data = [torch.randn(batch_size, in_size) for _ in range(num_batches)]
    targets = [torch.randn(batch_size, out_size) for _ in range(num_batches)]
    loss_fn = torch.nn.MSELoss()
    net = make_model(in_size, out_size, num_layers)
    opt = torch.optim.SGD(net.parameters(), lr=0.001)
    scaler = torch.amp.GradScaler("cpu")

    def train():
        for epoch in range(1):
            for input, target in zip(data, targets):
                with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                    output = net(input)
                    loss = loss_fn(output, target)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
        checkpoint = {"model": net.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict()}
        buf = io.BytesIO()
        torch.save(checkpoint, buf)
        buf.seek(0)
        checkpoint = torch.load(buf)
        net.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["optimizer"])
        scaler.load_state_dict(checkpoint["scaler"])

    return [net], [opt], train


if __name__ == "__main__":
    build()[2]()
