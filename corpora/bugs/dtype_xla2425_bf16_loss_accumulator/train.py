# Source: pytorch/xla, test/test_train_mp_mnist.py (MNIST training loop) and TROUBLESHOOTING.md (XLA_USE_BF16)
# Report: https://github.com/pytorch/xla/pull/2425
# MNIST-style CNN trained with every float tensor in bfloat16 (what XLA_USE_BF16=1 does on TPU);
# the epoch's mean training loss is accumulated in a device tensor to avoid a host sync per
# step. Synthetic 28x28 digits stand in for MNIST.
import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = torch.bfloat16


class MNIST(nn.Module):
    def __init__(self):
        super(MNIST, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.bn1 = nn.BatchNorm2d(10)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.bn2 = nn.BatchNorm2d(20)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = self.bn1(x)
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = self.bn2(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n = 6400
    target_all = torch.randint(0, 10, (n,), generator=gen)
    protos = torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    data_all = (protos[target_all] + 1.2 * torch.randn(n, 1, 28, 28, generator=gen)).to(DTYPE)

    model = MNIST().to(DTYPE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    loss_fn = nn.NLLLoss()
    batch_size = 16
    for epoch in range(2):
        model.train()
        total_loss = torch.zeros((), dtype=DTYPE)
        host_losses = []
        num_steps = 0
        for step in range(n // batch_size):
            data = data_all[step * batch_size:(step + 1) * batch_size]
            target = target_all[step * batch_size:(step + 1) * batch_size]
            optimizer.zero_grad()
            output = model(data)
            loss = loss_fn(output, target)
            loss.backward()
            optimizer.step()
            total_loss += loss.detach()
            num_steps += 1
            if step % 100 == 0:
                host_losses.append(loss.item())
        print("epoch %d mean train loss %.4f (steps %d; sampled per-step losses %s)" % (
            epoch, (total_loss / num_steps).item(), num_steps, [round(v, 2) for v in host_losses]))


if __name__ == "__main__":
    main()
