# Source: samvanstroud/hepattn, src/hepattn/models/wrapper.py (ModelWrapper), src/hepattn/models/maskformer.py (MaskFormer), src/hepattn/models/task.py (ObjectValidTask, ObjectHitMaskTask), src/hepattn/models/loss.py, src/hepattn/models/matcher.py, commit de6b958f82a4419ae799f9dad8317801daa48c69
# Report: https://github.com/samvanstroud/hepattn/pull/23
# MaskFormer-style track reconstruction: hits are embedded and encoded, learned object
# queries go through decoder layers that attend to the hits, and two tasks read the
# embeddings after every layer: track_valid (does the query hold a track) and
# track_hit_valid (which hits belong to the track, as query-hit dot products). Queries are
# matched to true tracks with the Hungarian algorithm, every task returns its losses for
# every layer, and ModelWrapper sums them into the loss that is optimised (AdamW).
# TrackML events are replaced by synthetic 2D events (curved tracks through the origin plus
# noise hits); the encoder / decoder are reduced to one attention layer each; Lightning's
# automatic optimisation is written out as a loop.
import numpy as np
import scipy.optimize
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim import AdamW


# ---- loss.py ----
def object_ce_loss(pred_logits, true, mask=None, weight=None):  # noqa: ARG001
    losses = F.binary_cross_entropy_with_logits(pred_logits, true, weight=weight)
    return losses.mean()


def object_ce_costs(pred_logits, true):
    costs = F.binary_cross_entropy_with_logits(
        pred_logits.unsqueeze(2).expand(-1, -1, true.shape[1]), true.unsqueeze(1).expand(-1, pred_logits.shape[1], -1), reduction="none"
    )
    return costs


def mask_dice_loss(pred_logits, true, mask=None, weight=None, eps=1e-6):
    pred = pred_logits.sigmoid()
    intersection = pred * true
    num_pred = pred.sum(-1).unsqueeze(-1)
    num_true = true.sum(-1).unsqueeze(-1)
    losses = 1 - (intersection + eps) / (num_pred + num_true + eps)
    if weight is not None:
        losses *= weight
    if mask is not None:
        losses = losses[mask]
    return losses.mean()


def mask_ce_loss(pred_logits, true, mask=None, weight=None):
    losses = F.binary_cross_entropy_with_logits(pred_logits, true, weight=weight, reduction="none")
    if mask is not None:
        losses = losses[mask]
    return losses.mean()


def mask_ce_costs(pred_logits, true):
    pred_logits = torch.clamp(pred_logits, -100, 100)
    pos = F.binary_cross_entropy_with_logits(pred_logits, torch.ones_like(pred_logits), reduction="none")
    neg = F.binary_cross_entropy_with_logits(pred_logits, torch.zeros_like(pred_logits), reduction="none")
    costs = torch.einsum("bnc,bmc->bnm", pos, true) + torch.einsum("bnc,bmc->bnm", neg, (1 - true))
    return costs


cost_fns = {"object_ce": object_ce_costs, "mask_ce": mask_ce_costs}
loss_fns = {"object_ce": object_ce_loss, "mask_ce": mask_ce_loss, "mask_dice": mask_dice_loss}

COST_PAD_VALUE = 1e4


