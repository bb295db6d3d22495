# Source: princeton-nlp/SimCSE, simcse/models.py (MLPLayer, Similarity, Pooler, cl_init, cl_forward, sentemb_forward,
# BertForCL), commit 206d7aef05aeadc8e6d354dfc8656c9e9521cc64; train.py (unsupervised recipe: every sentence fed twice)
# Unsupervised SimCSE: the same sentence goes through the encoder twice; the two dropout masks give the positive pair,
# the other sentences of the batch are the negatives; cross-entropy over cosine similarities / temp (0.05).
# Suspicious-looking but correct patterns kept from the original:
#   - input_ids duplicated along dim 1 (num_sent=2): both "views" are bit-identical inputs, the only difference is
#     dropout, so the model must stay in train() mode; in eval() the two views would be identical
#   - labels = torch.arange(batch) built inside the forward; logits are cosine / 0.05 (values up to 20)
#   - BertModel(add_pooling_layer=False); "avg" pooler = masked mean of the last hidden states (MLPLayer only exists
#     for the "cls" pooler, so it is never built here)
#   - training loss collapses to ~0.005 within 20 steps (the dropout-positive is easy to find) while the downstream
#     metric keeps moving: a near-zero contrastive loss is expected, not a sign of a leak
#   - the distributed all_gather branch (dist.is_initialized()) is present but inactive in a single process
#   - the MLM auxiliary head is not built (do_mlm=False), the hard-negative branch is inactive (num_sent=2)
# Adaptation: pretrained bert-base and the Wiki-1M text replaced by a randomly initialised 2-layer BertModel
# (transformers, tiny config) and synthetic "sentences" drawn from 16 topic vocabularies; HF Trainer/CLTrainer
# replaced by the equivalent AdamW + linear-decay loop; evaluation = paraphrase retrieval (same topic, other words)
# with sentemb_forward instead of SentEval STS-B; lr 3e-5 -> 1e-3, 60 steps.
from types import SimpleNamespace

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers.models.bert.modeling_bert import BertPreTrainedModel, BertModel, BertLMPredictionHead
from transformers.modeling_outputs import SequenceClassifierOutput, BaseModelOutputWithPoolingAndCrossAttentions


class MLPLayer(nn.Module):
    """
    Head for getting sentence representations over RoBERTa/BERT's CLS representation.
    """

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, features, **kwargs):
        x = self.dense(features)
        x = self.activation(x)

        return x


class Similarity(nn.Module):
    """
    Dot product or cosine similarity
    """

    def __init__(self, temp):
        super().__init__()
        self.temp = temp
        self.cos = nn.CosineSimilarity(dim=-1)

    def forward(self, x, y):
        return self.cos(x, y) / self.temp


class Pooler(nn.Module):
    def __init__(self, pooler_type):
        super().__init__()
        self.pooler_type = pooler_type
        assert self.pooler_type in ["cls", "cls_before_pooler", "avg", "avg_top2", "avg_first_last"], "unrecognized pooling type %s" % self.pooler_type

    def forward(self, attention_mask, outputs):
        last_hidden = outputs.last_hidden_state
        hidden_states = outputs.hidden_states

        if self.pooler_type in ['cls_before_pooler', 'cls']:
            return last_hidden[:, 0]
        elif self.pooler_type == "avg":
            return ((last_hidden * attention_mask.unsqueeze(-1)).sum(1) / attention_mask.sum(-1).unsqueeze(-1))
        elif self.pooler_type == "avg_first_last":
            first_hidden = hidden_states[1]
            last_hidden = hidden_states[-1]
            pooled_result = ((first_hidden + last_hidden) / 2.0 * attention_mask.unsqueeze(-1)).sum(1) / attention_mask.sum(-1).unsqueeze(-1)
            return pooled_result
        elif self.pooler_type == "avg_top2":
            second_last_hidden = hidden_states[-2]
            last_hidden = hidden_states[-1]
            pooled_result = ((last_hidden + second_last_hidden) / 2.0 * attention_mask.unsqueeze(-1)).sum(1) / attention_mask.sum(-1).unsqueeze(-1)
            return pooled_result
        else:
            raise NotImplementedError


