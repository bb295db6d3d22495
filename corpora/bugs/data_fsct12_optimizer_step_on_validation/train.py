# Source: SKrisanski/FSCT, scripts/train.py (TrainModel.run_training), commit 7f1bd48a6dd9e86dc4333aa6029749514e303637
# Report: https://github.com/SKrisanski/FSCT/issues/12
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


class Data:
    def __init__(self, pos, y):
        self.pos, self.y = pos, y


def make_plot(n_boxes, seed, tilt):
    rng = np.random.default_rng(seed)
    boxes = []
    for _ in range(n_boxes):
        pos = rng.uniform(-3, 3, (512, 3)).astype(np.float32)
        h = pos[:, 2] + tilt * pos[:, 0]
        r = np.hypot(pos[:, 0] - 0.5 * np.sin(pos[:, 2]), pos[:, 1])
        y = np.where(h < -2.0, 0, np.where(r < 0.8, 2, np.where(h > 1.0, 3, 1)))
        boxes.append(Data(torch.tensor(pos), torch.tensor(y)))
    return boxes


class Net(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.local = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, num_classes))

    def forward(self, data):
        f = self.local(data.pos)
        g = f.max(0, keepdim=True)[0].expand_as(f)
        return self.head(torch.cat([f, g], 1)).T.unsqueeze(0)


class TrainModel:
    def __init__(self, parameters):
        self.parameters = parameters
        self.device = "cpu"
        self.train_loader = make_plot(24, seed=1, tilt=0.0)
        self.validation_loader = make_plot(12, seed=2, tilt=0.35)
        self.test_loader = make_plot(12, seed=3, tilt=0.35)

    def accuracy_on(self, model, loader):
        model.eval()
        with torch.no_grad():
            return np.mean([(model(d).argmax(1)[0] == d.y).float().mean().item() for d in loader])

    def run_training(self):
        torch.manual_seed(0)
        model = Net()
        model = model.to(self.device)
        optimizer = optim.Adam(
            filter(lambda p: p.requires_grad, model.parameters()), lr=self.parameters["learning_rate"]
        )
        criterion = nn.CrossEntropyLoss()
        val_epoch_loss = 0
        val_epoch_acc = 0

        for epoch in range(self.parameters["num_epochs"]):
            # TRAINING
            model.train()
            running_loss = 0.0
            running_acc = 0
            for data in self.train_loader:
                data.pos = data.pos.to(self.device)
                y = torch.unsqueeze(data.y, 0).to(self.device)
                outputs = model(data)
                loss = criterion(outputs, y)

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

                _, preds = torch.max(outputs, 1)
                running_loss += loss.detach().item()
                running_acc += torch.sum(preds == y.data).item() / y.shape[1]
            epoch_loss = running_loss / len(self.train_loader)
            epoch_acc = running_acc / len(self.train_loader)

            # VALIDATION
            if self.parameters["perform_validation_during_training"]:
                model.eval()
                running_loss = 0.0
                running_acc = 0
                for data in self.validation_loader:
                    data.pos = data.pos.to(self.device)
                    y = torch.unsqueeze(data.y, 0).to(self.device)

                    outputs = model(data)
                    loss = criterion(outputs, y)

                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()

                    _, preds = torch.max(outputs, 1)
                    running_loss += loss.detach().item()
                    running_acc += torch.sum(preds == y.data).item() / y.shape[1]
                val_epoch_loss = running_loss / len(self.validation_loader)
                val_epoch_acc = running_acc / len(self.validation_loader)
                if epoch % 5 == 4:
                    print("epoch", epoch, "train acc", np.around(epoch_acc, 4), "loss", np.around(epoch_loss, 4),
                          "| validation acc", np.around(val_epoch_acc, 4), "loss", np.around(val_epoch_loss, 4))
        print("held-out plot accuracy (never seen):", np.around(self.accuracy_on(model, self.test_loader), 4),
              "| validation plot accuracy:", np.around(self.accuracy_on(model, self.validation_loader), 4))


if __name__ == "__main__":
    parameters = dict(
        perform_validation_during_training=1,
        num_epochs=20,
        learning_rate=0.002,
    )

    run_training = TrainModel(parameters)
    run_training.run_training()
