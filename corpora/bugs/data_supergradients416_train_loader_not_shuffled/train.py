# Source: Deci-AI/super-gradients, training/dataloaders/dataloaders.py (imagenet_train / get_data_loader with default dataloader params) and the reporter's Trainer script
# Report: https://github.com/Deci-AI/super-gradients/issues/416
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

DEFAULT_TRAIN_DATALOADER_PARAMS = {"batch_size": 64, "num_workers": 0, "drop_last": True}
DEFAULT_VAL_DATALOADER_PARAMS = {"batch_size": 200, "num_workers": 0}


class ImageFolder(Dataset):
    """Files listed class by class, as torchvision's ImageFolder does (samples sorted by class folder)."""

    def __init__(self, root, train=True, num_classes=10, per_class=120):
        g = torch.Generator().manual_seed(0 if train else 1)
        protos = torch.randn(num_classes, 64, generator=torch.Generator().manual_seed(3))
        self.samples = []
        for cls in range(num_classes):
            for _ in range(per_class if train else per_class // 3):
                self.samples.append((protos[cls] + 1.5 * torch.randn(64, generator=g), cls))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]


def get_data_loader(dataset, default_params, dataloader_params=None):
    dataloader_params = {**default_params, **(dataloader_params or {})}
    return DataLoader(dataset=dataset, **dataloader_params)


def imagenet_train(dataloader_params=None):
    return get_data_loader(ImageFolder("train"), DEFAULT_TRAIN_DATALOADER_PARAMS, dataloader_params)


def imagenet_val(dataloader_params=None):
    return get_data_loader(ImageFolder("val", train=False), DEFAULT_VAL_DATALOADER_PARAMS, dataloader_params)


class Trainer:
    def __init__(self, experiment_name):
        self.experiment_name = experiment_name

    def train(self, model, training_params, train_loader, valid_loader):
        p = training_params
        opt = torch.optim.SGD(model.parameters(), lr=p["initial_lr"], **p["optimizer_params"])
        for epoch in range(p["max_epochs"]):
            model.train()
            for x, y in train_loader:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            model.eval()
            correct = total = 0
            preds = []
            with torch.no_grad():
                for x, y in valid_loader:
                    pred = model(x).argmax(1)
                    preds.append(pred)
                    correct += (pred == y).sum().item()
                    total += len(y)
            preds = torch.cat(preds)
            print(f"Epoch {epoch} train loss {loss.item():.4f} | valid Accuracy {correct / total:.4f} | "
                  f"classes predicted on valid: {torch.unique(preds).tolist()}")


def main():
    torch.manual_seed(0)
    dataloader_params = {"batch_size": 32}
    train_params = {"max_epochs": 1, "initial_lr": 0.01, "optimizer": "SGD",
                    "optimizer_params": {"weight_decay": 0.0001, "momentum": 0.9, "nesterov": True},
                    "loss": "cross_entropy"}
    train_dataloader = imagenet_train(dataloader_params)
    val_dataloader = imagenet_val()
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    trainer = Trainer(experiment_name="resnet_imagenet")
    trainer.train(model=model, training_params=train_params, train_loader=train_dataloader, valid_loader=val_dataloader)


if __name__ == "__main__":
    main()
