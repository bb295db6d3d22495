"""Masked-LM pretraining with the real `DataCollatorForLanguageModeling` (15 % masked, 80/10/10:
the 10 % random replacement can put the PAD id into the inputs at labelled positions), AdamW
with no decay on bias/LayerNorm, a linear schedule with warmup, and a perplexity evaluation.

Source: huggingface/transformers, examples/pytorch/language-modeling/run_mlm_no_trainer.py,
commit cbeb5d01b54d6cbbc4193a792dbe9a824588681a.
Reduced: a 2-layer BERT (hidden 16) from config, an in-memory word-level tokenizer, 24 random
sentences, batch 8; the accelerator calls become their plain torch equivalents.
"""

import math

import torch
from torch.utils.data import DataLoader

NEEDS = ("transformers",)


def build():
    from transformers import BertForMaskedLM, DataCollatorForLanguageModeling, get_scheduler

    from corpus import _hf

    torch.manual_seed(0)
    tokenizer = _hf.tokenizer()
    model = BertForMaskedLM(_hf.bert_config(len(tokenizer)))
    # examples are tokenized with return_special_tokens_mask=True, as the script does
    train_dataset = [tokenizer(s, return_special_tokens_mask=True) for s in _hf.sentences(24)]
    eval_dataset = [tokenizer(s, return_special_tokens_mask=True) for s in _hf.sentences(8, seed=1)]
    data_collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm_probability=0.15)
    train_dataloader = DataLoader(train_dataset, shuffle=True, collate_fn=data_collator, batch_size=8)
    eval_dataloader = DataLoader(eval_dataset, collate_fn=data_collator, batch_size=8)

    no_decay = ["bias", "LayerNorm.weight"]
    optimizer_grouped_parameters = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=5e-4)
    lr_scheduler = get_scheduler(name="linear", optimizer=optimizer, num_warmup_steps=1, num_training_steps=6)

    def train():
        for epoch in range(2):
            model.train()
            total_loss = 0
            for step, batch in enumerate(train_dataloader):
                outputs = model(**batch)
                loss = outputs.loss
                total_loss += loss.detach().float()
                loss.backward()
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            model.eval()
            losses = []
            for step, batch in enumerate(eval_dataloader):
                with torch.no_grad():
                    outputs = model(**batch)
                loss = outputs.loss
                losses.append(loss.repeat(8))
            losses = torch.cat(losses)
            try:
                eval_loss = torch.mean(losses)
                perplexity = math.exp(eval_loss)
            except OverflowError:
                perplexity = float("inf")
            print(epoch, perplexity, total_loss.item())

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