class Dense(nn.Module):
    def __init__(self, input_size, output_size, hidden_layers=None):
        super().__init__()
        hidden_layers = hidden_layers or [2 * input_size]
        sizes = [input_size] + hidden_layers + [output_size]
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(nn.SiLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


# ---- task.py ----
class ObjectValidTask(nn.Module):
    def __init__(self, name, input_object, output_object, target_object, losses, costs, dim, null_weight=1.0):
        super().__init__()
        self.name = name
        self.input_object = input_object
        self.output_object = output_object
        self.target_object = target_object
        self.losses = losses
        self.costs = costs
        self.dim = dim
        self.null_weight = null_weight
        self.inputs = [input_object + "_embed"]
        self.outputs = [output_object + "_logit"]
        self.net = Dense(dim, 1)

    def forward(self, x: dict[str, Tensor]) -> dict[str, Tensor]:
        x_logit = self.net(x[self.input_object + "_embed"])
        return {self.output_object + "_logit": x_logit.squeeze(-1)}

    def cost(self, outputs, targets):
        output = outputs[self.output_object + "_logit"].detach().to(torch.float32)
        target = targets[self.target_object + "_valid"].to(torch.float32)
        costs = {}
        for cost_fn, cost_weight in self.costs.items():
            costs[cost_fn] = cost_weight * cost_fns[cost_fn](output, target)
            costs[cost_fn][~targets[self.target_object + "_valid"].unsqueeze(-2).expand_as(costs[cost_fn])] = COST_PAD_VALUE
        return costs

    def loss(self, outputs, targets):
        losses = {}
        output = outputs[self.output_object + "_logit"]
        target = targets[self.target_object + "_valid"].type_as(output)
        weight = target + self.null_weight * (1 - target)
        for loss_fn, loss_weight in self.losses.items():
            losses[loss_fn] = loss_weight * loss_fns[loss_fn](output, target, mask=None, weight=weight)
        return losses


class ObjectHitMaskTask(nn.Module):
    def __init__(self, name, input_hit, input_object, output_object, target_object, losses, costs, dim, null_weight=1.0):
        super().__init__()
        self.name = name
        self.input_hit = input_hit
        self.input_object = input_object
        self.output_object = output_object
        self.target_object = target_object
        self.losses = losses
        self.costs = costs
        self.dim = dim
        self.null_weight = null_weight
        self.output_object_hit = output_object + "_" + input_hit
        self.target_object_hit = target_object + "_" + input_hit
        self.inputs = [input_object + "_embed", input_hit + "_embed"]
        self.outputs = [self.output_object_hit + "_logit"]
        self.hit_net = Dense(dim, dim)
        self.object_net = Dense(dim, dim)

    def forward(self, x: dict[str, Tensor]) -> dict[str, Tensor]:
        x_object = self.object_net(x[self.input_object + "_embed"])
        x_hit = x[self.input_hit + "_embed"]
        object_hit_logit = torch.einsum("bnc,bmc->bnm", x_object, x_hit)
        return {self.output_object_hit + "_logit": object_hit_logit}

    def cost(self, outputs, targets):
        output = outputs[self.output_object_hit + "_logit"].detach().to(torch.float32)
        target = targets[self.target_object_hit + "_valid"].to(torch.float32)
        costs = {}
        for cost_fn, cost_weight in self.costs.items():
            costs[cost_fn] = cost_weight * cost_fns[cost_fn](output, target)
            costs[cost_fn][~targets[self.target_object + "_valid"].unsqueeze(-2).expand_as(costs[cost_fn])] = COST_PAD_VALUE
        return costs

    def loss(self, outputs, targets):
        output = outputs[self.output_object_hit + "_logit"]
        target = targets[self.target_object_hit + "_valid"].type_as(output)
        hit_pad = targets[self.input_hit + "_valid"].unsqueeze(-2).expand_as(target)
        object_pad = targets[self.target_object + "_valid"].unsqueeze(-1).expand_as(target)
        object_hit_mask = object_pad & hit_pad
        weight = target + self.null_weight * (1 - target)
        losses = {}
        for loss_fn, loss_weight in self.losses.items():
            loss = loss_fns[loss_fn](output, target, mask=object_hit_mask, weight=weight)
            losses[loss_fn] = loss_weight * loss
        return losses


# ---- matcher.py ----
class Matcher(nn.Module):
    def forward(self, costs):
        pred_idxs = []
        for cost in costs.cpu().numpy():
            _, col_idx = scipy.optimize.linear_sum_assignment(cost.T)
            pred_idxs.append(col_idx)
        return torch.from_numpy(np.stack(pred_idxs)).long()


# ---- decoder.py / maskformer.py (reduced) ----
class MaskFormerDecoderLayer(nn.Module):
    def __init__(self, dim, num_heads=4):
        super().__init__()
        self.q_ca = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.q_sa = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.q_dense = Dense(dim, dim)
        self.kv_ca = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(4)])

    def forward(self, q, kv):
        q = q + self.q_ca(self.norms[0](q), kv, kv, need_weights=False)[0]
        qn = self.norms[1](q)
        q = q + self.q_sa(qn, qn, qn, need_weights=False)[0]
        q = q + self.q_dense(self.norms[2](q))
        kv = kv + self.kv_ca(self.norms[3](kv), q, q, need_weights=False)[0]
        return q, kv


