# Source: jeshraghian/snntorch, docs/tutorials/tutorial_6.rst + examples/tutorial_6_CNN.ipynb (section 3.3 Training Loop)
# Report: https://github.com/jeshraghian/snntorch/pull/118
# snnTorch tutorial 6: a convolutional spiking network (Conv-Pool-Leaky x2, Linear-Leaky output)
# trained with the rate-coded cross-entropy loss through time; every few iterations the test
# accuracy is measured with batch_accuracy and recorded in test_acc_hist. snntorch's Leaky neuron
# (init_hidden, subtractive reset, fast-sigmoid surrogate), utils.reset, SF.ce_rate_loss and
# SF.accuracy_rate are re-implemented in plain torch; MNIST is replaced by synthetic 28x28 digits
# (noisy class prototypes, 20% labels flipped; 96 train / 384 test), channels 12/64 -> 6/16,
# num_steps 25 -> 8, batch 128 -> 32, 1 epoch -> 30 and the test every 50 -> 12 iterations.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)

batch_size = 32
dtype = torch.float
device = torch.device("cpu")


# ---- snntorch pieces -------------------------------------------------------------------
class FastSigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_, slope):
        ctx.save_for_backward(input_)
        ctx.slope = slope
        return (input_ > 0).float()

    @staticmethod
    def backward(ctx, grad_output):
        (input_,) = ctx.saved_tensors
        grad = grad_output / (ctx.slope * torch.abs(input_) + 1.0) ** 2
        return grad, None


class surrogate:
    @staticmethod
    def fast_sigmoid(slope=25):
        def inner(x):
            return FastSigmoid.apply(x, slope)
        return inner


class Leaky(nn.Module):
    def __init__(self, beta, spike_grad, threshold=1.0, init_hidden=False, output=False):
        super().__init__()
        self.beta = beta
        self.spike_grad = spike_grad
        self.threshold = threshold
        self.init_hidden = init_hidden
        self.output = output
        self.mem = None

    def reset_mem(self):
        self.mem = None

    def forward(self, input_):
        if self.mem is None:
            self.mem = torch.zeros_like(input_)
        reset = (self.mem - self.threshold > 0).float().detach()
        self.mem = self.beta * self.mem + input_ - reset * self.threshold
        spk = self.spike_grad(self.mem - self.threshold)
        if self.output:
            return spk, self.mem
        return spk


class snn:
    Leaky = Leaky


class utils:
    @staticmethod
    def reset(net):
        for m in net.modules():
            if isinstance(m, Leaky):
                m.reset_mem()


class SF:
    @staticmethod
    def ce_rate_loss():
        log_softmax = nn.LogSoftmax(dim=-1)
        loss_fn = nn.NLLLoss()

        def loss(spk_out, targets):
            log_p_y = log_softmax(spk_out)
            loss_val = torch.zeros((1), dtype=dtype, device=device)
            num_steps = spk_out.size(0)
            for step in range(num_steps):
                loss_val += loss_fn(log_p_y[step], targets)
            return loss_val / num_steps
        return loss

    @staticmethod
    def accuracy_rate(spk_out, targets):
        _, idx = spk_out.sum(dim=0).max(1)
        return torch.mean((targets == idx).float())


# ---- data ----------------------------------------------------------------------------------
def make_digits(n, protos, flip=0.2):
    y = torch.randint(0, 10, (n,))
    x = protos[y] + 0.5 * torch.randn(n, 1, 28, 28)
    x = x.clamp(0, 1)
    noisy = torch.rand(n) < flip
    y = torch.where(noisy, torch.randint(0, 10, (n,)), y)
    return x, y


protos = (torch.rand(10, 1, 28, 28) < 0.25).float()
x_train, y_train = make_digits(96, protos)
x_test, y_test = make_digits(384, protos)
train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=batch_size, shuffle=True, drop_last=True)
test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=batch_size, shuffle=True, drop_last=True)

# ---- network -----------------------------------------------------------------------------
spike_grad = surrogate.fast_sigmoid(slope=25)
beta = 0.5
num_steps = 8

net = nn.Sequential(nn.Conv2d(1, 6, 5),
                    nn.MaxPool2d(2),
                    snn.Leaky(beta=beta, spike_grad=spike_grad, init_hidden=True),
                    nn.Conv2d(6, 16, 5),
                    nn.MaxPool2d(2),
                    snn.Leaky(beta=beta, spike_grad=spike_grad, init_hidden=True),
                    nn.Flatten(),
                    nn.Linear(16*4*4, 10),
                    snn.Leaky(beta=beta, spike_grad=spike_grad, init_hidden=True, output=True)
                    ).to(device)


def forward_pass(net, num_steps, data):
    mem_rec = []
    spk_rec = []
    utils.reset(net)  # resets hidden states for all LIF neurons in net

    for step in range(num_steps):
        spk_out, mem_out = net(data)
        spk_rec.append(spk_out)
        mem_rec.append(mem_out)

    return torch.stack(spk_rec), torch.stack(mem_rec)


loss_fn = SF.ce_rate_loss()


def batch_accuracy(train_loader, net, num_steps):
    with torch.no_grad():
        total = 0
        acc = 0
        net.eval()

        train_loader = iter(train_loader)
        for data, targets in train_loader:
            data = data.to(device)
            targets = targets.to(device)
            spk_rec, _ = forward_pass(net, num_steps, data)

            acc += SF.accuracy_rate(spk_rec, targets) * spk_rec.size(1)
            total += spk_rec.size(1)

    return acc/total


def main():
    test_acc = batch_accuracy(test_loader, net, num_steps)
    print(f"The total accuracy on the test set is: {test_acc * 100:.2f}%")

    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2, betas=(0.9, 0.999))
    num_epochs = 30
    loss_hist = []
    test_acc_hist = []
    counter = 0

    # Outer training loop
    for epoch in range(num_epochs):

        # Training loop
        for data, targets in iter(train_loader):
            data = data.to(device)
            targets = targets.to(device)

            # forward pass
            net.train()
            spk_rec, _ = forward_pass(net, num_steps, data)

            # initialize the loss & sum over time
            loss_val = loss_fn(spk_rec, targets)

            # Gradient calculation + weight update
            optimizer.zero_grad()
            loss_val.backward()
            optimizer.step()

            # Store loss history for future plotting
            loss_hist.append(loss_val.item())

            # Test set
            if counter % 12 == 0:
                with torch.no_grad():
                    net.eval()

                    # Test set forward pass
                    test_acc = batch_accuracy(train_loader, net, num_steps)
                    print(f"Iteration {counter}, Test Acc: {test_acc * 100:.2f}%")
                    test_acc_hist.append(test_acc.item())

            counter += 1

    held_out = batch_accuracy(test_loader, net, num_steps)
    print(f"test_acc_hist {[round(a, 3) for a in test_acc_hist]}; best {max(test_acc_hist):.3f}; "
          f"accuracy of the final net on the 384 held-out test images {held_out.item():.3f}")


if __name__ == "__main__":
    main()
