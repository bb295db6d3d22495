# Source: JetBrains-Research/code2seq, code2seq/model/code2class.py, code2seq/model/modules/path_encoder.py, commit be05dafd3f80b87ad29e58bf648d04aa9a6b441d
# Report: https://github.com/JetBrains-Research/code2seq/pull/112
# code2class: path contexts (from token, AST path, to token) encoded by PathEncoder, attention-pooled per
# snippet by the commode_utils Classifier, trained with cross entropy; torchmetrics Accuracy per holdout.
# The PyTorch-Lightning 1.4 loop (training_step / validation_step / *_epoch_end) is written out in fit();
# the POJ-104 data is replaced by synthetic snippets whose tokens depend on the label.
from dataclasses import dataclass
from typing import Dict, List

import numpy as np
import torch
from torch import nn
from torchmetrics import Accuracy, Metric, MetricCollection


@dataclass
class BatchedLabeledPathContext:
    labels: torch.Tensor  # [1; batch size]
    from_token: torch.Tensor  # [max token parts; n contexts]
    path_nodes: torch.Tensor  # [path length; n contexts]
    to_token: torch.Tensor  # [max token parts; n contexts]
    contexts_per_label: List[int]


class PathEncoder(nn.Module):
    def __init__(self, config: Dict, n_tokens: int, token_pad_id: int, n_nodes: int, node_pad_id: int):
        super().__init__()
        self.node_pad_id = node_pad_id
        self.num_directions = 2 if config["use_bi_rnn"] else 1

        self.token_embedding = nn.Embedding(n_tokens, config["embedding_size"], padding_idx=token_pad_id)
        self.node_embedding = nn.Embedding(n_nodes, config["embedding_size"], padding_idx=node_pad_id)

        self.dropout_rnn = nn.Dropout(config["encoder_dropout"])
        self.path_lstm = nn.LSTM(
            config["embedding_size"], config["encoder_rnn_size"], num_layers=1, bidirectional=config["use_bi_rnn"]
        )

        concat_size = config["embedding_size"] * 2 + config["encoder_rnn_size"] * self.num_directions
        self.embedding_dropout = nn.Dropout(config["encoder_dropout"])
        self.linear = nn.Linear(concat_size, config["classifier_size"], bias=False)
        self.norm = nn.LayerNorm(config["classifier_size"])

    def _token_embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.token_embedding(tokens).sum(0)

    def _path_nodes_embedding(self, path_nodes: torch.Tensor) -> torch.Tensor:
        # [max path length; n contexts; embedding size]
        path_nodes_embeddings = self.node_embedding(path_nodes)

        with torch.no_grad():
            is_contain_pad_id, first_pad_pos = torch.max(path_nodes == self.node_pad_id, dim=0)
            first_pad_pos[~is_contain_pad_id] = path_nodes.shape[0]  # if no pad token use len+1 position
            sorted_path_lengths, sort_indices = torch.sort(first_pad_pos, descending=True)
            _, reverse_sort_indices = torch.sort(sort_indices)
            sorted_path_lengths = sorted_path_lengths.to(torch.device("cpu"))
        path_nodes_embeddings = path_nodes_embeddings[:, sort_indices]

        packed_path_nodes = nn.utils.rnn.pack_padded_sequence(path_nodes_embeddings, sorted_path_lengths)

        # [num layers * num directions; total paths; rnn size]
        _, (h_t, _) = self.path_lstm(packed_path_nodes)
        # [total_paths; rnn size * num directions]
        encoded_paths = h_t[-self.num_directions:].transpose(0, 1).reshape(h_t.shape[1], -1)
        encoded_paths = self.dropout_rnn(encoded_paths)

        encoded_paths = encoded_paths[reverse_sort_indices]
        return encoded_paths

    def forward(self, from_token: torch.Tensor, path_nodes: torch.Tensor, to_token: torch.Tensor) -> torch.Tensor:
        encoded_from_tokens = self._token_embedding(from_token)
        encoded_to_tokens = self._token_embedding(to_token)
        encoded_paths = self._path_nodes_embedding(path_nodes)
        concat = torch.cat([encoded_from_tokens, encoded_paths, encoded_to_tokens], dim=-1)
        concat = self.embedding_dropout(concat)
        return torch.tanh(self.norm(self.linear(concat)))