class MaskFormer(nn.Module):
    def __init__(self, input_dim, dim, num_decoder_layers, tasks, num_queries, matcher):
        super().__init__()
        self.input_net = Dense(input_dim, dim)
        self.encoder = nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.decoder_layers = nn.ModuleList([MaskFormerDecoderLayer(dim) for _ in range(num_decoder_layers)])
        self.tasks = tasks
        self.matcher = matcher
        self.num_queries = num_queries
        self.query_initial = nn.Parameter(torch.randn(num_queries, dim))

    def forward(self, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        x = {}
        x["hit_embed"] = self.encoder(self.input_net(inputs["hit_features"]))
        x["hit_valid"] = inputs["hit_valid"]
        batch_size = x["hit_valid"].shape[0]
        x["query_embed"] = self.query_initial.expand(batch_size, -1, -1)

        outputs = {}
        for layer_index, decoder_layer in enumerate(self.decoder_layers):
            outputs[f"layer_{layer_index}"] = {}
            for task in self.tasks:
                outputs[f"layer_{layer_index}"][task.name] = task(x)
            x["query_embed"], x["hit_embed"] = decoder_layer(x["query_embed"], x["hit_embed"])

        outputs["final"] = {}
        for task in self.tasks:
            outputs["final"][task.name] = task(x)
        return outputs

    def loss(self, outputs: dict, targets: dict) -> dict:
        costs = {}
        for layer_name, layer_outputs in outputs.items():
            layer_costs = None
            for task in self.tasks:
                task_costs = task.cost(layer_outputs[task.name], targets)
                for cost in task_costs.values():
                    if layer_costs is not None:
                        layer_costs += cost
                    else:
                        layer_costs = cost
            costs[layer_name] = layer_costs.detach()

        for layer_name in outputs:
            pred_idxs = self.matcher(costs[layer_name])
            batch_idxs = torch.arange(costs[layer_name].shape[0]).unsqueeze(1).expand(-1, self.num_queries)
            for task in self.tasks:
                for output_name in task.outputs:
                    outputs[layer_name][task.name][output_name] = outputs[layer_name][task.name][output_name][batch_idxs, pred_idxs]

        losses = {}
        for layer_name in outputs:
            losses[layer_name] = {}
            for task in self.tasks:
                losses[layer_name][task.name] = task.loss(outputs[layer_name][task.name], targets)
        return losses


# ---- wrapper.py ----
class ModelWrapper(nn.Module):
    def __init__(self, name, model, lrs_config):
        super().__init__()
        self.name = name
        self.model = model
        self.lrs_config = lrs_config
        self.logged = {}

    def log(self, key, value, sync_dist=False):
        self.logged.setdefault(key, []).append(float(value.detach()))

    def log_losses(self, losses, stage):
        total_loss = 0

        # Log the losses from each task from each layer
        for layer_name, layer_losses in losses.items():
            for task_name, task_losses in layer_losses.items():
                for loss_name, loss_value in task_losses.items():
                    self.log(f"{stage}/{layer_name}_{task_name}_{loss_name}", loss_value, sync_dist=True)
                total_loss += loss_value

        # Log the total loss
        self.log(f"{stage}/loss", total_loss, sync_dist=True)
        return total_loss

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        outputs = self.model(inputs)
        losses = self.model.loss(outputs, targets)
        total_loss = self.log_losses(losses, "train")
        return total_loss

    def validation_step(self, batch):
        inputs, targets = batch
        outputs = self.model(inputs)
        losses = self.model.loss(outputs, targets)
        total_loss = self.log_losses(losses, "val")
        return total_loss, outputs

    def configure_optimizers(self):
        return AdamW(self.model.parameters(), lr=self.lrs_config["initial"], weight_decay=self.lrs_config["weight_decay"])


def make_events(n, rng, num_queries=6, hits_per_track=6, num_noise=6):
    num_hits = num_queries * hits_per_track + num_noise
    feats = np.zeros((n, num_hits, 4), np.float32)
    hit_valid = np.zeros((n, num_hits), bool)
    particle_valid = np.zeros((n, num_queries), bool)
    particle_hit = np.zeros((n, num_queries, num_hits), bool)
    radii = np.arange(1, hits_per_track + 1, dtype=np.float32)
    for e in range(n):
        ntrk = rng.randint(1, 5)
        k = 0
        for t in range(ntrk):
            phi0, curv = rng.uniform(-np.pi, np.pi), rng.uniform(-0.15, 0.15)
            phi = phi0 + curv * radii + rng.normal(0, 0.01, size=hits_per_track)
            for r, p in zip(radii, phi):
                feats[e, k] = [r * np.cos(p), r * np.sin(p), r, 0.0]
                hit_valid[e, k] = True
                particle_hit[e, t, k] = True
                k += 1
            particle_valid[e, t] = True
        for _ in range(num_noise):
            r, p = rng.uniform(1, hits_per_track), rng.uniform(-np.pi, np.pi)
            feats[e, k] = [r * np.cos(p), r * np.sin(p), r, 0.0]
            hit_valid[e, k] = True
            k += 1
        order = rng.permutation(k)
        feats[e, :k] = feats[e, order]
        particle_hit[e, :, :k] = particle_hit[e][:, order]
    feats[..., 3] = np.arctan2(feats[..., 1], feats[..., 0])
    # unused hit slots stay in the event as hits at the origin that belong to no track
    inputs = {"hit_features": torch.from_numpy(feats / np.array([6, 6, 6, np.pi], np.float32)),
              "hit_valid": torch.ones(n, num_hits, dtype=torch.bool)}
    targets = {"hit_valid": torch.ones(n, num_hits, dtype=torch.bool),
               "particle_valid": torch.from_numpy(particle_valid),
               "particle_hit_valid": torch.from_numpy(particle_hit)}
    return inputs, targets


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    dim = 32
    tasks = nn.ModuleList([
        ObjectValidTask("track_valid", "query", "track", "particle",
                        losses={"object_ce": 1.0}, costs={"object_ce": 1.0}, dim=dim),
        ObjectHitMaskTask("track_hit_valid", "hit", "query", "track", "particle",
                          losses={"mask_ce": 100.0, "mask_dice": 2.0}, costs={"mask_ce": 100.0}, dim=dim),
    ])
    model = MaskFormer(input_dim=4, dim=dim, num_decoder_layers=2, tasks=tasks, num_queries=6, matcher=Matcher())
    wrapper = ModelWrapper("tracking", model, {"initial": 1e-3, "weight_decay": 1e-5})
    opt = wrapper.configure_optimizers()

    train_inputs, train_targets = make_events(256, rng)
    val_inputs, val_targets = make_events(64, rng)
    batch_size = 32
    for epoch in range(10):
        wrapper.logged = {}
        perm = torch.randperm(256)
        for batch_idx in range(256 // batch_size):
            idx = perm[batch_idx * batch_size:(batch_idx + 1) * batch_size]
            batch = ({k: v[idx] for k, v in train_inputs.items()}, {k: v[idx] for k, v in train_targets.items()})
            loss = wrapper.training_step(batch, batch_idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
        tr = {k: np.mean(v) for k, v in wrapper.logged.items()}
        comp = sum(v for k, v in tr.items() if k != "train/loss")

        wrapper.logged = {}
        with torch.no_grad():
            _, outputs = wrapper.validation_step((val_inputs, val_targets))
        va = {k: np.mean(v) for k, v in wrapper.logged.items()}
        pred = outputs["final"]["track_hit_valid"]["track_hit_logit"].sigmoid() >= 0.5
        true = val_targets["particle_hit_valid"]
        valid = val_targets["particle_valid"].unsqueeze(-1)
        tp = (pred & true & valid).sum().item()
        eff = tp / max(1, (true & valid).sum().item())
        pur = tp / max(1, (pred & valid).sum().item())
        print(f"epoch {epoch}: train loss (logged) {tr['train/loss']:.3f} sum of logged terms {comp:.3f} | "
              f"val final mask_ce {va['val/final_track_hit_valid_mask_ce']:.3f} mask_dice {va['val/final_track_hit_valid_mask_dice']:.3f} "
              f"object_ce {va['val/final_track_valid_object_ce']:.3f} | hit eff {eff:.3f} purity {pur:.3f}")


if __name__ == "__main__":
    main()
