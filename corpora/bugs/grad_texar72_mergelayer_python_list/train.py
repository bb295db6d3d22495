# Source: asyml/texar-pytorch, texar/core/layers.py (MergeLayer), commit 0250c97eaaac8dd287feb1e331152cec684b60e1
# Report: https://github.com/asyml/texar-pytorch/issues/72
# Sentence classifier in the style of texar's Conv1DClassifier: word embedding, a MergeLayer of
# parallel Conv1d + max-pool branches (kernel sizes 3/4/5, 'concat' merge), dropout and a
# dense logits layer, trained with Adam. texar's hparams/get_layer machinery is replaced by
# direct module construction; the SST data by synthetic sentences whose label depends on
# which 3-gram patterns occur.
from typing import List, Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_layer(hparams):
    return getattr(nn, hparams["type"])(**hparams.get("kwargs", {}))


class MergeLayer(nn.Module):
    r"""A layer that consists of multiple layers in parallel. Input is fed to
    each of the parallel layers, and the outputs are merged with a
    specified mode.
    """
    def __init__(self, layers: Optional[List[nn.Module]] = None,
                 mode: str = 'concat', dim: int = 2):
        super().__init__()
        self._mode = mode
        self._dim = dim

        self._layers: Optional[List[nn.Module]] = None
        if layers is not None:
            if len(layers) == 0:
                raise ValueError(
                    "'layers' must be either None or a non-empty list.")
            self._layers = []
            for layer in layers:
                if isinstance(layer, nn.Module):
                    self._layers.append(layer)
                else:
                    self._layers.append(get_layer(hparams=layer))

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # type: ignore
        r"""Feed input to every containing layer and merge the outputs.
        """
        if self._layers is None:
            layer_outputs: Union[torch.Tensor, List[torch.Tensor]] = input
        else:
            layer_outputs = []
            for layer in self._layers:
                layer_output = layer(input)
                layer_outputs.append(layer_output)

        if self._mode == 'concat':
            outputs = torch.cat(tensors=layer_outputs, dim=self._dim)
        elif self._mode == 'elemwise_sum':
            outputs = layer_outputs[0]
            for i in range(1, len(layer_outputs)):
                outputs = torch.add(outputs, layer_outputs[i])
        else:
            raise ValueError("Unknown merge mode: '%s'" % self._mode)
        return outputs

    @property
    def layers(self) -> Optional[List[nn.Module]]:
        r"""The list of parallel layers.
        """
        return self._layers


class Conv1DClassifier(nn.Module):
    def __init__(self, vocab_size, emb_dim=32, filters=32, kernel_sizes=(3, 4, 5), num_classes=2, dropout=0.3):
        super().__init__()
        self.embedder = nn.Embedding(vocab_size, emb_dim)
        branches = [nn.Sequential(nn.Conv1d(emb_dim, filters, k), nn.ReLU(), nn.AdaptiveMaxPool1d(1))
                    for k in kernel_sizes]
        self.conv_merge = MergeLayer(branches, mode='concat', dim=1)
        self.dropout = nn.Dropout(dropout)
        self.logits_layer = nn.Linear(filters * len(kernel_sizes), num_classes)

    def forward(self, text_ids):
        x = self.embedder(text_ids).transpose(1, 2)
        x = self.conv_merge(x).squeeze(2)
        return self.logits_layer(self.dropout(x))


def make_sentences(n, g, vocab=200, length=20):
    x = torch.randint(3, vocab, (n, length), generator=g)
    y = torch.randint(0, 2, (n,), generator=g)
    pos = torch.randint(0, length - 3, (n,), generator=g)
    for i in range(n):
        pattern = torch.tensor([1, 2, 1]) if y[i] == 1 else torch.tensor([2, 1, 2])
        x[i, pos[i]:pos[i] + 3] = pattern
    return x, y


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x_train, y_train = make_sentences(2000, g)
    x_test, y_test = make_sentences(1000, g)
    model = Conv1DClassifier(vocab_size=200)
    print(f"trainable parameters: {sum(p.numel() for p in model.parameters())}")
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(6):
        model.train()
        perm = torch.randperm(len(x_train), generator=g)
        for i in range(0, len(x_train), 64):
            idx = perm[i:i + 64]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            optim.zero_grad()
            loss.backward()
            optim.step()
        model.eval()
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        print(f"epoch {epoch} train loss {loss.item():.4f} test accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
