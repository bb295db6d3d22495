# Report: https://github.com/pytorch/pytorch/issues/16045
# Straightforward linear regression fitted by SGD on MSELoss: y = 10 + 9*x0 - 2*x1 + noise, a
# Linear(2, 1) model, 30 full-batch epochs, then the learned weight and bias are printed next to
# the true ones and the model is scored on fresh data.
import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)

    # Set up straightforward linear regression problem.
    sample_size = 100
    x = torch.randn((sample_size, 2))
    eps = torch.randn(sample_size)
    y = 10 + 9 * x[:, 0] - 2 * x[:, 1] + eps
    model = nn.Linear(2, 1)

    optimizer = torch.optim.SGD(model.parameters(), lr=.1)
    loss_func = nn.MSELoss()
    for epoch in range(30):
        optimizer.zero_grad()
        yhat = model(x)
        loss_val = loss_func(yhat, y)
        loss_val.backward()
        optimizer.step()
        print(f"epoch {epoch:2d} loss {loss_val.item():.4f}")

    print("weight", [round(v, 4) for v in model.weight.data.flatten().tolist()], "(true [9.0, -2.0])")
    print("bias", round(model.bias.data.item(), 4), "(true 10.0)")

    x_new = torch.randn((1000, 2))
    y_new = 10 + 9 * x_new[:, 0] - 2 * x_new[:, 1]
    with torch.no_grad():
        pred = model(x_new).reshape(-1)
    print(f"held-out RMSE against the noise-free line: {((pred - y_new) ** 2).mean().sqrt().item():.4f}")


if __name__ == "__main__":
    main()