def cl_init(cls, config):
    """
    Contrastive learning class init function.
    """
    cls.pooler_type = cls.model_args.pooler_type
    cls.pooler = Pooler(cls.model_args.pooler_type)
    if cls.model_args.pooler_type == "cls":
        cls.mlp = MLPLayer(config)
    cls.sim = Similarity(temp=cls.model_args.temp)
    cls.post_init()


def cl_forward(cls, encoder, input_ids=None, attention_mask=None, token_type_ids=None):
    batch_size = input_ids.size(0)
    # Number of sentences in one instance
    # 2: pair instance; 3: pair instance with a hard negative
    num_sent = input_ids.size(1)

    # Flatten input for encoding
    input_ids = input_ids.view((-1, input_ids.size(-1))) # (bs * num_sent, len)
    attention_mask = attention_mask.view((-1, attention_mask.size(-1))) # (bs * num_sent len)
    if token_type_ids is not None:
        token_type_ids = token_type_ids.view((-1, token_type_ids.size(-1))) # (bs * num_sent, len)

    # Get raw embeddings
    outputs = encoder(
        input_ids,
        attention_mask=attention_mask,
        token_type_ids=token_type_ids,
        output_hidden_states=True if cls.model_args.pooler_type in ['avg_top2', 'avg_first_last'] else False,
        return_dict=True,
    )

    # Pooling
    pooler_output = cls.pooler(attention_mask, outputs)
    pooler_output = pooler_output.view((batch_size, num_sent, pooler_output.size(-1))) # (bs, num_sent, hidden)

    # If using "cls", we add an extra MLP layer
    # (same as BERT's original implementation) over the representation.
    if cls.pooler_type == "cls":
        pooler_output = cls.mlp(pooler_output)

    # Separate representation
    z1, z2 = pooler_output[:,0], pooler_output[:,1]

    # Hard negative
    if num_sent == 3:
        z3 = pooler_output[:, 2]

    # Gather all embeddings if using distributed training
    if dist.is_initialized() and cls.training:
        # Dummy vectors for allgather
        z1_list = [torch.zeros_like(z1) for _ in range(dist.get_world_size())]
        z2_list = [torch.zeros_like(z2) for _ in range(dist.get_world_size())]
        # Allgather
        dist.all_gather(tensor_list=z1_list, tensor=z1.contiguous())
        dist.all_gather(tensor_list=z2_list, tensor=z2.contiguous())

        # Since allgather results do not have gradients, we replace the
        # current process's corresponding embeddings with original tensors
        z1_list[dist.get_rank()] = z1
        z2_list[dist.get_rank()] = z2
        # Get full batch embeddings: (bs x N, hidden)
        z1 = torch.cat(z1_list, 0)
        z2 = torch.cat(z2_list, 0)

    cos_sim = cls.sim(z1.unsqueeze(1), z2.unsqueeze(0))
    # Hard negative
    if num_sent >= 3:
        z1_z3_cos = cls.sim(z1.unsqueeze(1), z3.unsqueeze(0))
        cos_sim = torch.cat([cos_sim, z1_z3_cos], 1)

    labels = torch.arange(cos_sim.size(0)).long().to(cls.device)
    loss_fct = nn.CrossEntropyLoss()

    loss = loss_fct(cos_sim, labels)

    return SequenceClassifierOutput(
        loss=loss,
        logits=cos_sim,
        hidden_states=outputs.hidden_states,
        attentions=outputs.attentions,
    )


def sentemb_forward(cls, encoder, input_ids=None, attention_mask=None, token_type_ids=None):
    outputs = encoder(
        input_ids,
        attention_mask=attention_mask,
        token_type_ids=token_type_ids,
        output_hidden_states=True if cls.pooler_type in ['avg_top2', 'avg_first_last'] else False,
        return_dict=True,
    )

    pooler_output = cls.pooler(attention_mask, outputs)
    if cls.pooler_type == "cls" and not cls.model_args.mlp_only_train:
        pooler_output = cls.mlp(pooler_output)

    return BaseModelOutputWithPoolingAndCrossAttentions(
        pooler_output=pooler_output,
        last_hidden_state=outputs.last_hidden_state,
        hidden_states=outputs.hidden_states,
    )


