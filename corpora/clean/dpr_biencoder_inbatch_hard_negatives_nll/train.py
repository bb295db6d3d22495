# Source: facebookresearch/DPR, dpr/models/biencoder.py + dpr/models/hf_models.py + train_dense_encoder.py + dpr/utils/model_utils.py, commit 6b7e36d31850498c253e26f4b2628eccf1a8924e
# https://github.com/facebookresearch/DPR
#
# Dense passage retrieval bi-encoder: separate question and context BERT encoders (CLS vector as the
# representation), one batch = B questions and, per question, its gold passage followed by hard negatives
# (create_biencoder_input2), all contexts of the batch scored against all questions with a dot product
# ("all-in-batch" negatives), log_softmax + nll_loss with positive_idx_per_question pointing into the
# flat context list; attention masks from ids != pad; AdamW with no decay on bias/LayerNorm, linear
# warmup/decay schedule stepped per update, clip_grad_norm_, model.zero_grad().
# Adaptation: NQ json + bert-base + tokenizer -> synthetic "passages" of 20 token ids (vocab 100) where each
# question is its passage's first 10 tokens with 20% replaced, hard negatives keep half the tokens shuffled; randomly
# initialised tiny BertModel (2 layers, hidden 64, dropout 0) from transformers; batch_size 8, 1 hard negative,
# 6 epochs of 12 batches; lr 2e-5 -> 1e-3, warmup 100 -> 10; hydra cfg, distributed gather, validation
# by average rank and checkpointing dropped; accuracy of the in-batch prediction printed per epoch; cpu.
import collections
import random
from typing import List, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor as T
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from transformers import BertConfig, BertModel

BiEncoderBatch = collections.namedtuple(
    "BiENcoderInput",
    [
        "question_ids",
        "question_segments",
        "context_ids",
        "ctx_segments",
        "is_positive",
        "hard_negatives",
        "encoder_type",
    ],
)
BiEncoderSample = collections.namedtuple("BiEncoderSample", ["query", "positive_passages", "negative_passages", "hard_negative_passages"])

PAD_ID, CLS_ID, SEP_ID = 0, 1, 2


def dot_product_scores(q_vectors: T, ctx_vectors: T) -> T:
    # q_vector: n1 x D, ctx_vectors: n2 x D, result n1 x n2
    r = torch.matmul(q_vectors, torch.transpose(ctx_vectors, 0, 1))
    return r


class HFBertEncoder(BertModel):
    def __init__(self, config, project_dim: int = 0):
        BertModel.__init__(self, config)
        assert config.hidden_size > 0, "Encoder hidden_size can't be zero"
        self.encode_proj = nn.Linear(config.hidden_size, project_dim) if project_dim != 0 else None
        self.init_weights()

    def forward(self, input_ids: T, token_type_ids: T, attention_mask: T, representation_token_pos=0) -> Tuple[T, ...]:
        out = super().forward(
            input_ids=input_ids,
            token_type_ids=token_type_ids,
            attention_mask=attention_mask,
        )
        sequence_output = out.last_hidden_state
        hidden_states = None

        if isinstance(representation_token_pos, int):
            pooled_output = sequence_output[:, representation_token_pos, :]
        else:  # treat as a tensor
            bsz = sequence_output.size(0)
            assert representation_token_pos.size(0) == bsz, "query bsz={} while representation_token_pos bsz={}".format(
                bsz, representation_token_pos.size(0)
            )
            pooled_output = torch.stack([sequence_output[i, representation_token_pos[i, 1], :] for i in range(bsz)])

        if self.encode_proj:
            pooled_output = self.encode_proj(pooled_output)
        return sequence_output, pooled_output, hidden_states


