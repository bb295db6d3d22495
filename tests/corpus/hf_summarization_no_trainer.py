"""Seq2seq fine-tuning: targets tokenized with the pad id replaced by -100 (ignore_pad_token_for_loss),
DataCollatorForSeq2Seq padding labels with -100 and building decoder_input_ids from the labels
(shift right, with the model), BartForConditionalGeneration, AdamW with no decay for bias /
LayerNorm, a linear schedule, and evaluation by model.generate() in eval() + no_grad.

Source: huggingface/transformers, examples/pytorch/summarization/run_summarization_no_trainer.py,
commit a22a4378d97d06b7a1d9abad6e0086d30fdea199.
Reduced: a 1+1-layer BART (d_model 16) from config, the in-memory tokenizer of _hf.py, 16 random
(document, summary) pairs, batch 4, generation of at most 6 tokens.
"""

import torch
from torch.utils.data import DataLoader

NEEDS = ("transformers",)


def build():
    from transformers import BartConfig, BartForConditionalGeneration, DataCollatorForSeq2Seq, get_scheduler

    from corpus import _hf

    torch.manual_seed(0)
    tokenizer = _hf.tokenizer()
    config = BartConfig(vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                        decoder_ffn_dim=32, max_position_embeddings=32, pad_token_id=0, bos_token_id=2,
                        eos_token_id=3, decoder_start_token_id=3, forced_eos_token_id=3)
    model = BartForConditionalGeneration(config)
    docs, sums = _hf.sentences(20, seed=8, lo=6, hi=12), _hf.sentences(20, seed=9, lo=2, hi=5)

    def preprocess(doc, summary):
        model_inputs = tokenizer(doc, max_length=24, truncation=True)
        labels = tokenizer(text_target=summary, max_length=8, truncation=True)
        model_inputs["labels"] = [(t if t != tokenizer.pad_token_id else -100) for t in labels["input_ids"]]
        return dict(model_inputs)

    data = [preprocess(d, s) for d, s in zip(docs, sums)]
    data_collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    train_dataloader = DataLoader(data[:16], shuffle=True, collate_fn=data_collator, batch_size=4)
    eval_dataloader = DataLoader(data[16:], collate_fn=data_collator, batch_size=4)
    no_decay = ["bias", "layer_norm.weight"]
    optimizer_grouped_parameters = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=5e-4)
    lr_scheduler = get_scheduler(name="linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=4)

    def train():
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            loss.backward()
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        model.eval()
        for step, batch in enumerate(eval_dataloader):
            with torch.no_grad():
                generated_tokens = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"],
                                                  max_new_tokens=6, num_beams=1)
            labels = batch["labels"].clone()
            labels[labels == -100] = tokenizer.pad_token_id
            decoded_preds = tokenizer.batch_decode(generated_tokens, skip_special_tokens=True)
        return decoded_preds

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
