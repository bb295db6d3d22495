# Source: luxonis/luxonis-train, luxonis_train/core/core.py (LuxonisModel.__init__ loaders and pytorch_loaders, train, test), commit 0b13df5e64b71030f58dc2b26df3630d590500ce
# Report: https://github.com/luxonis/luxonis-train/pull/213
# luxonis-train's LuxonisModel: one Loader per view ("train", "val", "test") built from the
# config's train_view / val_view / test_view, torch DataLoaders over them (shuffle only for
# train), training with validation after every epoch, the best checkpoint kept by validation
# loss, then testing. Lightning, luxonis-ml datasets and the model zoo are replaced by a plain
# loop, an in-memory LuxonisDataset with three splits of synthetic 16x16 images (10 classes,
# 40% noisy labels) and a small classification CNN.
import copy
import logging
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as torch_data

logging.basicConfig(level=logging.INFO, format='%(message)s')
logger = logging.getLogger(__name__)
torch.set_num_threads(1)


# ---------------------------------------------------------------- luxonis-ml stand-ins
def make_dataset(seed=0, n_classes=10, sizes=(("train", 300), ("val", 300), ("test", 600))):
    rng = np.random.RandomState(seed)
    protos = rng.randn(n_classes, 3, 16, 16).astype(np.float32)
    splits = {}
    for name, n in sizes:
        y = rng.randint(n_classes, size=n)
        x = 0.8 * protos[y] + rng.randn(n, 3, 16, 16).astype(np.float32)
        noisy = rng.rand(n) < 0.4
        y_obs = np.where(noisy, rng.randint(n_classes, size=n), y)
        splits[name] = (torch.from_numpy(x), torch.from_numpy(y_obs).long())
    return splits


DATASET = make_dataset()


class LuxonisLoaderTorch(torch_data.Dataset):
    def __init__(self, view, image_source="image", height=16, width=16, augmentation_config=None,
                 color_space="RGB", keep_aspect_ratio=True, dataset_dir=None, delete_existing=True):
        self.view = view
        self.x, self.y = DATASET[view]

    def __len__(self):
        return len(self.y)

    def __getitem__(self, idx):
        return self.x[idx], {"classification": self.y[idx]}


LOADERS = {"LuxonisLoaderTorch": LuxonisLoaderTorch}


def collate_fn(batch):
    imgs = torch.stack([b[0] for b in batch])
    labels = {"classification": torch.stack([b[1]["classification"] for b in batch])}
    return imgs, labels


class ClassificationModel(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(64, n_classes)

    def forward(self, x):
        return self.head(self.backbone(x).flatten(1))


# ---------------------------------------------------------------- luxonis_train/core/core.py
class LuxonisModel:
    def __init__(self, cfg):
        self.cfg = cfg
        self.cfg_preprocessing = self.cfg.trainer.preprocessing
        if self.cfg.trainer.seed is not None:
            torch.manual_seed(self.cfg.trainer.seed)
            np.random.seed(self.cfg.trainer.seed)

        self.loaders = {}
        loader_name = self.cfg.loader.name
        Loader = LOADERS.get(loader_name)
        for view in ("train", "val", "test"):
            if (
                view != "train"
                and issubclass(Loader, LuxonisLoaderTorch)
                and self.cfg.loader.params.get("dataset_dir") is not None
            ):
                self.cfg.loader.params["delete_existing"] = False

            self.loaders[view] = Loader(
                view={
                    "train": self.cfg.loader.train_view,
                    "val": self.cfg.loader.train_view,
                    "test": self.cfg.loader.test_view,
                }[view],
                image_source=self.cfg.loader.image_source,
                height=self.cfg_preprocessing.train_image_size.height,
                width=self.cfg_preprocessing.train_image_size.width,
                augmentation_config=None,
                color_space=self.cfg_preprocessing.color_space,
                keep_aspect_ratio=self.cfg_preprocessing.keep_aspect_ratio,
                **self.cfg.loader.params,
            )

        for name, loader in self.loaders.items():
            logger.info(f"{name.capitalize()} loader - view: {loader.view}, size: {len(loader)}")
            if len(loader) == 0:
                logger.warning(f"{name.capitalize()} loader is empty!")

        self.pytorch_loaders = {}
        for view in ("train", "val", "test"):
            loader = self.loaders[view]
            self.pytorch_loaders[view] = torch_data.DataLoader(
                loader,
                batch_size=self.cfg.trainer.batch_size,
                num_workers=self.cfg.trainer.n_workers,
                collate_fn=collate_fn,
                shuffle=view == "train",
                drop_last=(self.cfg.trainer.skip_last_batch if view == "train" else False),
                pin_memory=self.cfg.trainer.pin_memory,
            )

        self.lightning_module = ClassificationModel()
        self.optimizer = torch.optim.Adam(self.lightning_module.parameters(), lr=self.cfg.trainer.optimizer.lr)
        self.best_val_loss = float("inf")
        self.best_state = None
        self.best_epoch = -1

    def _run_epoch(self, view):
        model = self.lightning_module
        model.train(view == "train")
        total_loss, correct, n = 0.0, 0, 0
        for imgs, labels in self.pytorch_loaders[view]:
            target = labels["classification"]
            with torch.set_grad_enabled(view == "train"):
                logits = model(imgs)
                loss = F.cross_entropy(logits, target)
            if view == "train":
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            total_loss += loss.item() * len(target)
            correct += (logits.argmax(1) == target).sum().item()
            n += len(target)
        return total_loss / n, correct / n

    def train(self):
        for epoch in range(self.cfg.trainer.epochs):
            train_loss, train_acc = self._run_epoch("train")
            val_loss, val_acc = self._run_epoch("val")
            mark = ""
            if val_loss < self.best_val_loss:
                self.best_val_loss, self.best_epoch = val_loss, epoch
                self.best_state = copy.deepcopy(self.lightning_module.state_dict())
                mark = " (best)"
            logger.info(f"epoch {epoch:2d} train/loss {train_loss:.4f} train/acc {train_acc:.3f} "
                        f"val/loss {val_loss:.4f} val/acc {val_acc:.3f}{mark}")

    def test(self, view="val", weights="best"):
        if weights == "best" and self.best_state is not None:
            self.lightning_module.load_state_dict(self.best_state)
        loss, acc = self._run_epoch(view)
        logger.info(f"test on '{view}' view with the best checkpoint (epoch {self.best_epoch}): "
                    f"loss {loss:.4f} accuracy {acc:.3f}")
        return {"test/loss": loss, "test/accuracy": acc}


def get_config():
    ns = SimpleNamespace
    return ns(
        loader=ns(name="LuxonisLoaderTorch", train_view="train", val_view="val", test_view="test",
                  image_source="image", params={"dataset_dir": None}),
        trainer=ns(seed=42, batch_size=32, n_workers=0, skip_last_batch=True, pin_memory=False, epochs=25,
                   optimizer=ns(lr=3e-3),
                   preprocessing=ns(train_image_size=ns(height=16, width=16), color_space="RGB",
                                    keep_aspect_ratio=True)),
    )


if __name__ == "__main__":
    t0 = time.time()
    model = LuxonisModel(get_config())
    model.train()
    model.test(view="test")
    logger.info(f"done in {time.time() - t0:.1f}s")
