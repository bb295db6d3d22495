# Source: artidoro/qlora, qlora.py, scripts/finetune_guanaco_7b.sh, commit 7f4e95a68dc076bea9b3a413d2b512eca6d004e5
# https://github.com/artidoro/qlora/blob/main/qlora.py
#
# QLoRA instruction fine-tuning with the transformers Trainer: the base model is frozen
# (prepare_model_for_kbit_training) and LoRA adapters go on every Linear but lm_head (find_all_linear_names), with
# lora_B initialised to zero so the first forward equals the base model; the tokenizer has no pad token, so one is
# added and the (frozen) embedding matrices are resized with the new row set to the mean of the old rows; labels are
# -100 over the source prompt and over the padding (train_on_source=False), so only the response tokens are trained;
# batch size 1 with gradient accumulation 16, max_grad_norm 0.3, lr_scheduler_type 'constant' (warmup_ratio 0.03 is
# ignored by that scheduler), gradient checkpointing with enable_input_require_grads on a frozen embedding,
# model.config.use_cache = False.
# Adaptation: huggyllama/llama-7b in 4 bit (bitsandbytes) replaced by a randomly initialised 2-layer LlamaForCausalLM
# in fp32 on the CPU, the sentencepiece tokenizer by a character tokenizer with the same bos/eos/pad handling; peft is
# not installed, so get_peft_model / prepare_model_for_kbit_training are small stand-ins with peft's LoRA maths
# (kaiming-uniform A, zero B, scaling alpha / r, dropout on the adapter input); paged_adamw_32bit -> adamw_torch;
# oasst1 -> 600 synthetic "### Human: <word> ### Assistant: <word shifted by one letter>" pairs; lora_r 64 -> 16 and
# lora_alpha 16 -> 4 (same scaling 0.25), max_steps 1875 -> 30, learning_rate 2e-4 -> 2e-3 and initializer_range 0.2 (a random
# base with the default 0.02 gives near-uniform logits through its frozen lm_head); warmup_ratio is spelled warmup_steps=0.03
# in transformers 5; group_by_length dropped (transformers 5 infers lengths
# only for `datasets` tables, which are not installed); MMLU evaluation, checkpoint callback and generation left out;
# the response-token loss on 64 held-out pairs is printed before and after training; seeds fixed.
import copy
import math
import os
import tempfile
from dataclasses import dataclass
from typing import Dict, Sequence

import numpy as np
import torch
import torch.nn as nn
import transformers
from torch.nn.utils.rnn import pad_sequence
from transformers import LlamaConfig, LlamaForCausalLM, Seq2SeqTrainer, Seq2SeqTrainingArguments, set_seed

IGNORE_INDEX = -100
DEFAULT_PAD_TOKEN = "[PAD]"


# ---------------------------------------------------------------- stand-ins for the tokenizer and peft
class CharTokenizer:
    """Character tokenizer with bos/eos and no pad token (like LLaMA's)."""

    def __init__(self):
        chars = list("abcdefghijklmnopqrstuvwxyz #:")
        self.bos_token, self.eos_token, self._pad_token = "<s>", "</s>", None
        self.vocab = ["<unk>", self.bos_token, self.eos_token] + chars

    @property
    def pad_token_id(self):
        return self.vocab.index(self._pad_token)

    def __len__(self):
        return len(self.vocab)

    def add_special_tokens(self, special_tokens_dict):
        added = 0
        for key, tok in special_tokens_dict.items():
            if tok not in self.vocab:
                self.vocab.append(tok)
                added += 1
            setattr(self, "_" + key, tok)
        return added

    def _encode(self, text):
        ids = []
        for special in (self.bos_token, self.eos_token):
            text = text.replace(special, "\x00" + special + "\x00")
        for piece in text.split("\x00"):
            if piece in (self.bos_token, self.eos_token):
                ids.append(self.vocab.index(piece))
            else:
                ids.extend(self.vocab.index(c) if c in self.vocab else 0 for c in piece)
        return ids

    def __call__(self, texts, max_length, truncation=True, add_special_tokens=False):
        return {"input_ids": [self._encode(t)[:max_length] for t in texts]}


