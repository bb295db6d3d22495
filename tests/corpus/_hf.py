"""Tiny offline pieces for the Hugging Face loops: a word-level tokenizer built in memory (no
download) and small configs. Imported only by loops that declare NEEDS = ("transformers",)."""

from __future__ import annotations

import random

WORDS = ("the a cat dog sat on mat ran far away big small red blue green house tree car road sun moon "
         "star sky sea fish bird runs jumps eats sleeps good bad new old one two three").split()


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def sentences(n: int, seed: int = 0, lo: int = 3, hi: int = 12) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


def bert_config(vocab_size: int, **kw):
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32, **kw)


def gpt2_config(vocab_size: int, **kw):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=vocab_size, n_embd=16, n_layer=2, n_head=2, n_positions=32, bos_token_id=2, eos_token_id=3, **kw)