class BiEncoder(nn.Module):
    """Bi-Encoder model component. Encapsulates query/question and context/passage encoders."""

    def __init__(self, question_model: nn.Module, ctx_model: nn.Module, fix_q_encoder: bool = False, fix_ctx_encoder: bool = False):
        super(BiEncoder, self).__init__()
        self.question_model = question_model
        self.ctx_model = ctx_model
        self.fix_q_encoder = fix_q_encoder
        self.fix_ctx_encoder = fix_ctx_encoder

    @staticmethod
    def get_representation(sub_model: nn.Module, ids: T, segments: T, attn_mask: T, fix_encoder: bool = False, representation_token_pos=0) -> (T, T, T):
        sequence_output = None
        pooled_output = None
        hidden_states = None
        if ids is not None:
            if fix_encoder:
                with torch.no_grad():
                    sequence_output, pooled_output, hidden_states = sub_model(
                        ids,
                        segments,
                        attn_mask,
                        representation_token_pos=representation_token_pos,
                    )

                if sub_model.training:
                    sequence_output.requires_grad_(requires_grad=True)
                    pooled_output.requires_grad_(requires_grad=True)
            else:
                sequence_output, pooled_output, hidden_states = sub_model(
                    ids,
                    segments,
                    attn_mask,
                    representation_token_pos=representation_token_pos,
                )

        return sequence_output, pooled_output, hidden_states

    def forward(self, question_ids: T, question_segments: T, question_attn_mask: T, context_ids: T, ctx_segments: T, ctx_attn_mask: T, encoder_type: str = None, representation_token_pos=0) -> Tuple[T, T]:
        q_encoder = self.question_model if encoder_type is None or encoder_type == "question" else self.ctx_model
        _q_seq, q_pooled_out, _q_hidden = self.get_representation(
            q_encoder,
            question_ids,
            question_segments,
            question_attn_mask,
            self.fix_q_encoder,
            representation_token_pos=representation_token_pos,
        )

        ctx_encoder = self.ctx_model if encoder_type is None or encoder_type == "ctx" else self.question_model
        _ctx_seq, ctx_pooled_out, _ctx_hidden = self.get_representation(
            ctx_encoder, context_ids, ctx_segments, ctx_attn_mask, self.fix_ctx_encoder
        )

        return q_pooled_out, ctx_pooled_out

    @classmethod
    def create_biencoder_input2(cls, samples: List[BiEncoderSample], tensorizer, insert_title: bool, num_hard_negatives: int = 0, num_other_negatives: int = 0, shuffle: bool = True, shuffle_positives: bool = False, hard_neg_fallback: bool = True) -> BiEncoderBatch:
        question_tensors = []
        ctx_tensors = []
        positive_ctx_indices = []
        hard_neg_ctx_indices = []

        for sample in samples:
            if shuffle and shuffle_positives:
                positive_ctxs = sample.positive_passages
                positive_ctx = positive_ctxs[np.random.choice(len(positive_ctxs))]
            else:
                positive_ctx = sample.positive_passages[0]

            neg_ctxs = sample.negative_passages
            hard_neg_ctxs = sample.hard_negative_passages
            question = sample.query

            if shuffle:
                random.shuffle(neg_ctxs)
                random.shuffle(hard_neg_ctxs)

            if hard_neg_fallback and len(hard_neg_ctxs) == 0:
                hard_neg_ctxs = neg_ctxs[0:num_hard_negatives]

            neg_ctxs = neg_ctxs[0:num_other_negatives]
            hard_neg_ctxs = hard_neg_ctxs[0:num_hard_negatives]

            all_ctxs = [positive_ctx] + neg_ctxs + hard_neg_ctxs
            hard_negatives_start_idx = 1
            hard_negatives_end_idx = 1 + len(hard_neg_ctxs)

            current_ctxs_len = len(ctx_tensors)

            sample_ctxs_tensors = [tensorizer.text_to_tensor(ctx) for ctx in all_ctxs]

            ctx_tensors.extend(sample_ctxs_tensors)
            positive_ctx_indices.append(current_ctxs_len)
            hard_neg_ctx_indices.append(
                [
                    i
                    for i in range(
                        current_ctxs_len + hard_negatives_start_idx,
                        current_ctxs_len + hard_negatives_end_idx,
                    )
                ]
            )
            question_tensors.append(tensorizer.text_to_tensor(question))

        ctxs_tensor = torch.cat([ctx.view(1, -1) for ctx in ctx_tensors], dim=0)
        questions_tensor = torch.cat([q.view(1, -1) for q in question_tensors], dim=0)

        ctx_segments = torch.zeros_like(ctxs_tensor)
        question_segments = torch.zeros_like(questions_tensor)

        return BiEncoderBatch(
            questions_tensor,
            question_segments,
            ctxs_tensor,
            ctx_segments,
            positive_ctx_indices,
            hard_neg_ctx_indices,
            "question",
        )