class Classifier(nn.Module):
    _negative_value = -1e9

    def __init__(self, config: Dict, output_size: int):
        super().__init__()
        size = config["classifier_size"]
        self.attention = nn.Linear(size, 1, bias=False)
        layers: List[nn.Module] = []
        for _ in range(config["classifier_layers"] - 1):
            layers += [nn.Linear(size, size), nn.ReLU()]
        self.hidden_layers = nn.Sequential(*layers)
        self.classification_layer = nn.Linear(size, output_size)

    def forward(self, encoded_contexts: torch.Tensor, contexts_per_label: List[int]) -> torch.Tensor:
        segments = torch.split(encoded_contexts, contexts_per_label)
        batched = nn.utils.rnn.pad_sequence(segments, batch_first=True)
        mask = torch.zeros(batched.shape[:2])
        for i, n in enumerate(contexts_per_label):
            mask[i, n:] = self._negative_value
        attention = self.attention(batched).squeeze(-1) + mask
        weights = torch.softmax(attention, dim=1).unsqueeze(-1)
        context_vector = (batched * weights).sum(1)
        return self.classification_layer(self.hidden_layers(context_vector))


class Code2Class(nn.Module):
    def __init__(self, model_config: Dict, optimizer_config: Dict, n_tokens: int, n_nodes: int, n_labels: int):
        super().__init__()
        self._optim_config = optimizer_config

        self._encoder = PathEncoder(model_config, n_tokens, 0, n_nodes, 0)

        self._classifier = Classifier(model_config, n_labels)

        metrics: Dict[str, Metric] = {
            f"{holdout}_acc": Accuracy(task="multiclass", num_classes=n_labels) for holdout in ["train", "val", "test"]
        }
        self.__metrics = MetricCollection(metrics)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), self._optim_config["lr"], momentum=0.95,
                                    nesterov=self._optim_config["nesterov"],
                                    weight_decay=self._optim_config["weight_decay"])
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda=lambda epoch: self._optim_config["decay_gamma"] ** epoch)
        return [optimizer], [scheduler]

    def forward(self, from_token, path_nodes, to_token, contexts_per_label) -> torch.Tensor:
        encoded_paths = self._encoder(from_token, path_nodes, to_token)
        output_logits = self._classifier(encoded_paths, contexts_per_label)
        return output_logits

    # ========== MODEL STEP ==========

    def _shared_step(self, batch: BatchedLabeledPathContext, step: str) -> Dict:
        # [batch size; num_classes]
        logits = self(batch.from_token, batch.path_nodes, batch.to_token, batch.contexts_per_label)
        labels = batch.labels.squeeze(0)
        loss = torch.nn.functional.cross_entropy(logits, labels)

        with torch.no_grad():
            predictions = logits.argmax(-1)
            accuracy = self.__metrics[f"{step}_acc"](predictions, labels)

        return {f"{step}/loss": loss, f"{step}/accuracy": accuracy}

    def training_step(self, batch: BatchedLabeledPathContext, batch_idx: int) -> Dict:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: BatchedLabeledPathContext, batch_idx: int) -> Dict:
        return self._shared_step(batch, "val")

    # ========== ON EPOCH END ==========

    def _shared_epoch_end(self, outputs: List[Dict], step: str) -> Dict:
        with torch.no_grad():
            mean_loss = torch.stack([out[f"{step}/loss"] for out in outputs]).mean()
            accuracy = self.__metrics[f"{step}_acc"].compute()
            log = {f"{step}/loss": mean_loss.item(), f"{step}/accuracy": accuracy.item()}
        return log

    def training_epoch_end(self, outputs: List[Dict]) -> Dict:
        return self._shared_epoch_end(outputs, "train")

    def validation_epoch_end(self, outputs: List[Dict]) -> Dict:
        return self._shared_epoch_end(outputs, "val")


