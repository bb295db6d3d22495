# Source: mead-ml/mead-baseline, layers/eight_mile/pytorch/layers.py (TransformerDiscriminator), mead/api_examples/pretrain_discrim_pytorch.py (gen_vs_discrim, get_accuracy, training loop), commit 5e6e8af1f708717cca10c0fc01861801d23779c2
# Report: https://github.com/mead-ml/mead-baseline/pull/873
# ELECTRA-style pre-training from mead-baseline: a small transformer MLM generator fills masked
# tokens (argmax), a TransformerDiscriminator (sigmoid over a 1-unit projection, BCELoss) labels
# every token of the reconstructed sequence real or replaced, and the total loss is
# gen_loss + gen_loss_scale * discrim_loss under one Adam optimizer. Text and tokenizer are
# replaced by synthetic sequences of 6..32 tokens (arithmetic token chains) padded to 32;
# eight_mile's embeddings/transformer stacks by torch.nn equivalents.
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

PAD, MASK, VOCAB, T = 0, 1, 40, 32


class TransformerDiscriminator(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, layers=1, weight_std=0.02):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.zeros(T, d_model))
        self.weight_std = weight_std
        layer = nn.TransformerEncoderLayer(d_model, num_heads, 2 * d_model, dropout=0.0, batch_first=True)
        self.transformer = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.proj_to_output = nn.Linear(d_model, 1)
        self.apply(self.init_layer_weights)

    def init_layer_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=self.weight_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()

    def forward(self, features):
        x = features['x']
        embedded = self.embeddings(x) + self.pos
        transformer_out = self.transformer(embedded, src_key_padding_mask=(x == PAD))
        binary = self.proj_to_output(transformer_out)
        return torch.sigmoid(binary)

    def create_loss(self):
        return nn.BCELoss()


class TransformerMaskedLanguageModel(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, layers=1):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.randn(T, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, num_heads, 2 * d_model, dropout=0.0, batch_first=True)
        self.transformer = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.output = nn.Linear(d_model, vocab_size)

    def forward(self, features, hidden):
        x = features['x']
        h = self.transformer(self.embeddings(x) + self.pos, src_key_padding_mask=(x == PAD))
        return self.output(h), None

    def create_loss(self):
        ce = nn.CrossEntropyLoss(ignore_index=PAD)
        return lambda logits, labels: ce(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def on_demand_mlm_masking(inputs, labels, mask_value, vocab_size):
    masked_indices = (torch.rand(labels.shape) < 0.15) & (inputs != PAD)
    labels[~masked_indices] = PAD
    inputs = inputs.clone()
    inputs[masked_indices] = mask_value
    return inputs, labels, masked_indices


def best_from(x_preds):
    return x_preds.argmax(axis=-1)


def get_accuracy(preds, true_or_fake):
    nz_preds = preds.view(-1)
    nz_true_or_fake = true_or_fake.view(-1)
    preds_true = (nz_preds > 0.5).squeeze().to(nz_true_or_fake.dtype)
    num = torch.sum((nz_true_or_fake == preds_true).to(torch.float32))
    denom = nz_true_or_fake.nelement()
    return (num / denom).item()


def gen_vs_discrim(x, y, gen_model, gen_loss_fn, discrim_model, discrim_loss_fn, mask_value, vocab_size):
    inputs = x
    labels = y.clone()
    noised_x, labels, masked_indices = on_demand_mlm_masking(inputs, labels, mask_value, vocab_size)
    logits = gen_model({'x': noised_x}, None)[0]
    gen_loss_step = gen_loss_fn(logits, labels)
    recon_labels = best_from(logits)
    recon_labels[~masked_indices] = noised_x[~masked_indices]
    true_or_fake = ~masked_indices
    true_or_fake[recon_labels == y] = True
    true_or_fake = true_or_fake.to(torch.float32).view(-1)
    logits = discrim_model({'x': recon_labels})
    discrim_loss_step = discrim_loss_fn(logits.view(-1), true_or_fake.view(-1))
    acc = get_accuracy(logits, true_or_fake)
    return gen_loss_step, discrim_loss_step, acc, (logits.view(-1), true_or_fake, (recon_labels != PAD).view(-1))


def make_batch(rng, n):
    x = np.zeros((n, T), dtype=np.int64)
    for i in range(n):
        length = rng.randint(6, T + 1)
        start, step = rng.randint(2, VOCAB), rng.randint(1, 4)
        x[i, :length] = 2 + (start - 2 + step * np.arange(length)) % (VOCAB - 2)
    x = torch.as_tensor(x)
    return x, x.clone()


def main():
    rng = np.random.RandomState(0)
    gen_model = TransformerMaskedLanguageModel(VOCAB, 32, 2)
    discrim_model = TransformerDiscriminator(VOCAB, 32, 2)
    gen_loss_fn = gen_model.create_loss()
    discrim_loss_fn = discrim_model.create_loss()
    optimizer = torch.optim.Adam(list(gen_model.parameters()) + list(discrim_model.parameters()), lr=1e-3)
    gen_loss_scale = 50.0
    for step in range(1, 301):
        x, y = make_batch(rng, 32)
        gen_loss_step, discrim_loss_step, acc, _ = gen_vs_discrim(x, y, gen_model, gen_loss_fn, discrim_model,
                                                                 discrim_loss_fn, MASK, VOCAB)
        total_loss_step = gen_loss_step + gen_loss_scale * discrim_loss_step
        optimizer.zero_grad()
        total_loss_step.backward()
        torch.nn.utils.clip_grad_norm_(list(gen_model.parameters()) + list(discrim_model.parameters()), 1.0)
        optimizer.step()
        if step % 60 == 0:
            print(f"step {step}: Loss g={gen_loss_step.item():.4f}, d={discrim_loss_step.item():.4f}, Per token acc={acc:.4f}")
    # held-out evaluation on real (non-pad) tokens only
    eval_rng = np.random.RandomState(1)
    torch.manual_seed(1)
    with torch.no_grad():
        tp = fn = correct = count = 0.0
        for _ in range(10):
            x, y = make_batch(eval_rng, 64)
            _, _, _, (p, tf, nonpad) = gen_vs_discrim(x, y, gen_model, gen_loss_fn, discrim_model,
                                                     discrim_loss_fn, MASK, VOCAB)
            pred_real = p > 0.5
            fake = (tf == 0) & nonpad
            tp += (fake & ~pred_real).sum().item()
            fn += (fake & pred_real).sum().item()
            correct += ((pred_real == tf.bool()) & nonpad).sum().item()
            count += nonpad.sum().item()
    print(f"eval: discriminator accuracy on real tokens {correct / count:.4f}, "
          f"replaced-token recall {tp / max(tp + fn, 1):.4f} ({int(tp + fn)} replaced tokens)")


if __name__ == "__main__":
    main()
