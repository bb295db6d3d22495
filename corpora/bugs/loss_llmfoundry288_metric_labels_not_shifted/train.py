# Source: mosaicml/llm-foundry, llmfoundry/models/hf/hf_causal_lm.py (ComposerHFCausalLM) on composer's HuggingFaceModel, before PR #288
# Report: https://github.com/mosaicml/llm-foundry/pull/288
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "opt": "OPTForCausalLM"}


class LanguageCrossEntropy:
    def __init__(self, ignore_index=-100):
        self.ignore_index = ignore_index
        self.reset()

    def reset(self):
        self.sum_loss, self.total_items = 0.0, 0

    def update(self, output, target):
        logits = output.reshape(-1, output.size(-1))
        target = target.reshape(-1)
        losses = F.cross_entropy(logits, target, ignore_index=self.ignore_index, reduction="sum")
        self.sum_loss += losses.item()
        self.total_items += (target != self.ignore_index).sum().item()

    def compute(self):
        return self.sum_loss / self.total_items


class LanguagePerplexity(LanguageCrossEntropy):
    def compute(self):
        return math.exp(super().compute())


class MPTConfig:
    model_type = "mpt"
    vocab_size = 64
    d_model = 64
    max_seq_len = 32


class MPTForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.max_seq_len, config.d_model)
        self.block = nn.Sequential(nn.LayerNorm(config.d_model), nn.Linear(config.d_model, 4 * config.d_model), nn.GELU(),
                                   nn.Linear(4 * config.d_model, config.d_model))
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, input_ids, labels=None):
        h = self.wte(input_ids) + self.wpe(torch.arange(input_ids.size(1)))
        h = h + self.block(h)
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            # Shift so that tokens < n predict n
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        return {"loss": loss, "logits": logits}


class HuggingFaceModel(nn.Module):
    def __init__(self, model, metrics=None, shift_labels=None):
        super().__init__()
        self.model = model
        self.train_metrics = {m.__class__.__name__: m for m in metrics or []}
        if shift_labels is None:
            shift_labels = model.config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        self.shift_labels = shift_labels

    def forward(self, batch):
        return self.model(**batch)

    def loss(self, outputs, batch):
        return outputs["loss"]

    def update_metric(self, batch, outputs, metric):
        logits = outputs["logits"]
        if self.shift_labels:
            logits = logits[:, :-1]
            labels = batch["labels"][:, 1:]
        else:
            labels = batch["labels"]
        metric.update(logits, labels)


class ComposerHFCausalLM(HuggingFaceModel):
    def __init__(self, om_model_config):
        model = MPTForCausalLM(om_model_config)
        train_metrics = [LanguageCrossEntropy(), LanguagePerplexity()]
        super().__init__(model=model, metrics=train_metrics)


def make_batches(n_batches, B=8, T=32, vocab_size=64):
    nxt = torch.randint(0, vocab_size, (vocab_size, 2), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(n_batches):
        seq = torch.zeros(B, T, dtype=torch.long)
        seq[:, 0] = torch.randint(0, vocab_size, (B,), generator=g)
        choice = torch.randint(0, 2, (B, T), generator=g)
        for t in range(1, T):
            seq[:, t] = nxt[seq[:, t - 1], choice[:, t]]
        batches.append({"input_ids": seq, "labels": seq.clone()})
    return batches


def main():
    torch.manual_seed(0)
    composer_model = ComposerHFCausalLM(MPTConfig())
    optimizer = torch.optim.AdamW(composer_model.parameters(), lr=3e-3)
    batches = make_batches(200)
    for batch_idx, batch in enumerate(batches):
        outputs = composer_model(batch)
        loss = composer_model.loss(outputs, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (batch_idx + 1) % 50 == 0:
            for metric in composer_model.train_metrics.values():
                metric.reset()
                composer_model.update_metric(batch, outputs, metric)
            m = composer_model.train_metrics
            print(f"[batch={batch_idx + 1}/200] loss/train/total: {loss.item():.4f} "
                  f"metrics/train/LanguageCrossEntropy: {m['LanguageCrossEntropy'].compute():.4f} "
                  f"metrics/train/LanguagePerplexity: {m['LanguagePerplexity'].compute():.2f}")


if __name__ == "__main__":
    main()
