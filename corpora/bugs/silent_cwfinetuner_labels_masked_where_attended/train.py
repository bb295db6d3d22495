# Source: coreweave/kubernetes-cloud, finetuner-workflow/finetuner/finetuner.py, commit 6413266177da038fc2f4eb3ea284d969a4498fea
# Report: https://github.com/coreweave/kubernetes-cloud/commit/e18b0fc36b9d780b41dda460a19f4b20e4127708
import math
import tempfile
from typing import Tuple

import numpy
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()

VOCAB = 96
EOS_TOKEN_ID = 94
PAD_TOKEN_ID = 95
CONTEXT = 48


def make_token_file(n_docs, seed):
    # a small synthetic "language": each document is an arithmetic progression mod 90,
    # the next token is predictable from the previous two; contexts are right-padded
    rng = numpy.random.RandomState(seed)
    rows = []
    for _ in range(n_docs):
        length = rng.randint(20, 40)
        start, step = rng.randint(0, 90), rng.randint(1, 7)
        doc = [(start + step * k) % 90 for k in range(length)] + [EOS_TOKEN_ID]
        rows.append(doc + [PAD_TOKEN_ID] * (CONTEXT - len(doc)))
    return numpy.array(rows, dtype=numpy.ushort).reshape(-1)


class TokenizedDataset(Dataset):
    """
    Consumes a flat buffer of 16-bit token serialization, aligned
    along `context_length` chunks.
    """

    def __init__(self, buffer: numpy.ndarray, context_length: int = CONTEXT):
        self._buffer = buffer
        self._context_length = context_length
        self.length = int(len(buffer) / context_length)
        self._padding_is_ambiguous = PAD_TOKEN_ID == EOS_TOKEN_ID
        self._pad_token_id = PAD_TOKEN_ID

    def __len__(self) -> int:
        return self.length

    def load(self, idx: int) -> Tuple[torch.Tensor, torch.Tensor]:
        begin = idx * self._context_length
        arr = self._buffer[begin:begin + self._context_length].astype(numpy.int_)
        input_ids = torch.from_numpy(arr)
        if self._padding_is_ambiguous and idx != self.length - 1:
            mask = torch.ones_like(input_ids, dtype=torch.bool)
        else:
            mask: torch.Tensor = input_ids != self._pad_token_id
        return input_ids, mask

    def __getitem__(self, idx) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.load(idx)


class ModifiedTrainer(Trainer):
    """
    A modification of the Trainer class to allow for better console reporting
    and fix gradient handling on the loss tensor returned.
    """

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if "labels" in inputs:
            inputs["labels"].masked_fill_(inputs["attention_mask"], -100)

        results = super().compute_loss(model, inputs, return_outputs)
        loss = results[0] if return_outputs else results

        self.report_idx = getattr(self, "report_idx", 0) + 1
        if self.report_idx % 10 == 0:
            print(f"step {self.report_idx} LOSS: {loss:.3f}", flush=True)

        return results


def collector(data):
    return {
        "input_ids": torch.stack([f[0] for f in data]),
        "attention_mask": torch.stack([f[1] for f in data]),
        "labels": torch.stack([f[0] for f in data]),
    }


@torch.no_grad()
def evaluate(model, dataset):
    # next-token loss on real (non-padding) tokens, the quantity the finetune is meant to lower
    model.eval()
    batch = collector([dataset[i] for i in range(len(dataset))])
    labels = batch["labels"].masked_fill(~batch["attention_mask"], -100)
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
    model.train()
    return out.loss.item()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train_dataset = TokenizedDataset(make_token_file(256, seed=0))
    val_dataset = TokenizedDataset(make_token_file(64, seed=1))

    config = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=64, n_layer=2, n_head=4,
                        bos_token_id=EOS_TOKEN_ID, eos_token_id=EOS_TOKEN_ID, pad_token_id=PAD_TOKEN_ID)
    model = GPT2LMHeadModel(config)
    print(f"text-token loss before finetuning: {evaluate(model, val_dataset):.3f} (uniform: {math.log(VOCAB):.3f})")

    output_dir = tempfile.mkdtemp()
    training_args = TrainingArguments(
        output_dir=output_dir,
        num_train_epochs=3,
        logging_steps=10,
        save_strategy="no",
        per_device_train_batch_size=16,
        per_device_eval_batch_size=16,
        gradient_accumulation_steps=1,
        learning_rate=3e-3,
        warmup_steps=8,
        weight_decay=0.01,
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )

    trainer = ModifiedTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=val_dataset,
        data_collator=collector,
    )
    trainer.train()
    print(f"text-token loss after finetuning: {evaluate(model, val_dataset):.3f}")


if __name__ == "__main__":
    main()
