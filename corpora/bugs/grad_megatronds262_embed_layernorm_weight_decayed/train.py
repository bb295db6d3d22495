# Source: bigscience-workshop/Megatron-DeepSpeed, megatron/optimizer/__init__.py (_get_params_for_weight_decay_optimization, get_megatron_optimizer), megatron/mpu/layers.py (VocabParallelEmbedding), megatron/model/fused_layer_norm.py (MixedFusedLayerNorm), commit dd06ea32e014d8db6cdaf5e6839071d6523ca83c
# Report: https://github.com/bigscience-workshop/Megatron-DeepSpeed/pull/262
# BLOOM-style GPT pretraining in Megatron-DeepSpeed with --embed-layernorm: the word embedding is
# followed by a LayerNorm, every transformer LayerNorm is Megatron's MixedFusedLayerNorm, and the
# optimizer's param groups put LayerNorm parameters and biases in a weight_decay=0 group.
# Tensor/pipeline parallelism, DeepSpeed, fp16/bf16 and the fused CUDA kernels are removed
# (MixedFusedLayerNorm computes F.layer_norm, apex FusedAdam is AdamW); a 2-layer GPT learns
# sequences from a random order-1 Markov chain over 64 tokens.
import math
import numbers

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn import init
from torch.nn.parameter import Parameter

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class Args:
    embed_layernorm = True
    use_bnb_optimizer = False
    optimizer = "adam"
    lr = 3e-3
    weight_decay = 0.1
    adam_beta1 = 0.9
    adam_beta2 = 0.95
    adam_eps = 1e-8
    hidden_size = 64
    num_attention_heads = 4
    num_layers = 2
    seq_length = 24
    padded_vocab_size = 64
    micro_batch_size = 16
    train_iters = 400


_ARGS = Args()


def get_args():
    return _ARGS


class MixedFusedLayerNorm(torch.nn.Module):

  def __init__(self, normalized_shape, eps=1e-5):
        super(MixedFusedLayerNorm, self).__init__()

        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = torch.Size(normalized_shape)
        self.eps = eps
        self.weight = Parameter(torch.Tensor(*normalized_shape))
        self.bias = Parameter(torch.Tensor(*normalized_shape))
        self.reset_parameters()


  def reset_parameters(self):

    init.ones_(self.weight)
    init.zeros_(self.bias)


  def forward(self, input):

    return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


LayerNorm = MixedFusedLayerNorm


class VocabParallelEmbedding(torch.nn.Module):

    def __init__(self, num_embeddings, embedding_dim,
                 init_method=init.xavier_normal_):
        super(VocabParallelEmbedding, self).__init__()
        # Keep the input dimensions.
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        # Set the defaults for compatibility.
        self.padding_idx = None
        self.max_norm = None
        self.norm_type = 2.
        self.scale_grad_by_freq = False
        self.sparse = False
        self._weight = None

        # Allocate weights and initialize.
        args = get_args()

        # only the first stage embedding runs this class' forward. The head's embedding does its own
        # thing, so don't waste memory allocating LN weights.
        if (args.use_bnb_optimizer or args.embed_layernorm):
            self.norm = torch.nn.LayerNorm(embedding_dim)

        self.weight = Parameter(torch.empty(self.num_embeddings, self.embedding_dim))
        init_method(self.weight)

    def forward(self, input_):
        if torch.any(input_ >= self.num_embeddings):
            raise ValueError(f"There is an input id in the input that is greater than the highest possible input id.\nInput: {input_}\nnum_embeddings: {self.num_embeddings}")

        masked_input = input_

        # Get the embeddings.
        output = F.embedding(masked_input, self.weight,
                             self.padding_idx, self.max_norm,
                             self.norm_type, self.scale_grad_by_freq,
                             self.sparse)

        if hasattr(self, 'norm'):
            output = self.norm(output)

        return output


class ParallelTransformerLayer(torch.nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.input_layernorm = LayerNorm(h)
        self.query_key_value = torch.nn.Linear(h, 3 * h)
        self.dense = torch.nn.Linear(h, h)
        self.post_attention_layernorm = LayerNorm(h)
        self.dense_h_to_4h = torch.nn.Linear(h, 4 * h)
        self.dense_4h_to_h = torch.nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.query_key_value(self.input_layernorm(x)).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.dense(att.transpose(1, 2).reshape(b, s, h))
        x = x + self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(self.post_attention_layernorm(x))))
        return x


