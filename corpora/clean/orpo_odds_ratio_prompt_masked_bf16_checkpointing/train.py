# Source: xfactlab/orpo, src/orpo_trainer.py, main.py, src/args.py, commit 208d2d648068e700cbb1ae0e8320b1dc99b014ec
# https://github.com/xfactlab/orpo/blob/main/src/orpo_trainer.py
#
# ORPO (odds-ratio preference optimisation, no reference model): NLL on the chosen answer with the prompt
# tokens turned into -100, plus -alpha * log sigmoid(log odds(chosen) - log odds(rejected)) where the
# log-probabilities are length-normalised over the response tokens only (mask = chosen mask shifted
# minus prompt mask), log odds via log1p(-exp(logp)); a bf16 model, loss cast to bf16, Trainer with
# reentrant gradient checkpointing, cosine schedule with warmup.
# Adaptation: no hub tokenizer/model/dataset: a word-level tokenizer is built in the script (tokenizers
# library) with the repository's chat template, a 2-layer OPT-like GPT-2 with random weights in bfloat16,
# and synthetic preference pairs (chosen answers use polite words, rejected ones rude words); wandb.log ->
# a list printed every 10 steps; compute_loss accepts the num_items_in_batch argument newer transformers
# pass; paged_adamw_32bit (bitsandbytes) -> adamw_torch; LoRA/peft not installed, so full fine-tuning
# (enable_lora=False path); lr 2e-5 -> 2e-3 and 5 epochs -> 2 for a tiny model; CPU.
import random

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    set_seed,
)


class ORPOTrainer(Trainer):
    def __init__(self, alpha, pad, disable_prompt_loss, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pad = pad
        self.alpha = alpha
        self.loss_fct = torch.nn.CrossEntropyLoss(reduction='none')
        self.disable_prompt_loss = disable_prompt_loss
        self.log_history_orpo = []
        print("Pad Token ID: ", self.pad)

    def compute_custom_loss(self, logits, labels):

        logits = logits.contiguous()

        if labels is not None:
            # move labels to correct device to enable model parallelism
            labels = labels.to(logits.device)
            # Shift so that tokens < n predict n
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()

            # Flatten the tokens
            loss = self.loss_fct(shift_logits.transpose(2, 1), shift_labels).mean(dim=-1)

        return loss

    def compute_logps(self, prompt_attention_mask, chosen_inputs, chosen_attention_mask, logits):
        mask = chosen_attention_mask[:, :-1] - prompt_attention_mask[:, 1:]
        per_token_logps = torch.gather(logits[:, :-1, :].log_softmax(-1), dim=2,
                                       index=(mask * chosen_inputs[:, 1:]).unsqueeze(2)).squeeze(2)
        return torch.mul(per_token_logps, mask.to(dtype=torch.bfloat16)).sum(dim=1).to(dtype=torch.float64) / mask.sum(dim=1).to(dtype=torch.float64)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.label_smoother is not None and "labels" in inputs:
            labels = inputs.pop("labels")
        else:
            labels = None

        # Generate the hidden states for 'chosen' and 'reject'
        neg_labels = inputs['negative_input_ids'].clone()
        pos_labels = inputs['positive_input_ids'].clone()

        ### Discard the prompt tokens in NLL loss if true
        if self.disable_prompt_loss:
            mask = inputs['attention_mask'] * inputs['positive_attention_mask']
            pos_labels = pos_labels * mask.logical_not()
            pos_labels[pos_labels == 0] = self.pad
        ##################################################

        neg_labels[neg_labels == self.pad] = -100
        pos_labels[pos_labels == self.pad] = -100

        outputs_neg = model(**{'input_ids': inputs['negative_input_ids'],
                               'attention_mask': inputs['negative_attention_mask'],
                               'labels': neg_labels,}, output_hidden_states=True)
        outputs_pos = model(**{'input_ids': inputs['positive_input_ids'],
                               'attention_mask': inputs['positive_attention_mask'],
                               'labels': pos_labels,}, output_hidden_states=True)

        # Calculate NLL loss
        pos_loss = outputs_pos.loss

        # Calculate Log Probability
        pos_prob = self.compute_logps(prompt_attention_mask=inputs['attention_mask'],
                                      chosen_inputs=inputs['positive_input_ids'],
                                      chosen_attention_mask=inputs['positive_attention_mask'],
                                      logits=outputs_pos.logits)
        neg_prob = self.compute_logps(prompt_attention_mask=inputs['attention_mask'],
                                      chosen_inputs=inputs['negative_input_ids'],
                                      chosen_attention_mask=inputs['negative_attention_mask'],
                                      logits=outputs_neg.logits)

        # Calculate log odds
        log_odds = (pos_prob - neg_prob) - (torch.log1p(-torch.exp(pos_prob)) - torch.log1p(-torch.exp(neg_prob)))
        sig_ratio = torch.nn.functional.sigmoid(log_odds)
        ratio = torch.log(sig_ratio)

        # Calculate the Final Loss
        loss = torch.mean(pos_loss - self.alpha * ratio).to(dtype=torch.bfloat16)

        self.log_history_orpo.append({'Positive Geometric Mean': torch.mean(pos_prob).item(),
                                      'Negative Geometric Mean': torch.mean(neg_prob).item(),
                                      'Log Odds Ratio': torch.mean(ratio).item(),
                                      'Log Odds': torch.mean(log_odds).item(),
                                      'NLL': pos_loss.item()})

        return (loss, outputs_pos) if return_outputs else loss


CHAT_TEMPLATE = "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
TOPICS = ["weather", "garden", "music", "river", "city", "train", "book", "coffee", "mountain", "ocean"]
POLITE = ["thank", "you", "kindly", "glad", "happy", "help", "sure", "certainly", "wonderful", "pleasure"]
RUDE = ["no", "go", "away", "boring", "stupid", "whatever", "ugh", "annoying", "never", "later"]
FILLER = ["the", "is", "a", "about", "it", "and", "very", "so", "this", "that"]


def build_tokenizer():
    words = ["[UNK]", "<|user|>", "<|system|>", "<|assistant|>", "</s>", "tell", "me"] + TOPICS + POLITE + RUDE + FILLER
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="</s>",
                                        additional_special_tokens=["<|user|>", "<|system|>", "<|assistant|>"])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def make_examples(n, seed):
    rng = random.Random(seed)
    chosen, rejected = [], []
    for _ in range(n):
        topic = rng.choice(TOPICS)
        q = " ".join(["tell", "me", "about", "the", topic] + rng.sample(FILLER, rng.randint(0, 3)))
        good = " ".join(rng.choice(POLITE + FILLER + [topic]) for _ in range(rng.randint(4, 9)))
        bad = " ".join(rng.choice(RUDE + FILLER + [topic]) for _ in range(rng.randint(4, 9)))
        chosen.append([{'role': 'user', 'content': q}, {'role': 'assistant', 'content': good}])
        rejected.append([{'role': 'user', 'content': q}, {'role': 'assistant', 'content': bad}])
    return {'chosen': chosen, 'rejected': rejected}


