# Source: facebookresearch/pytext, pytext/task/new_task.py (_NewTask.train), pytext/data/data.py (shard, Data.batches), pytext/trainers/trainer.py (Trainer.train, run_epoch, save_checkpoint), commit 2de7ca59db0e80e16884bf24410b790163cf3d5f
# Report: https://github.com/facebookresearch/pytext/pull/508
# Run: torchrun --nproc-per-node 2 train.py
# PyText's distributed training path: each worker reads its shard of the training rows, trains a
# DDP-wrapped document classifier, evaluates every epoch, and only the rank-0 worker prints the
# metrics and keeps the best model. The tensorizers/batcher are replaced by a bag-of-tokens
# tensorizer and a fixed-size batcher, the model by an embedding-bag classifier, the TSV data
# sources by synthetic token documents of 3 classes.
import itertools

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


class Stage:
    TRAIN, EVAL, TEST = "Training", "Evaluation", "Test"


def shard(rows, rank, num_workers):
    """Only return every num_workers example for distributed training."""
    queue = []
    for row in rows:
        queue.append(row)
        # might discard remainder %num_workers rows because distributed
        # training needs to be in sync
        if len(queue) == num_workers:
            yield queue[rank]
            queue = []


class DataSource:
    def __init__(self, seed, vocab=60, n_train=600, n_eval=301, n_test=300):
        g = torch.Generator().manual_seed(seed)
        self.topics = [torch.randperm(vocab, generator=g)[:12] for _ in range(3)]
        self.train = self._rows(n_train, g)
        self.eval = self._rows(n_eval, g)
        self.test = self._rows(n_test, g)

    def _rows(self, n, g):
        rows = []
        for _ in range(n):
            label = int(torch.randint(0, 3, (1,), generator=g))
            k = int(torch.randint(3, 9, (1,), generator=g))
            topical = self.topics[label][torch.randint(0, 12, (k // 3 + 1,), generator=g)]
            noise = torch.randint(0, 60, (k,), generator=g)
            rows.append({"tokens": torch.cat([topical, noise]).tolist(), "label": label})
        return rows


class Data:
    def __init__(self, data_source, batch_size=25):
        self.data_source, self.batch_size = data_source, batch_size

    def batches(self, stage, rank=0, world_size=1):
        rows = shard(
            {
                Stage.TRAIN: self.data_source.train,
                Stage.TEST: self.data_source.test,
                Stage.EVAL: self.data_source.eval,
            }[stage],
            rank,
            world_size,
        )
        rows = list(rows)
        for i in range(0, len(rows), self.batch_size):
            chunk = rows[i:i + self.batch_size]
            tokens = [torch.tensor(r["tokens"]) for r in chunk]
            offsets = torch.tensor([0] + [len(t) for t in tokens[:-1]]).cumsum(0)
            yield (torch.cat(tokens), offsets), torch.tensor([r["label"] for r in chunk]), {}


class DocModel(nn.Module):
    def __init__(self, vocab=60, dim=32, num_classes=3):
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.decoder = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, num_classes))

    def forward(self, tokens, offsets):
        return self.decoder(self.embedding(tokens, offsets))


class ClassificationMetricReporter:
    def __init__(self):
        self._reset()

    def _reset(self):
        self.correct, self.total, self.loss = 0, 0, 0.0

    def add_batch_stats(self, preds, targets, loss):
        self.correct += int((preds == targets).sum())
        self.total += len(targets)
        self.loss += loss * len(targets)

    def report_metric(self, stage, epoch, print_to_channels=True):
        metric = {"accuracy": self.correct / self.total, "loss": self.loss / self.total, "n": self.total}
        if print_to_channels:
            print(f"  {stage} epoch {epoch}: accuracy {metric['accuracy']:.4f} loss {metric['loss']:.4f} "
                  f"over {metric['n']} examples", flush=True)
        self._reset()
        return metric


class Trainer:
    def __init__(self, epochs=6):
        self.epochs = epochs

    def train(self, training_data, eval_data, model, metric_reporter, rank=0):
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        best_model_metric, best_model_state = None, None
        for epoch in range(1, self.epochs + 1):
            model.train()
            self.run_epoch(Stage.TRAIN, epoch, rank, training_data(), model, optimizer, metric_reporter)
            model.eval()
            with torch.no_grad():
                eval_metric = self.run_epoch(Stage.EVAL, epoch, rank, eval_data(), model, None, metric_reporter)
            # Did we train a better model?
            if best_model_metric is None or eval_metric["accuracy"] > best_model_metric["accuracy"]:
                best_model_metric = eval_metric
                # Only one worker should save checkpoints
                if rank == 0:
                    best_model_state = {k: v.clone() for k, v in model.state_dict().items()}
                    print(f"  Found a better model! (epoch {epoch})", flush=True)
        if rank == 0 and best_model_state is not None:
            model.load_state_dict(best_model_state)
        return model, best_model_metric

    def run_epoch(self, stage, epoch, rank, data, model, optimizer, metric_reporter):
        for batch_id, (inputs, targets, context) in enumerate(data):
            logits = model(*inputs)
            loss = F.cross_entropy(logits, targets)
            if optimizer is not None:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            metric_reporter.add_batch_stats(logits.argmax(1), targets, loss.item())
        return metric_reporter.report_metric(stage, epoch, print_to_channels=(rank == 0))


class NewTask:
    def __init__(self, data, model, trainer, metric_reporter):
        self.data, self.model, self.trainer, self.metric_reporter = data, model, trainer, metric_reporter

    def train(self, rank=0, world_size=1):
        return self.trainer.train(
            lambda: self.data.batches(Stage.TRAIN, rank, world_size),
            lambda: self.data.batches(Stage.EVAL, rank, world_size),
            self.model,
            self.metric_reporter,
            rank=rank,
        )


def main():
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    data = Data(DataSource(seed=0))
    model = DistributedDataParallel(DocModel())
    task = NewTask(data, model, Trainer(), ClassificationMetricReporter())
    model, best_metric = task.train(rank, world_size)
    if rank == 0:
        print(f"best eval accuracy {best_metric['accuracy']:.4f} over {best_metric['n']} of "
              f"{len(data.data_source.eval)} eval examples")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