class GPTModel(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(args.padded_vocab_size, args.hidden_size)
        self.position_embeddings = torch.nn.Embedding(args.seq_length, args.hidden_size)
        self.layers = torch.nn.ModuleList(
            [ParallelTransformerLayer(args.hidden_size, args.num_attention_heads) for _ in range(args.num_layers)])
        self.final_layernorm = LayerNorm(args.hidden_size)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1])
        x = self.word_embeddings(tokens) + self.position_embeddings(pos)
        for layer in self.layers:
            x = layer(x)
        return F.linear(self.final_layernorm(x), self.word_embeddings.weight)


def _get_params_for_weight_decay_optimization(modules):
    """Divide params into with-weight-decay and without-weight-decay groups.
    Layernorms and baises will have no weight decay but the rest will.
    """

    weight_decay_params = {'params': []}
    no_weight_decay_params = {'params': [], 'weight_decay': 0.0}
    for module in modules:
        for module_ in module.modules():
            if isinstance(module_, LayerNorm):
                no_weight_decay_params['params'].extend(
                    [p for p in list(module_._parameters.values())
                     if p is not None])
            else:
                weight_decay_params['params'].extend(
                    [p for n, p in list(module_._parameters.items())
                     if p is not None and n != 'bias'])
                no_weight_decay_params['params'].extend(
                    [p for n, p in list(module_._parameters.items())
                     if p is not None and n == 'bias'])

    # XXX: temp hack to workaround the crash in apex FusedAdam's multi_tensor_applier
    #
    # it crashes when the param count is larger than a certain size which we hit at 200B over 80
    # A100 gpus - I think around 2.7B per gpu, so halving it works around the issue
    param_count = len(weight_decay_params['params'])
    first_half = weight_decay_params['params'][:param_count // 2]
    second_half = weight_decay_params['params'][param_count // 2:]

    first_half =  { 'params': first_half }
    second_half = { 'params': second_half }

    return first_half, second_half, no_weight_decay_params


def get_megatron_optimizer(model):
    args = get_args()

    # Base optimizer.
    param_groups = _get_params_for_weight_decay_optimization(model)
    if args.optimizer == 'adam':
        optimizer = torch.optim.AdamW(param_groups,
                                      lr=args.lr,
                                      weight_decay=args.weight_decay,
                                      betas=(args.adam_beta1, args.adam_beta2),
                                      eps=args.adam_eps)
    return optimizer


def markov_batches(args, n_batches, seed):
    g = torch.Generator().manual_seed(123)
    logits = torch.randn(args.padded_vocab_size, args.padded_vocab_size, generator=g) * 2.5
    probs = logits.softmax(-1)
    gs = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        seq = [torch.randint(0, args.padded_vocab_size, (args.micro_batch_size,), generator=gs)]
        for _ in range(args.seq_length):
            seq.append(torch.multinomial(probs[seq[-1]], 1, generator=gs).squeeze(1))
        out.append(torch.stack(seq, 1))
    return out


def main():
    args = get_args()
    model = [GPTModel(args)]
    optimizer = get_megatron_optimizer(model)
    train = markov_batches(args, 100, seed=1)
    valid = markov_batches(args, 8, seed=2)
    norm = model[0].word_embeddings.norm

    for iteration in range(1, args.train_iters + 1):
        batch = train[iteration % len(train)]
        tokens, labels = batch[:, :-1], batch[:, 1:]
        loss = F.cross_entropy(model[0](tokens).reshape(-1, args.padded_vocab_size), labels.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model[0].parameters(), 1.0)
        optimizer.step()
        if iteration % 50 == 0:
            with torch.no_grad():
                vl = np.mean([F.cross_entropy(model[0](b[:, :-1]).reshape(-1, args.padded_vocab_size),
                                              b[:, 1:].reshape(-1)).item() for b in valid])
            print(f"iteration {iteration}: lm loss {loss.item():.4f}  valid loss {vl:.4f} ppl {math.exp(vl):.3f}  "
                  f"embed norm weight mean {norm.weight.mean().item():.4f}  "
                  f"final norm weight mean {model[0].final_layernorm.weight.mean().item():.4f}")


if __name__ == "__main__":
    main()