def preprocess_dataset(tokenizer, examples, response_max_length):
    prompt = [tokenizer.apply_chat_template(item[:-1], tokenize=False, add_generation_prompt=True) for item in examples['chosen']]
    chosen = [tokenizer.apply_chat_template(item, tokenize=False) for item in examples['chosen']]
    rejected = [tokenizer.apply_chat_template(item, tokenize=False) for item in examples['rejected']]

    model_inputs = tokenizer(prompt, max_length=response_max_length, padding='max_length', truncation=True, return_tensors='pt')
    pos_labels = tokenizer(chosen, max_length=response_max_length, padding='max_length', truncation=True, return_tensors='pt')
    neg_labels = tokenizer(rejected, max_length=response_max_length, padding='max_length', truncation=True, return_tensors='pt')

    model_inputs['positive_input_ids'] = pos_labels['input_ids']
    model_inputs['positive_attention_mask'] = pos_labels['attention_mask']
    model_inputs['negative_input_ids'] = neg_labels['input_ids']
    model_inputs['negative_attention_mask'] = neg_labels['attention_mask']
    keys = list(model_inputs.keys())
    return [{k: model_inputs[k][i].tolist() for k in keys if k != 'token_type_ids'} for i in range(len(prompt))]


def main():
    set_seed(42)
    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    tokenizer.pad_token_id = tokenizer.eos_token_id
    tokenizer.padding_side = 'right'

    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=64, n_layer=2, n_head=4,
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(config).to(torch.bfloat16)

    train = preprocess_dataset(tokenizer, make_examples(512, 1), response_max_length=32)

    arguments = TrainingArguments(
        output_dir="/tmp/orpo_out",
        logging_steps=10,
        learning_rate=2e-3,
        num_train_epochs=2,
        per_device_train_batch_size=16,
        save_strategy='no',
        optim='adamw_torch',
        warmup_steps=8,
        gradient_accumulation_steps=1,
        gradient_checkpointing=True,
        gradient_checkpointing_kwargs={'use_reentrant': True},
        do_train=True,
        lr_scheduler_type='cosine',
        remove_unused_columns=False,
        report_to=[],
        bf16=True,
        use_cpu=True,
        disable_tqdm=True,
        seed=42,
    )
    data_collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm=False)
    trainer = ORPOTrainer(
        model=model,
        alpha=1.0,
        pad=tokenizer.pad_token_id,
        disable_prompt_loss=True,
        args=arguments,
        train_dataset=train,
        data_collator=data_collator,
    )
    print("Discarding Prompt Tokens for NLL Loss")
    trainer.train()

    hist = trainer.log_history_orpo
    for i in range(0, len(hist), 8):
        h = hist[i]
        print(f"step {i}: NLL {h['NLL']:.3f} log-odds {h['Log Odds']:.3f} pos logp {h['Positive Geometric Mean']:.3f} neg logp {h['Negative Geometric Mean']:.3f}")
    first = sum(h['Log Odds'] for h in hist[:8]) / 8
    last = sum(h['Log Odds'] for h in hist[-8:]) / 8
    nll_first = sum(h['NLL'] for h in hist[:8]) / 8
    nll_last = sum(h['NLL'] for h in hist[-8:]) / 8
    print(f"[summary] log_odds(mean of 8 steps) first={first:.3f} last={last:.3f} increased={last > first}; "
          f"chosen NLL first={nll_first:.3f} last={nll_last:.3f}")


if __name__ == "__main__":
    main()