class LoraLinear(nn.Module):
    """peft.tuners.lora.Linear: y = base(x) + B(A(dropout(x))) * alpha / r, B initialised to zero."""

    def __init__(self, base, r, lora_alpha, lora_dropout):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        self.lora_dropout = nn.Dropout(lora_dropout)
        self.scaling = lora_alpha / r
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def prepare_model_for_kbit_training(model, use_gradient_checkpointing=True):
    for _, param in model.named_parameters():
        param.requires_grad = False  # freeze base model's layers
    for param in model.parameters():
        if param.dtype in (torch.float16, torch.bfloat16):
            param.data = param.data.to(torch.float32)
    if use_gradient_checkpointing:
        model.enable_input_require_grads()
        model.gradient_checkpointing_enable()
    return model


def get_peft_model(model, r, lora_alpha, lora_dropout, target_modules):
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child_name in target_modules:
                setattr(module, child_name, LoraLinear(child, r, lora_alpha, lora_dropout))
    return model


# ---------------------------------------------------------------- qlora.py
def find_all_linear_names(args, model):
    cls = torch.nn.Linear
    lora_module_names = set()
    for name, module in model.named_modules():
        if isinstance(module, cls):
            names = name.split('.')
            lora_module_names.add(names[0] if len(names) == 1 else names[-1])

    if 'lm_head' in lora_module_names:  # needed for 16-bit
        lora_module_names.remove('lm_head')
    return list(lora_module_names)


def print_trainable_parameters(args, model):
    trainable_params = 0
    all_param = 0
    for _, param in model.named_parameters():
        all_param += param.numel()
        if param.requires_grad:
            trainable_params += param.numel()
    print(f"trainable params: {trainable_params} || all params: {all_param} || "
          f"trainable: {100 * trainable_params / all_param}")


def smart_tokenizer_and_embedding_resize(special_tokens_dict, tokenizer, model):
    """Resize tokenizer and embedding.

    Note: This is the unoptimized version that may make your embedding size not be divisible by 64.
    """
    num_new_tokens = tokenizer.add_special_tokens(special_tokens_dict)
    model.resize_token_embeddings(len(tokenizer))

    if num_new_tokens > 0:
        input_embeddings_data = model.get_input_embeddings().weight.data
        output_embeddings_data = model.get_output_embeddings().weight.data

        input_embeddings_avg = input_embeddings_data[:-num_new_tokens].mean(dim=0, keepdim=True)
        output_embeddings_avg = output_embeddings_data[:-num_new_tokens].mean(dim=0, keepdim=True)

        input_embeddings_data[-num_new_tokens:] = input_embeddings_avg
        output_embeddings_data[-num_new_tokens:] = output_embeddings_avg


@dataclass
class DataCollatorForCausalLM(object):
    tokenizer: CharTokenizer
    source_max_len: int
    target_max_len: int
    train_on_source: bool
    predict_with_generate: bool

    def __call__(self, instances: Sequence[Dict]) -> Dict[str, torch.Tensor]:
        # Extract elements
        sources = [f"{self.tokenizer.bos_token}{example['input']}" for example in instances]
        targets = [f"{example['output']}{self.tokenizer.eos_token}" for example in instances]
        # Tokenize
        tokenized_sources_with_prompt = self.tokenizer(
            sources,
            max_length=self.source_max_len,
            truncation=True,
            add_special_tokens=False,
        )
        tokenized_targets = self.tokenizer(
            targets,
            max_length=self.target_max_len,
            truncation=True,
            add_special_tokens=False,
        )
        # Build the input and labels for causal LM
        input_ids = []
        labels = []
        for tokenized_source, tokenized_target in zip(
            tokenized_sources_with_prompt['input_ids'],
            tokenized_targets['input_ids']
        ):
            if not self.predict_with_generate:
                input_ids.append(torch.tensor(tokenized_source + tokenized_target))
                if not self.train_on_source:
                    labels.append(
                        torch.tensor([IGNORE_INDEX for _ in range(len(tokenized_source))] + copy.deepcopy(tokenized_target))
                    )
                else:
                    labels.append(torch.tensor(copy.deepcopy(tokenized_source + tokenized_target)))
            else:
                input_ids.append(torch.tensor(tokenized_source))
        # Apply padding
        input_ids = pad_sequence(input_ids, batch_first=True, padding_value=self.tokenizer.pad_token_id)
        labels = pad_sequence(labels, batch_first=True, padding_value=IGNORE_INDEX) if not self.predict_with_generate else None
        data_dict = {
            'input_ids': input_ids,
            'attention_mask': input_ids.ne(self.tokenizer.pad_token_id),
        }
        if labels is not None:
            data_dict['labels'] = labels
        return data_dict


