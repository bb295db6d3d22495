# Source: allenai/allennlp, allennlp/training/learning_rate_schedulers/slanted_triangular.py (SlantedTriangular), allennlp/training/scheduler.py (Scheduler), allennlp/training/optimizers.py (make_parameter_groups), allennlp/training/trainer.py (GradientDescentTrainer._train_epoch), commit e46a578ea83b99223174c55f15cd9a935bc11cdf
# Report: https://github.com/allenai/allennlp/pull/4443
# ULMFiT-style fine-tuning with AllenNLP's slanted triangular schedule: discriminative
# learning rates per parameter group and gradual unfreezing (one more layer group per
# epoch, top first). The trainer loop keeps GradientDescentTrainer's order
# (zero_grad, backward, step_batch, optimizer.step, scheduler.step at the end of the
# epoch); the pretrained text encoder is a small embedding + 3-layer MLP encoder on
# synthetic token sequences.
import logging
import re
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, optimizer: torch.optim.Optimizer, param_group_field: str, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        self.param_group_field = param_group_field
        self._initial_param_group_field = f"initial_{param_group_field}"
        if last_epoch == -1:
            for i, group in enumerate(self.optimizer.param_groups):
                if param_group_field not in group:
                    raise KeyError(f"{param_group_field} missing from param_groups[{i}]")
                group.setdefault(self._initial_param_group_field, group[param_group_field])
        self.base_values = [
            group[self._initial_param_group_field] for group in self.optimizer.param_groups
        ]
        self.last_epoch = last_epoch

    def get_values(self):
        raise NotImplementedError

    def step(self, metric: float = None) -> None:
        self.last_epoch += 1
        self.metric = metric
        for param_group, value in zip(self.optimizer.param_groups, self.get_values()):
            param_group[self.param_group_field] = value

    def step_batch(self, batch_num_total: int = None) -> None:
        return


class LearningRateScheduler(Scheduler):
    def __init__(self, optimizer: torch.optim.Optimizer, last_epoch: int = -1) -> None:
        super().__init__(optimizer, "lr", last_epoch)


