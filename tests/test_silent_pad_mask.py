"""A mask-taking sequence model called on right-padded ids without its attention_mask
(`silent.pad_attended`), written as users write it: an embedder that builds the pad mask for
its pooling and forgets to pass it to the encoder. The look-alikes stay quiet: the mask
passed, batches with no padding, a causal model (real tokens never see later pads)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import marked
from torchtriage import Severity

HERE = str(Path(__file__))
PAD = 0


line_of = marked(Path(HERE))


class Encoder(nn.Module):
    """A tiny transformer encoder with the usual `forward(input_ids, attention_mask=None)`."""

    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 16, padding_idx=PAD)
        self.pos = nn.Parameter(torch.randn(32, 16) * 0.1)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        self.layers = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.causal = causal

    def forward(self, input_ids, attention_mask=None):
        x = self.embed(input_ids) + self.pos[: input_ids.shape[1]]
        pad = None if attention_mask is None else attention_mask == 0
        causal = nn.Transformer.generate_square_subsequent_mask(input_ids.shape[1]) if self.causal else None
        return self.layers(x, mask=causal, src_key_padding_mask=pad, is_causal=self.causal)


class MeanEmbedder(nn.Module):
    def __init__(self, pass_mask: bool, causal: bool = False) -> None:
        super().__init__()
        self.encoder = Encoder(causal)
        self.pass_mask = pass_mask

    def forward(self, input_ids):
        mask = input_ids != PAD
        extra = {"attention_mask": mask.long()} if self.pass_mask else {}
        hidden = self.encoder(input_ids, **extra)  # encoder call
        m = mask.unsqueeze(-1).float()
        return (hidden * m).sum(1) / m.sum(1)


def batch(g: torch.Generator, padded: bool) -> torch.Tensor:
    lengths = torch.randint(3, 12, (8,), generator=g) if padded else torch.full((8,), 11)
    ids = torch.full((8, int(lengths.max())), PAD)
    for i, n in enumerate(lengths.tolist()):
        ids[i, :n] = torch.randint(1, 20, (n,), generator=g)
    return ids


def train(pass_mask: bool, *, padded: bool = True, causal: bool = False):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = MeanEmbedder(pass_mask, causal)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    losses = []
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            ids = batch(g, padded)
            q = model(ids)
            p = model(ids.flip(0))
            loss = F.cross_entropy(q @ p.T, torch.arange(8).flip(0))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return s.report, losses


def plain_losses(pass_mask: bool) -> list[float]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = MeanEmbedder(pass_mask)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    losses = []
    for _ in range(4):
        ids = batch(g, True)
        loss = F.cross_entropy(model(ids) @ model(ids.flip(0)).T, torch.arange(8).flip(0))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def pads(report):
    return [f for f in report if f.code == "silent.pad_attended"]


def test_encoder_called_without_its_mask_is_named_at_the_call():
    report, _ = train(pass_mask=False)
    (f,) = pads(report)
    assert f.severity is Severity.WARNING
    assert f.line == line_of("encoder call")
    assert f.module == "encoder"
    ev = f.evidence
    assert ev["module"] == "encoder (Encoder)" and ev["pad_token_id"] == PAD
    assert ev["input_shape"][0] == 8 and 0 < ev["padded_rows"] <= 8
    assert ev["row_real_tokens"] < ev["row_padded_length"] == ev["input_shape"][1]
    assert ev["max_abs_output_change"] > 1e-3
    assert f.message == ("encoder (Encoder) was called on right-padded ids (pad 0) without an attention_mask: "
                         "its outputs at the real tokens depend on the padding")


def test_the_check_leaves_the_numbers_alone():
    # the replays run in eval mode with the RNG restored: dropout draws the same masks
    assert train(pass_mask=False)[1] == plain_losses(False)


@pytest.mark.parametrize("case", ["mask_passed", "no_padding", "causal"])
def test_look_alikes_are_quiet(case):
    report, _ = train(pass_mask=case == "mask_passed", padded=case != "no_padding", causal=case == "causal")
    assert pads(report) == []


def hf_embedder(kind: str, pass_mask: bool):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "bert":
        config = transformers.BertConfig(vocab_size=20, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32, max_position_embeddings=32, pad_token_id=PAD)
        encoder = transformers.BertModel(config)
    else:  # a causal decoder: real tokens never attend to the pads after them
        config = transformers.GPT2Config(vocab_size=20, n_embd=16, n_layer=1, n_head=2, n_positions=32,
                                         pad_token_id=PAD)
        encoder = transformers.GPT2Model(config)
    g = torch.Generator().manual_seed(1)
    opt = torch.optim.Adam(encoder.parameters(), 1e-3)
    with torchtriage.watch(encoder, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            ids = batch(g, True)
            extra = {"attention_mask": (ids != PAD).long()} if pass_mask else {}
            hidden = encoder(ids, **extra).last_hidden_state  # hf call
            loss = hidden[:, 0].pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


def test_hf_bert_without_its_mask_is_named():
    (f,) = pads(hf_embedder("bert", pass_mask=False))
    assert (f.line, f.severity) == (line_of("hf call"), Severity.WARNING)
    assert f.message.startswith("the model (BertModel) was called on right-padded ids (pad 0) without")
    assert f.evidence["module"] == "BertModel" and f.evidence["max_abs_output_change"] > 1e-3


@pytest.mark.parametrize(("kind", "pass_mask"), [("bert", True), ("gpt2", False)])
def test_hf_look_alikes_are_quiet(kind, pass_mask):
    assert pads(hf_embedder(kind, pass_mask)) == []
