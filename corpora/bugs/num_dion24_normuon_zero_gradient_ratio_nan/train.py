# Source: microsoft/dion, dion/normuon.py (NorMuon, normuon_update_batch_async, normuon_normalization), dion/muon.py (muon_update_pre_orthogonalize / _post_orthogonalize, adjust_lr_rms_norm), dion/newton_schulz_triton.py (zeropower_via_newtonschulz5), dion/scalar_opts.py (adamw_update), models/gpt_model.py, train.py (init_optimizer), commit b17a7699f1398b9cba69d760a52c79bc0ee0e420
# Report: https://github.com/microsoft/dion/pull/24
# Pretraining a small GPT with the NorMuon optimizer: transformer matrices go through NorMuon
# (momentum, Newton-Schulz orthogonalisation, neuron-wise normalisation, RMS-matched lr),
# embeddings and lm_head through AdamW, as in train.py's init_optimizer. The output projections
# are zero-initialised (the modded-nanogpt convention used by the report's model). FSDP / DDP,
# all-to-all batching, torch.compile and Triton kernels are dropped (single-device path);
# FineWeb is replaced by synthetic token sequences from a small random bigram language.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from dataclasses import dataclass
from torch import Tensor
from torch.optim import Optimizer


# ----------------------------- models/gpt_model.py -----------------------------
@dataclass
class GPTConfig:
    sequence_len: int = 32
    vocab_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64


class Rotary(torch.nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        self.dim = dim
        self.base = base
        self.inv_freq = None
        self.seq_len_cached = None
        self.cos_cached = None
        self.sin_cached = None

    def init_inv_freq(self):
        self.inv_freq = 1.0 / (
            self.base ** (torch.arange(0, self.dim, 2).float() / self.dim)
        )

    def forward(self, x):
        assert self.inv_freq is not None, "inv_freq not initialized"
        seq_len = x.shape[1]
        if seq_len != self.seq_len_cached:
            self.seq_len_cached = seq_len
            t = torch.arange(seq_len, device=x.device).type_as(self.inv_freq)
            freqs = torch.outer(t, self.inv_freq).to(x.device)
            self.cos_cached = freqs.cos()
            self.sin_cached = freqs.sin()
        return self.cos_cached[None, :, None, :], self.sin_cached[None, :, None, :]


def apply_rotary_emb(x, cos, sin):
    assert x.ndim == 4  # multihead attention
    d = x.shape[3] // 2
    x1 = x[..., :d]
    x2 = x[..., d:]
    y1 = x1 * cos + x2 * sin
    y2 = x1 * (-sin) + x2 * cos
    return torch.cat([y1, y2], 3).type_as(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.head_dim = self.n_embd // self.n_head
        self.c_q = nn.Linear(self.n_embd, self.n_embd, bias=False)
        self.c_k = nn.Linear(self.n_embd, self.n_embd, bias=False)
        self.c_v = nn.Linear(self.n_embd, self.n_embd, bias=False)
        # output projection
        self.c_proj = nn.Linear(self.n_embd, self.n_embd, bias=False)
        self.rotary = Rotary(self.head_dim)

    def forward(self, x):
        B, T, C = x.size()
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim)
        k = self.c_k(x).view(B, T, self.n_head, self.head_dim)
        v = self.c_v(x).view(B, T, self.n_head, self.head_dim)
        cos, sin = self.rotary(q)
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        q, k = F.rms_norm(q, (q.size(-1),)), F.rms_norm(k, (k.size(-1),))
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, -1)
        y = self.c_proj(y)
        return y


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x):
        x = self.c_fc(x)
        x = F.relu(x).square()
        x = self.c_proj(x)
        return x


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = CausalSelfAttention(config)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(F.rms_norm(x, (x.size(-1),)))
        x = x + self.mlp(F.rms_norm(x, (x.size(-1),)))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def init_weights(self):
        self.apply(self._init_weights)
        for block in self.transformer.h:
            torch.nn.init.zeros_(block.attn.c_proj.weight)
            torch.nn.init.zeros_(block.mlp.c_proj.weight)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            fan_out = module.weight.size(0)
            fan_in = module.weight.size(1)
            std = 1.0 / math.sqrt(fan_in) * min(1.0, math.sqrt(fan_out / fan_in))
            torch.nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=1.0)
        elif isinstance(module, Rotary):
            module.init_inv_freq()

    def forward(self, idx, targets):
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            x = block(x)
        x = F.rms_norm(x, (x.size(-1),))
        logits = self.lm_head(x).float()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


