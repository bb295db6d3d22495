# Source: wangyuxinwhy/uniem, uniem/model.py (LastMeanEmbedder, EmbedderForPairInBatchNegTrain), uniem/criteria.py, uniem/data.py (PairCollator), uniem/trainer.py, commit 9e9aaee30737a18bcc52314f75c37c2071eebe45
# Report: https://github.com/wangyuxinwhy/uniem/pull/23
# uniem fine-tuning of a sentence embedder with in-batch-negative softmax contrastive loss
# on (text, text_pos) pairs: the collator pads each side with padding=True and returns only
# input_ids, the embedder rebuilds the mask from pad_token_id and mean-pools the last hidden
# state. The pretrained checkpoint is replaced by a randomly initialised 2-layer BertModel,
# the tokenizer by a whitespace vocabulary over synthetic "sentences", accelerate and
# tqdm by a plain loop.
import random
from dataclasses import dataclass
from typing import ClassVar

import torch
from transformers import BertConfig, BertModel


class PoolingStrategy:
    last_mean = 'last_mean'


def creat_mask_from_input_ids(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    return input_ids != pad_token_id


def mean_pooling(hidden_state: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    if mask is None:
        return torch.mean(hidden_state, dim=1)
    mask = mask.float()
    return torch.sum(hidden_state * mask.unsqueeze(-1), dim=1) / torch.sum(mask, dim=-1, keepdim=True)


class Embedder(torch.nn.Module):
    pooling_strategy: ClassVar[str]

    def __init__(self, encoder, pad_token_id: int | None = None):
        super().__init__()
        self.encoder = encoder
        if pad_token_id is None:
            if encoder.config.pad_token_id is not None:
                self.pad_token_id = encoder.config.pad_token_id
            else:
                self.pad_token_id = 0
        else:
            self.pad_token_id = pad_token_id

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError


class LastMeanEmbedder(Embedder):
    pooling_strategy: ClassVar[str] = PoolingStrategy.last_mean

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is None:
            mask = creat_mask_from_input_ids(input_ids, self.pad_token_id)
        embeddings = self.encoder(input_ids).last_hidden_state
        embeddings = mean_pooling(embeddings, mask)
        return embeddings


class PairInBatchNegSoftmaxContrastLoss(torch.nn.Module):
    def __init__(self, temperature: float = 0.05):
        super().__init__()
        self.temperature = temperature
        self._cross_entropy_loss = torch.nn.CrossEntropyLoss()

    def forward(self, text_embeddings: torch.Tensor, text_pos_embeddings: torch.Tensor) -> torch.Tensor:
        sim_matrix = torch.cosine_similarity(
            text_embeddings.unsqueeze(1),
            text_pos_embeddings.unsqueeze(0),
            dim=-1,
        )
        sim_matrix = sim_matrix / self.temperature
        labels = torch.arange(sim_matrix.size(0), device=text_embeddings.device, dtype=torch.long)
        loss = self._cross_entropy_loss(sim_matrix, labels)
        return loss


class EmbedderForPairInBatchNegTrain(torch.nn.Module):
    def __init__(self, pretrained_model, temperature: float | None = None):
        super().__init__()
        self.embedder = LastMeanEmbedder(pretrained_model)
        temperature = temperature or 0.05
        self.criterion = PairInBatchNegSoftmaxContrastLoss(temperature)

    def forward(self, text_ids: torch.Tensor, text_pos_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        text_embeddings = self.embedder(text_ids)
        text_pos_embeddings = self.embedder(text_pos_ids)
        loss = self.criterion(text_embeddings, text_pos_embeddings)
        return {'loss': loss}


@dataclass
class PairRecord:
    text: str
    text_pos: str


class WhitespaceTokenizer:
    pad_token_id = 0

    def __init__(self, vocab_size: int):
        self.vocab = {f'w{i}': i for i in range(1, vocab_size)}
        self.model_max_length = 32

    def __call__(self, texts, padding=True, max_length=None, truncation=True, return_tensors='pt'):
        ids = [[self.vocab[w] for w in t.split()][:max_length] for t in texts]
        width = max(len(x) for x in ids)
        return {'input_ids': torch.tensor([x + [self.pad_token_id] * (width - len(x)) for x in ids])}


class PairCollator:
    def __init__(self, tokenizer, max_length: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length or tokenizer.model_max_length

    def __call__(self, records: list[PairRecord]) -> dict[str, torch.Tensor]:
        texts = [record.text for record in records]
        texts_pos = [record.text_pos for record in records]
        text_ids = self.tokenizer(texts, padding=True, max_length=self.max_length, truncation=True,
                                  return_tensors='pt')['input_ids']
        text_pos_ids = self.tokenizer(texts_pos, padding=True, max_length=self.max_length, truncation=True,
                                      return_tensors='pt')['input_ids']
        return {'text_ids': text_ids, 'text_pos_ids': text_pos_ids}


def make_pairs(n, vocab_size, rng):
    records = []
    for _ in range(n):
        words = [f'w{rng.randrange(1, vocab_size)}' for _ in range(rng.randint(3, 24))]
        kept = [w for w in words if rng.random() > 0.5] or words[:1]
        records.append(PairRecord(' '.join(words), ' '.join(kept)))
    return records


@torch.no_grad()
def evaluate(embedder, records, collator):
    embedder.eval()
    batch = collator(records)
    q = embedder(batch['text_ids'])
    p = embedder(batch['text_pos_ids'])
    sims = torch.cosine_similarity(q.unsqueeze(1), p.unsqueeze(0), dim=-1)
    acc = (sims.argmax(dim=1) == torch.arange(len(records))).float().mean().item()
    alone = torch.cat([embedder(collator([r])['text_ids']) for r in records[:16]])
    drift = (1 - torch.cosine_similarity(alone, q[:16], dim=-1)).max().item()
    embedder.train()
    return acc, drift


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    vocab_size = 40
    tokenizer = WhitespaceTokenizer(vocab_size)
    config = BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=64, pad_token_id=0,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = EmbedderForPairInBatchNegTrain(BertModel(config))
    collator = PairCollator(tokenizer)
    train_records = make_pairs(512, vocab_size, rng)
    val_records = make_pairs(256, vocab_size, rng)
    train_dataloader = torch.utils.data.DataLoader(train_records, batch_size=32, shuffle=True, collate_fn=collator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    for current_epoch in range(1, 6):
        model.train()
        total = 0.0
        for batch_index, batch in enumerate(train_dataloader):
            optimizer.zero_grad()
            batch_output = model(**batch)
            loss = batch_output['loss']
            loss.backward()
            optimizer.step()
            total += loss.item()
        acc, drift = evaluate(model.embedder, val_records, collator)
        print(f'epoch {current_epoch} train loss {total / (batch_index + 1):.4f} '
              f'val top-1 retrieval {acc:.3f} max cosine change of an embedding alone vs in a padded batch {drift:.2e}')


if __name__ == '__main__':
    main()