class BiEncoderNllLoss(object):
    def calc(self, q_vectors: T, ctx_vectors: T, positive_idx_per_question: list, hard_negative_idx_per_question: list = None, loss_scale: float = None) -> Tuple[T, int]:
        scores = self.get_scores(q_vectors, ctx_vectors)

        if len(q_vectors.size()) > 1:
            q_num = q_vectors.size(0)
            scores = scores.view(q_num, -1)

        softmax_scores = F.log_softmax(scores, dim=1)

        loss = F.nll_loss(
            softmax_scores,
            torch.tensor(positive_idx_per_question).to(softmax_scores.device),
            reduction="mean",
        )

        max_score, max_idxs = torch.max(softmax_scores, 1)
        correct_predictions_count = (max_idxs == torch.tensor(positive_idx_per_question).to(max_idxs.device)).sum()

        if loss_scale:
            loss.mul_(loss_scale)

        return loss, correct_predictions_count

    @staticmethod
    def get_scores(q_vector: T, ctx_vectors: T) -> T:
        f = BiEncoderNllLoss.get_similarity_function()
        return f(q_vector, ctx_vectors)

    @staticmethod
    def get_similarity_function():
        return dot_product_scores


class Tensorizer:
    """BertTensorizer reduced: token ids are given directly"""
    def __init__(self, max_length: int, pad_to_max: bool = True):
        self.max_length = max_length
        self.pad_to_max = pad_to_max

    def text_to_tensor(self, token_ids):
        token_ids = [CLS_ID] + list(token_ids)[: self.max_length - 2] + [SEP_ID]
        if self.pad_to_max and len(token_ids) < self.max_length:
            token_ids = token_ids + [PAD_ID] * (self.max_length - len(token_ids))
        return torch.tensor(token_ids)

    def get_attn_mask(self, tokens_tensor: T) -> T:
        return tokens_tensor != PAD_ID