class BertForCL(BertPreTrainedModel):
    _keys_to_ignore_on_load_missing = [r"position_ids"]

    def __init__(self, config, *model_args, **model_kargs):
        super().__init__(config)
        self.model_args = model_kargs["model_args"]
        self.bert = BertModel(config, add_pooling_layer=False)

        if self.model_args.do_mlm:
            self.lm_head = BertLMPredictionHead(config)

        cl_init(self, config)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, sent_emb=False):
        if sent_emb:
            return sentemb_forward(self, self.bert, input_ids=input_ids, attention_mask=attention_mask,
                                   token_type_ids=token_type_ids)
        else:
            return cl_forward(self, self.bert, input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids)


N_TOPICS, WORDS_PER_TOPIC, SEQ = 16, 12, 12


def sentence(rng, topic):
    """ [CLS] + 10 words (50% from the topic vocabulary, 50% shared filler) + [SEP]; ids 0..3 are specials. """
    words = [4 + topic * WORDS_PER_TOPIC + rng.randint(WORDS_PER_TOPIC) if rng.rand() < 0.5
             else 4 + N_TOPICS * WORDS_PER_TOPIC + rng.randint(20) for _ in range(SEQ - 2)]
    return [1] + words + [2]


@torch.no_grad()
def paraphrase_retrieval(model, rng, n=128):
    model.eval()
    topics = rng.randint(N_TOPICS, size=n)
    a = torch.tensor([sentence(rng, t) for t in topics])
    b = torch.tensor([sentence(rng, t) for t in topics])
    mask = torch.ones_like(a)
    ea = F.normalize(model(input_ids=a, attention_mask=mask, sent_emb=True).pooler_output, dim=-1)
    eb = F.normalize(model(input_ids=b, attention_mask=mask, sent_emb=True).pooler_output, dim=-1)
    nearest = (ea @ eb.T).argmax(1)
    model.train()
    return (torch.tensor(topics)[nearest] == torch.tensor(topics)).float().mean().item()


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    transformers.logging.set_verbosity_error()
    model_args = SimpleNamespace(pooler_type="avg", temp=0.05, mlp_only_train=True, do_mlm=False,
                                 hard_negative_weight=0.0, mlm_weight=0.1)
    config = transformers.BertConfig(vocab_size=4 + N_TOPICS * WORDS_PER_TOPIC + 20, hidden_size=64,
                                     num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                                     max_position_embeddings=32, hidden_dropout_prob=0.1,
                                     attention_probs_dropout_prob=0.1)
    model = BertForCL(config, model_args=model_args)
    num_train_steps, batch_size, learning_rate = 60, 64, 1e-3
    no_decay = ["bias", "LayerNorm.weight"]
    grouped = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.0},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(grouped, lr=learning_rate)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, 0, num_train_steps)

    eval_rng = np.random.RandomState(1)
    acc0 = paraphrase_retrieval(model, np.random.RandomState(1))
    print(f"step 0 paraphrase retrieval acc {acc0:.3f}")
    model.train()
    for step in range(1, num_train_steps + 1):
        sents = torch.tensor([sentence(rng, rng.randint(N_TOPICS)) for _ in range(batch_size)])
        # unsupervised SimCSE: each sentence is its own positive (fed twice)
        input_ids = torch.stack([sents, sents], dim=1)
        attention_mask = torch.ones_like(input_ids)
        out = model(input_ids=input_ids, attention_mask=attention_mask)
        loss = out.loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        model.zero_grad()
        if step % 20 == 0:
            acc = paraphrase_retrieval(model, np.random.RandomState(1))
            print(f"step {step} loss {loss.item():.4f} paraphrase retrieval acc {acc:.3f}")
    print(f"[summary] paraphrase_retrieval_acc first={acc0:.3f} last={acc:.3f} increased={acc > acc0}")


if __name__ == "__main__":
    main()