# ----------------------------- dion optimizer (single device) -----------------------------
def zeropower_via_newtonschulz5(G: Tensor, epsilon: float = 1e-7):
    ns_consts = [
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ]
    X = G.to(dtype=torch.bfloat16)
    if G.size(-2) > G.size(-1):
        X = X.mT
    # Ensure spectral norm is at most 1
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + epsilon)
    for a, b, c in ns_consts:
        A = X @ X.mT
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def muon_update_pre_orthogonalize(G, M, momentum, nesterov):
    dtype = M[0].dtype
    G = [g.to(dtype=dtype) for g in G]
    # Update momentum with new gradient
    torch._foreach_mul_(M, momentum)
    torch._foreach_add_(M, G)
    if nesterov:
        U = torch._foreach_mul(M, momentum)
        torch._foreach_add_(U, G)
    else:
        U = M
    # Convert to bfloat16 before communication
    U = [u.to(dtype=torch.bfloat16) for u in U]
    return U


def muon_update_post_orthogonalize(X, U, base_lr, adjusted_lr, weight_decay):
    # Apply weight decay
    torch._foreach_mul_(X, 1 - base_lr * weight_decay)
    # Weight update
    U = torch._foreach_mul(U, adjusted_lr)
    torch._foreach_sub_(X, U)


def adjust_lr_rms_norm(lr, param_shape, flatten):
    fan_out, fan_in = param_shape[-2:]
    adjusted_ratio = 0.2 * math.sqrt(max(fan_out, fan_in))
    return lr * adjusted_ratio


def normuon_normalization(U, V, muon_beta2):
    """
    NorMuon normalization step after orthogonalization.
    """
    V_dtype = V[0].dtype
    U = [u.to(dtype=V_dtype) for u in U]
    norm_U = [
        u.norm(p=2, dim=(-2, -1), keepdim=True) for u in U
    ]  # list of ||u||_F, shape [*, 1, 1]

    U_sq = torch._foreach_mul(U, U)  # list of u*u, same shapes as U
    neuron_norms = [u_sq.mean(dim=-1, keepdim=True) for u_sq in U_sq]  # Shape: [*, 1]
    torch._foreach_lerp_(
        V, neuron_norms, 1 - muon_beta2
    )  # Update variance neuron buffer

    denom = torch._foreach_sqrt(V)  # list of sqrt(v)
    torch._foreach_add_(denom, 1e-8)  # denom[i] += 1e-8
    normalized_U = torch._foreach_div(U, denom)  # list of u / denom

    norm_U_new = [
        nu.norm(p=2, dim=(-2, -1), keepdim=True) for nu in normalized_U
    ]  # list of ||normalized_u||_F, shape [*, 1, 1]
    ratio = torch._foreach_div(
        norm_U, norm_U_new
    )  # list of ||u||_F / ||normalized_u||_F, shape [*, 1, 1]
    torch._foreach_mul_(normalized_U, ratio)  # normalized_u[i] *= ratio

    return normalized_U


def normuon_update(X, G, M, V, lr, momentum, muon_beta2, weight_decay, epsilon, nesterov, flatten, adjust_lr):
    """normuon_update_batch_async, single-tensor branch (running on a single device)."""
    U = muon_update_pre_orthogonalize(G=G, M=M, momentum=momentum, nesterov=nesterov)
    U[0] = zeropower_via_newtonschulz5(U[0], epsilon=epsilon)
    # NorMuon normalization
    U = normuon_normalization(U, V=V, muon_beta2=muon_beta2)
    adjusted_lr = adjust_lr_rms_norm(lr, X[0].shape, flatten=flatten) if adjust_lr == "rms_norm" else lr
    # Update model parameters with orthogonalized output
    muon_update_post_orthogonalize(X=X, U=U, base_lr=lr, adjusted_lr=adjusted_lr, weight_decay=weight_decay)