def get_optimizer(model: nn.Module, learning_rate: float = 1e-5, adam_eps: float = 1e-8, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    no_decay = ["bias", "LayerNorm.weight"]
    optimizer_grouped_parameters = [
        {
            "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
            "weight_decay": weight_decay,
        },
        {
            "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=learning_rate, eps=adam_eps)
    return optimizer


def get_schedule_linear(optimizer, warmup_steps, total_training_steps, steps_shift=0, last_epoch=-1):
    """Create a schedule with a learning rate that decreases linearly after
    linearly increasing during a warmup period.
    """

    def lr_lambda(current_step):
        current_step += steps_shift
        if current_step < warmup_steps:
            return float(current_step) / float(max(1, warmup_steps))
        return max(
            1e-7,
            float(total_training_steps - current_step) / float(max(1, total_training_steps - warmup_steps)),
        )

    return LambdaLR(optimizer, lr_lambda, last_epoch)


def _calc_loss(loss_function, local_q_vector, local_ctx_vectors, local_positive_idxs, local_hard_negatives_idxs: list = None, loss_scale: float = None) -> Tuple[T, bool]:
    # single process: the global vectors are the local ones
    loss, is_correct = loss_function.calc(
        local_q_vector,
        local_ctx_vectors,
        local_positive_idxs,
        local_hard_negatives_idxs,
        loss_scale=loss_scale,
    )
    return loss, is_correct


def _do_biencoder_fwd_pass(model: nn.Module, input: BiEncoderBatch, tensorizer: Tensorizer, cfg) -> Tuple[torch.Tensor, int]:
    q_attn_mask = tensorizer.get_attn_mask(input.question_ids)
    ctx_attn_mask = tensorizer.get_attn_mask(input.context_ids)

    if model.training:
        model_out = model(
            input.question_ids,
            input.question_segments,
            q_attn_mask,
            input.context_ids,
            input.ctx_segments,
            ctx_attn_mask,
            encoder_type=input.encoder_type,
        )
    else:
        with torch.no_grad():
            model_out = model(
                input.question_ids,
                input.question_segments,
                q_attn_mask,
                input.context_ids,
                input.ctx_segments,
                ctx_attn_mask,
                encoder_type=input.encoder_type,
            )

    local_q_vector, local_ctx_vectors = model_out

    loss_function = BiEncoderNllLoss()

    loss, is_correct = _calc_loss(
        loss_function,
        local_q_vector,
        local_ctx_vectors,
        input.is_positive,
        input.hard_negatives,
    )

    is_correct = is_correct.sum().item()

    if cfg.gradient_accumulation_steps > 1:
        loss = loss / cfg.gradient_accumulation_steps
    return loss, is_correct


def make_samples(n, vocab=100, length=20, seed=0):
    rng = np.random.RandomState(seed)
    samples = []
    for _ in range(n):
        passage = rng.randint(3, vocab, size=length)
        question = passage[:10].copy()
        question = np.where(rng.rand(10) < 0.2, rng.randint(3, vocab, size=10), question)
        hard = passage.copy()
        hard[length // 2:] = rng.randint(3, vocab, size=length - length // 2)
        rng.shuffle(hard)
        others = [rng.randint(3, vocab, size=length) for _ in range(2)]
        samples.append(BiEncoderSample(question.tolist(), [passage.tolist()], others, [hard.tolist()]))
    return samples


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)

    class cfg:
        batch_size = 8
        hard_negatives = 1
        other_negatives = 0
        num_train_epochs = 6
        learning_rate = 1e-3
        warmup_steps = 10
        weight_decay = 0.0
        adam_eps = 1e-8
        max_grad_norm = 2.0
        gradient_accumulation_steps = 1

    bert_cfg = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)
    question_encoder = HFBertEncoder(bert_cfg)
    ctx_encoder = HFBertEncoder(bert_cfg)
    model = BiEncoder(question_encoder, ctx_encoder)
    tensorizer = Tensorizer(max_length=24)

    train_samples = make_samples(96)
    updates_per_epoch = len(train_samples) // cfg.batch_size
    total_updates = updates_per_epoch * cfg.num_train_epochs
    optimizer = get_optimizer(model, learning_rate=cfg.learning_rate, adam_eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
    scheduler = get_schedule_linear(optimizer, cfg.warmup_steps, total_updates)

    model.train()
    for epoch in range(cfg.num_train_epochs):
        random.shuffle(train_samples)
        epoch_loss, epoch_correct, epoch_q = 0.0, 0, 0
        for i in range(updates_per_epoch):
            samples_batch = train_samples[i * cfg.batch_size:(i + 1) * cfg.batch_size]
            biencoder_batch = BiEncoder.create_biencoder_input2(
                samples_batch,
                tensorizer,
                True,
                cfg.hard_negatives,
                cfg.other_negatives,
                shuffle=True,
                shuffle_positives=False,
            )

            loss, correct_cnt = _do_biencoder_fwd_pass(model, biencoder_batch, tensorizer, cfg)

            epoch_correct += correct_cnt
            epoch_q += len(samples_batch)
            epoch_loss += loss.item()

            loss.backward()
            if (i + 1) % cfg.gradient_accumulation_steps == 0:
                if cfg.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)

                optimizer.step()
                scheduler.step()
                model.zero_grad()

        print("Epoch %d: avg loss %.4f, in-batch accuracy %.3f, lr %.6f" % (
            epoch, epoch_loss / updates_per_epoch, epoch_correct / epoch_q, scheduler.get_last_lr()[0]))


if __name__ == "__main__":
    main()
