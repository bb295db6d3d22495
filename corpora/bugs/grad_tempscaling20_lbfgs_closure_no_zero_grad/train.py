# Source: gpleiss/temperature_scaling, temperature_scaling.py (ModelWithTemperature.set_temperature, _ECELoss), demo.py, train.py, commit a474b23f6958be9629b70341a85f5b53fcfb0ec8
# Report: https://github.com/gpleiss/temperature_scaling/issues/20
# Temperature scaling (Guo et al. 2017): train a classifier, then fit one temperature on the
# validation logits with LBFGS on the NLL and report NLL / ECE before and after. The
# DenseNet-CIFAR100 is replaced by an MLP trained to over-confidence on a synthetic 10-class
# problem with label noise, CUDA calls are dropped, torchvision / fire are not used.
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class ModelWithTemperature(nn.Module):
    """
    A thin decorator, which wraps a model with temperature scaling
    model (nn.Module):
        A classification neural network
        NB: Output of the neural network should be the classification logits,
            NOT the softmax (or log softmax)!
    """
    def __init__(self, model):
        super(ModelWithTemperature, self).__init__()
        self.model = model
        self.temperature = nn.Parameter(torch.ones(1) * 1.5)

    def forward(self, input):
        logits = self.model(input)
        return self.temperature_scale(logits)

    def temperature_scale(self, logits):
        """
        Perform temperature scaling on logits
        """
        # Expand temperature to match the size of logits
        temperature = self.temperature.unsqueeze(1).expand(logits.size(0), logits.size(1))
        return logits / temperature

    # This function probably should live outside of this class, but whatever
    def set_temperature(self, valid_loader):
        """
        Tune the tempearature of the model (using the validation set).
        We're going to set it to optimize NLL.
        valid_loader (DataLoader): validation set loader
        """
        nll_criterion = nn.CrossEntropyLoss()
        ece_criterion = _ECELoss()

        # First: collect all the logits and labels for the validation set
        logits_list = []
        labels_list = []
        with torch.no_grad():
            for input, label in valid_loader:
                logits = self.model(input)
                logits_list.append(logits)
                labels_list.append(label)
            logits = torch.cat(logits_list)
            labels = torch.cat(labels_list)

        # Calculate NLL and ECE before temperature scaling
        before_temperature_nll = nll_criterion(logits, labels).item()
        before_temperature_ece = ece_criterion(logits, labels).item()
        print('Before temperature - NLL: %.3f, ECE: %.3f' % (before_temperature_nll, before_temperature_ece))

        # Next: optimize the temperature w.r.t. NLL
        optimizer = optim.LBFGS([self.temperature], lr=0.01, max_iter=50)

        def eval():
            loss = nll_criterion(self.temperature_scale(logits), labels)
            loss.backward()
            return loss
        optimizer.step(eval)

        # Calculate NLL and ECE after temperature scaling
        after_temperature_nll = nll_criterion(self.temperature_scale(logits), labels).item()
        after_temperature_ece = ece_criterion(self.temperature_scale(logits), labels).item()
        print('Optimal temperature: %.3f' % self.temperature.item())
        print('After temperature - NLL: %.3f, ECE: %.3f' % (after_temperature_nll, after_temperature_ece))

        return self


class _ECELoss(nn.Module):
    """
    Calculates the Expected Calibration Error of a model.
    The input to this loss is the logits of a model, NOT the softmax scores.
    """
    def __init__(self, n_bins=15):
        super(_ECELoss, self).__init__()
        bin_boundaries = torch.linspace(0, 1, n_bins + 1)
        self.bin_lowers = bin_boundaries[:-1]
        self.bin_uppers = bin_boundaries[1:]

    def forward(self, logits, labels):
        softmaxes = F.softmax(logits, dim=1)
        confidences, predictions = torch.max(softmaxes, 1)
        accuracies = predictions.eq(labels)

        ece = torch.zeros(1, device=logits.device)
        for bin_lower, bin_upper in zip(self.bin_lowers, self.bin_uppers):
            # Calculated |confidence - accuracy| in each bin
            in_bin = confidences.gt(bin_lower.item()) * confidences.le(bin_upper.item())
            prop_in_bin = in_bin.float().mean()
            if prop_in_bin.item() > 0:
                accuracy_in_bin = accuracies[in_bin].float().mean()
                avg_confidence_in_bin = confidences[in_bin].mean()
                ece += torch.abs(avg_confidence_in_bin - accuracy_in_bin) * prop_in_bin

        return ece


def make_data(n, g, centers):
    y = torch.randint(0, 10, (n,), generator=g)
    x = centers[y] + 1.2 * torch.randn(n, 20, generator=g)
    flip = torch.rand(n, generator=g) < 0.15
    y = torch.where(flip, torch.randint(0, 10, (n,), generator=g), y)
    return x, y


def train(model, loader, n_epochs=40):
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    for epoch in range(n_epochs):
        model.train()
        total, correct, loss_sum = 0, 0, 0.0
        for input, target in loader:
            output = model(input)
            loss = F.cross_entropy(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += target.size(0)
            correct += (output.argmax(1) == target).sum().item()
            loss_sum += loss.item() * target.size(0)
        if epoch % 10 == 9:
            print('Epoch %d train loss %.3f acc %.3f' % (epoch + 1, loss_sum / total, correct / total))


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    centers = 1.0 * torch.randn(10, 20, generator=g)
    train_set = TensorDataset(*make_data(1000, g, centers))
    valid_set = TensorDataset(*make_data(1000, g, centers))
    orig_model = nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    train(orig_model, DataLoader(train_set, batch_size=64, shuffle=True))
    orig_model.eval()
    model = ModelWithTemperature(orig_model)
    model.set_temperature(DataLoader(valid_set, batch_size=256))


if __name__ == '__main__':
    main()