def adamw_update(X, G, M, V, lr, beta1, beta2, weight_decay, step, epsilon):
    M.lerp_(G.to(M.dtype), 1 - beta1)
    V.mul_(beta2).addcmul_(G, G, value=1 - beta2)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    denom = V.sqrt().div_(math.sqrt(bias_correction2)).add_(epsilon)
    adj_lr = lr / bias_correction1
    X.mul_(1 - lr * weight_decay)
    X.addcdiv_(M, denom, value=-adj_lr)


class NorMuon(Optimizer):
    def __init__(self, params, lr=0.01, mu=0.95, muon_beta2=0.95, betas=(0.9, 0.95), weight_decay=0.01,
                 epsilon=1e-8, nesterov=False, adjust_lr="rms_norm", flatten=False):
        defaults = dict(lr=lr, mu=mu, muon_beta2=muon_beta2, beta1=betas[0], beta2=betas[1],
                        weight_decay=weight_decay, algorithm="normuon", step=0, epsilon=epsilon,
                        nesterov=nesterov, flatten=flatten, adjust_lr=adjust_lr)
        super().__init__(params, defaults)

    def _get_or_initialize_state(self, param, algo):
        state = self.state[param]
        if not state:
            state["momentum"] = torch.zeros_like(param)
            if algo == "adamw":
                state["variance"] = torch.zeros_like(param)
            if algo == "normuon":
                state["variance_neuron"] = torch.zeros_like(param[..., 0:1])
        return state

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            group["step"] += 1
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self._get_or_initialize_state(p, group["algorithm"])
                if group["algorithm"] == "normuon":
                    normuon_update([p], [p.grad], [state["momentum"]], [state["variance_neuron"]],
                                   lr=group["lr"], momentum=group["mu"], muon_beta2=group["muon_beta2"],
                                   weight_decay=group["weight_decay"], epsilon=group["epsilon"],
                                   nesterov=group["nesterov"], flatten=group["flatten"],
                                   adjust_lr=group["adjust_lr"])
                else:
                    adamw_update(p, p.grad, state["momentum"], state["variance"], lr=group["lr"],
                                 beta1=group["beta1"], beta2=group["beta2"], weight_decay=group["weight_decay"],
                                 step=group["step"], epsilon=group["epsilon"])


def init_optimizer(model, lr, model_dim, weight_decay, mu):
    # Separate the model's parameters based on their types
    matrix_params = list(model.transformer.h.parameters())
    embedding_params = list(model.transformer.wte.parameters())
    lm_head_params = list(model.lm_head.parameters())
    param_groups = [dict(params=matrix_params)]
    param_groups.append(dict(params=embedding_params, algorithm="adamw", lr=lr, beta1=0.95, beta2=0.98,
                             weight_decay=0))
    param_groups.append(dict(params=lm_head_params, algorithm="adamw", lr=lr / math.sqrt(model_dim),
                             beta1=0.95, beta2=0.98, weight_decay=0))
    return NorMuon(param_groups, lr=lr, mu=mu, muon_beta2=0.95, weight_decay=weight_decay, nesterov=True,
                   adjust_lr="rms_norm")


def make_batches(n_steps, batch_size, seq_len, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    trans = torch.softmax(3 * torch.randn(vocab, vocab, generator=g), dim=-1)
    for _ in range(n_steps):
        tok = torch.randint(0, vocab, (batch_size,), generator=g)
        seq = [tok]
        for _ in range(seq_len):
            tok = torch.multinomial(trans[tok], 1, generator=g).squeeze(1)
            seq.append(tok)
        seq = torch.stack(seq, 1)
        yield seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = GPTConfig()
    model = GPT(config)
    model.init_weights()
    opt = init_optimizer(model, lr=0.02, model_dim=config.n_embd, weight_decay=0.01, mu=0.95)
    for step, (x, y) in enumerate(make_batches(60, 16, config.sequence_len, config.vocab_size)):
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0 or step < 3:
            n_nan = sum(int(torch.isnan(p).any()) for p in model.parameters())
            print(f"step {step}: loss {loss.item():.4f}  parameters containing NaN: {n_nan}")


if __name__ == "__main__":
    main()