class SlantedTriangular(LearningRateScheduler):
    """
    Implements the Slanted Triangular Learning Rate schedule with optional gradual
    unfreezing. If we gradually unfreeze, then in the first epoch of training, only the top
    layer is trained; in the second epoch, the top two layers are trained, etc.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        num_epochs: int,
        num_steps_per_epoch: Optional[int] = None,
        cut_frac: float = 0.1,
        ratio: int = 32,
        last_epoch: int = -1,
        gradual_unfreezing: bool = False,
        discriminative_fine_tuning: bool = False,
        decay_factor: float = 0.38,
    ) -> None:
        self.num_epochs = num_epochs
        self.num_steps_per_epoch = num_steps_per_epoch
        self.cut_frac = cut_frac
        self.ratio = ratio
        self.gradual_unfreezing = gradual_unfreezing
        self.freezing_current = self.gradual_unfreezing
        self.is_first_epoch = True
        # track the actual number of steps for each epoch
        self.batch_num_total_epoch_end: List[int] = []
        if self.gradual_unfreezing:
            assert not optimizer.param_groups[-1]["params"], "The default group should be empty."
        if self.gradual_unfreezing or discriminative_fine_tuning:
            assert len(optimizer.param_groups) > 2, (
                "There should be at least 3 param_groups (2 + empty default group)"
                " for gradual unfreezing / discriminative fine-tuning to make sense."
            )
        super().__init__(optimizer, last_epoch)
        self.step()
        if discriminative_fine_tuning:
            # skip the last param_group if it is has no parameters
            exponent = 0
            for i in range(len(self.base_values) - 1, -1, -1):
                param_group = optimizer.param_groups[i]
                if param_group["params"]:
                    param_group["lr"] = self.base_values[i] * decay_factor ** exponent
                    self.base_values[i] = param_group["lr"]
                    exponent += 1
        # set up for the first batch
        self.last_batch_num_total = -1
        self.step_batch(0)

    def step(self, metric: float = None) -> None:
        self.last_epoch += 1
        if len(self.batch_num_total_epoch_end) == 0:
            self.batch_num_total_epoch_end.append(0)
        else:
            self.batch_num_total_epoch_end.append(self.last_batch_num_total)

        if self.gradual_unfreezing:
            # the method is called once when initialising before the
            # first epoch (epoch -1) and then always at the end of each
            # epoch; so the first time, with epoch id -1, we want to set
            # up for epoch #1; the second time, with epoch id 0,
            # we want to set up for epoch #2, etc.
            if self.is_first_epoch:
                num_layers_to_unfreeze = 1
                self.is_first_epoch = False
            else:
                num_layers_to_unfreeze = self.last_epoch + 2
            if num_layers_to_unfreeze >= len(self.optimizer.param_groups) - 1:
                logger.info("Gradual unfreezing finished. Training all layers.")
                self.freezing_current = False
            else:
                logger.info(
                    f"Gradual unfreezing. Training only the top {num_layers_to_unfreeze} layers."
                )
            for i, param_group in enumerate(reversed(self.optimizer.param_groups)):
                for param in param_group["params"]:
                    # i = 0 is the default group; we care about i > 0
                    param.requires_grad = bool(i <= num_layers_to_unfreeze)

    def step_batch(self, batch_num_total: int = None):
        if batch_num_total is None:
            batch_num_total = self.last_batch_num_total + 1
        self.last_batch_num_total = batch_num_total
        for param_group, learning_rate in zip(self.optimizer.param_groups, self.get_values()):
            param_group["lr"] = learning_rate

    def get_values(self):
        # get the actual number of batches per epoch seen in training
        if len(self.batch_num_total_epoch_end) > 1:
            # have finished an epoch
            actual_num_steps_per_epoch = int(
                self.batch_num_total_epoch_end[-1] / (len(self.batch_num_total_epoch_end) - 1)
            )
        else:
            actual_num_steps_per_epoch = max(
                self.num_steps_per_epoch or 1, self.last_batch_num_total
            )

        if self.freezing_current:
            # if we still freeze, we restrict the schedule to the current epoch
            num_steps = actual_num_steps_per_epoch
            step = min(self.last_batch_num_total - self.batch_num_total_epoch_end[-1], num_steps)
        else:
            # otherwise we use the schedule for the rest of training
            if not self.gradual_unfreezing:
                frozen_steps = 0
            else:
                num_frozen_epochs = len(self.optimizer.param_groups) - 2
                frozen_steps = self.batch_num_total_epoch_end[num_frozen_epochs]
            num_steps = self.num_epochs * actual_num_steps_per_epoch - frozen_steps
            step = min(self.last_batch_num_total - frozen_steps, num_steps)
        cut = int(num_steps * self.cut_frac)
        prop = step / cut if step < cut else 1 - (step - cut) / (num_steps - cut)
        return [lr * (1 + prop * (self.ratio - 1)) / self.ratio for lr in self.base_values]


def make_parameter_groups(
    model_parameters: List[Tuple[str, torch.nn.Parameter]],
    groups: List[Tuple[List[str], Dict[str, Any]]] = None,
):
    if groups:
        parameter_groups = [{"params": []} for _ in range(len(groups) + 1)]
        for k in range(len(groups)):
            parameter_groups[k].update(groups[k][1])
        for name, param in model_parameters:
            group_index = None
            for k, group_regexes in enumerate(groups):
                for regex in group_regexes[0]:
                    if re.search(regex, name):
                        group_index = k
            if group_index is not None:
                parameter_groups[group_index]["params"].append(param)
            else:
                parameter_groups[-1]["params"].append(param)
    else:
        parameter_groups = [param for name, param in model_parameters]
    return parameter_groups


class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(dim, dim) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
        return x


class TextClassifier(nn.Module):
    def __init__(self, vocab=50, dim=32, num_labels=2):
        super().__init__()
        self.embedder = nn.Embedding(vocab, dim)
        self.encoder = Encoder(dim)
        self.classifier = nn.Linear(dim, num_labels)

    def forward(self, tokens, label):
        h = self.encoder(self.embedder(tokens).mean(1))
        logits = self.classifier(h)
        return {"loss": F.cross_entropy(logits, label), "logits": logits}


def make_batches(g, n_batches, batch_size=32, vocab=50, length=12):
    batches = []
    for _ in range(n_batches):
        tokens = torch.randint(0, vocab, (batch_size, length), generator=g)
        label = ((tokens < 10).sum(1) > (tokens >= 40).sum(1)).long()
        batches.append({"tokens": tokens, "label": label})
    return batches


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = TextClassifier()
    groups = [
        (["embedder"], {}),
        (["encoder.layers.0"], {}),
        (["encoder.layers.1"], {}),
        (["encoder.layers.2"], {}),
        (["classifier"], {}),
    ]
    parameter_groups = make_parameter_groups(list(model.named_parameters()), groups)
    optimizer = torch.optim.Adam(parameter_groups, lr=0.01)
    num_epochs, steps = 3, 20
    scheduler = SlantedTriangular(optimizer, num_epochs=num_epochs, num_steps_per_epoch=steps,
                                  gradual_unfreezing=True, discriminative_fine_tuning=True)
    train = make_batches(g, steps)
    names = ["embedder", "encoder.layers.0", "encoder.layers.1", "encoder.layers.2", "classifier"]
    batch_num_total = 0
    for epoch in range(num_epochs):
        trainable = [n for n, pg in zip(names, optimizer.param_groups) if all(p.requires_grad for p in pg["params"])]
        start = {n: p.detach().clone() for n, p in model.named_parameters()}
        model.train()
        train_loss, correct, lrs = 0.0, 0, []
        for batch in train:
            batch_num_total += 1
            optimizer.zero_grad()
            outputs = model(batch["tokens"], batch["label"])
            loss = outputs["loss"]
            loss.backward()
            train_loss += loss.item()
            correct += (outputs["logits"].argmax(1) == batch["label"]).sum().item()
            scheduler.step_batch(batch_num_total)
            lrs.append(optimizer.param_groups[-2]["lr"])
            optimizer.step()
        moved = [n for n in names if any(not torch.equal(start[k], p) for k, p in model.named_parameters() if k.startswith(n))]
        print(f"epoch {epoch}: trainable groups {len(trainable)} {trainable} | groups that moved {moved} | "
              f"classifier lr max {max(lrs):.2e} | loss {train_loss / len(train):.4f} acc {correct / (32 * len(train)):.3f}")
        scheduler.step(None)


if __name__ == "__main__":
    main()