def make_snippets(n, n_labels, rng):
    """Each snippet: 8-16 path contexts; half of its tokens come from a label-specific range."""
    snippets = []
    for _ in range(n):
        label = rng.randint(n_labels)
        n_ctx = rng.randint(8, 17)
        own = 1 + 8 * label + rng.randint(0, 8, size=(2, n_ctx))
        noise = rng.randint(1, 1 + 8 * n_labels, size=(2, n_ctx))
        take_own = rng.uniform(size=(2, n_ctx)) < 0.35
        tokens = np.where(take_own, own, noise)
        lengths = rng.randint(2, 7, size=n_ctx)
        paths = np.zeros((6, n_ctx), dtype=np.int64)
        for j, ln in enumerate(lengths):
            paths[:ln, j] = rng.randint(1, 20, size=ln)
        snippets.append((label, tokens[0], paths, tokens[1]))
    return snippets


def collate(snippets) -> BatchedLabeledPathContext:
    return BatchedLabeledPathContext(
        labels=torch.tensor([[s[0] for s in snippets]]),
        from_token=torch.from_numpy(np.concatenate([s[1] for s in snippets]))[None],
        path_nodes=torch.from_numpy(np.concatenate([s[2] for s in snippets], axis=1)),
        to_token=torch.from_numpy(np.concatenate([s[3] for s in snippets]))[None],
        contexts_per_label=[len(s[1]) for s in snippets],
    )


def fit(model: Code2Class, train_data, val_data, n_epochs: int, batch_size: int, clip_norm: float, rng):
    [optimizer], [scheduler] = model.configure_optimizers()
    for epoch in range(n_epochs):
        model.train()
        order = rng.permutation(len(train_data))
        outputs = []
        for batch_idx, start in enumerate(range(0, len(order), batch_size)):
            batch = collate([train_data[i] for i in order[start:start + batch_size]])
            result = model.training_step(batch, batch_idx)
            optimizer.zero_grad()
            result["train/loss"].backward()
            nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()
            outputs.append({k: v.detach() for k, v in result.items()})
        train_log = model.training_epoch_end(outputs)
        scheduler.step()

        model.eval()
        outputs = []
        with torch.no_grad():
            for batch_idx, start in enumerate(range(0, len(val_data), batch_size)):
                batch = collate(val_data[start:start + batch_size])
                outputs.append(model.validation_step(batch, batch_idx))
        val_log = model.validation_epoch_end(outputs)
        print(f"epoch {epoch}: train/loss {train_log['train/loss']:.4f} train/accuracy {train_log['train/accuracy']:.4f} "
              f"val/loss {val_log['val/loss']:.4f} val/accuracy {val_log['val/accuracy']:.4f}")


def main():
    torch.manual_seed(7)
    rng = np.random.RandomState(7)
    n_labels = 6
    model_config = {"embedding_size": 32, "encoder_dropout": 0.25, "encoder_rnn_size": 32, "use_bi_rnn": True,
                    "classifier_layers": 2, "classifier_size": 32}
    optimizer_config = {"lr": 0.01, "nesterov": True, "weight_decay": 0, "decay_gamma": 0.95}
    train_data = make_snippets(640, n_labels, rng)
    val_data = make_snippets(192, n_labels, rng)
    model = Code2Class(model_config, optimizer_config, n_tokens=1 + 8 * n_labels, n_nodes=20, n_labels=n_labels)
    fit(model, train_data, val_data, n_epochs=8, batch_size=32, clip_norm=5, rng=rng)


if __name__ == "__main__":
    main()