def make_pairs(n, rng):
    """oasst1 stand-in: the assistant answers a word with the word shifted by one letter."""
    out = []
    for _ in range(n):
        word = "".join(chr(97 + c) for c in rng.randint(0, 25, rng.randint(3, 9)))
        answer = "".join(chr(ord(ch) + 1) for ch in word)
        out.append({"input": f"### Human: {word} ### Assistant:", "output": f" {answer}"})
    return out


def response_loss(model, collator, pairs):
    model.eval()
    with torch.no_grad():
        batch = collator(pairs)
        loss = model(**batch).loss.item()
    model.train()
    return loss


def train(output_dir):
    class Args:  # scripts/finetune_guanaco_7b.sh (reduced)
        lora_r, lora_alpha, lora_dropout = 16, 4, 0.1
        source_max_len, target_max_len = 32, 16
        train_on_source, predict_with_generate = False, False
        gradient_checkpointing = True
    args = Args()

    set_seed(0)
    tokenizer = CharTokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         bos_token_id=1, eos_token_id=2, pad_token_id=None, initializer_range=0.2)
    model = LlamaForCausalLM(config)  # the "pretrained" base checkpoint
    if tokenizer._pad_token is None:
        smart_tokenizer_and_embedding_resize(
            special_tokens_dict=dict(pad_token=DEFAULT_PAD_TOKEN),
            tokenizer=tokenizer,
            model=model,
        )
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=args.gradient_checkpointing)
    modules = find_all_linear_names(args, model)
    model = get_peft_model(model, r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                           target_modules=modules)
    model.config.use_cache = False
    print('loaded model; LoRA on', sorted(modules))

    rng = np.random.RandomState(42)
    train_dataset = make_pairs(600, rng)
    heldout = make_pairs(64, rng)
    data_collator = DataCollatorForCausalLM(
        tokenizer=tokenizer,
        source_max_len=args.source_max_len,
        target_max_len=args.target_max_len,
        train_on_source=args.train_on_source,
        predict_with_generate=args.predict_with_generate,
    )

    training_args = Seq2SeqTrainingArguments(
        output_dir=output_dir,
        logging_steps=5,
        save_strategy="no",
        data_seed=42,
        remove_unused_columns=False,
        do_train=True,
        warmup_steps=0.03,  # warmup_ratio=0.03 in transformers 4
        lr_scheduler_type="constant",
        gradient_checkpointing=True,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=16,
        max_steps=30,
        learning_rate=0.002,
        adam_beta2=0.999,
        max_grad_norm=0.3,
        weight_decay=0.0,
        optim="adamw_torch",
        report_to="none",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    print_trainable_parameters(args, model)
    before = response_loss(model, data_collator, heldout)
    print(f"held-out response-token loss before: {before:.4f}")

    trainer = Seq2SeqTrainer(model=model, args=training_args, train_dataset=train_dataset,
                             data_collator=data_collator)
    train_result = trainer.train()
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in train_result.metrics.items()})
    after = response_loss(model, data_collator, heldout)
    print(f"held-out response-token loss after: {after:.4f}")
    print(f"[summary] held-out response loss first={before:.4f} last={after:.4f} decreased={after < before}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        train(tmp)
