# Source: catalyst-team/catalyst, catalyst/contrib/modules/lama.py, commit 253b68454177443f7a27e82628569be242b391eb
# Report: https://github.com/catalyst-team/catalyst/pull/285
# LAMA pooling actor (NeurIPS-18 prosthetics solution): an observation history [batch, history_len,
# features] is pooled over time by several temporal poolings and a small head predicts the action.
# Synthetic task: one step of the history carries a marker feature; the action is the marked step's
# payload features, so the pooling has to find that step.
import torch
from torch import nn


def outer_init(layer: nn.Module) -> None:
    if isinstance(layer, (nn.Linear, nn.Conv1d)):
        v = 3e-3
        nn.init.uniform_(layer.weight.data, -v, v)
        if layer.bias is not None:
            nn.init.uniform_(layer.bias.data, -v, v)


class TemporalLastPooling(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor = None):
        x_out = x[:, -1:, :]
        return x_out


class TemporalAvgPooling(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor = None):
        if mask is None:
            x_out = x.mean(1, keepdim=True)
        else:
            x_ = torch.sum(x * mask.float(), dim=1, keepdim=True)
            mask_ = torch.sum(mask.float(), dim=1, keepdim=True)
            x_out = x_ / mask_
        return x_out


class TemporalAttentionPooling(nn.Module):
    name2activation = {
        "softmax": nn.Softmax(dim=1),
        "tanh": nn.Tanh(),
        "sigmoid": nn.Sigmoid()
    }

    def __init__(self, features_in, activation=None, kernel_size=1, **params):
        super().__init__()
        self.features_in = features_in
        activation = activation or "softmax"

        self.attention_pooling = nn.Sequential(
            nn.Conv1d(
                in_channels=features_in,
                out_channels=1,
                kernel_size=kernel_size,
                **params
            ),
            TemporalAttentionPooling.name2activation[activation]
        )
        self.attention_pooling.apply(outer_init)

    def forward(self, x: torch.Tensor, mask: torch.Tensor = None):
        """
        :param x: [batch_size, history_len, feature_size]
        :return:
        """
        batch_size, history_len, feature_size = x.shape

        x = x.view(batch_size, history_len, -1)
        x_a = x.transpose(1, 2)
        x_attn = (self.attention_pooling(x_a) * x_a).transpose(1, 2)
        x_attn = x_attn.sum(1, keepdim=True)

        return x_attn


def get_pooling(key, features_in, **params):
    key_ = key.split("_", 1)[0]

    if key_ == "last":
        return TemporalLastPooling()
    elif key_ == "avg":
        layer = TemporalAvgPooling()
    elif key_ in ["softmax", "tanh", "sigmoid"]:
        layer = TemporalAttentionPooling(
            features_in=features_in, activation=key_, **params)
    else:
        raise NotImplementedError()

    return layer


class LamaPooling(nn.Module):
    def __init__(self, features_in, groups=None):
        super().__init__()
        self.features_in = features_in
        self.groups = groups \
            or ["last", "avg", "softmax"]
        self.features_out = features_in * len(self.groups)

        groups = {}
        for key in self.groups:
            groups[key] = get_pooling(key, self.features_in)

        self.groups = nn.ModuleDict(groups)

    def forward(self, x: torch.Tensor, mask: torch.Tensor = None):
        batch_size, history_len, feature_size = x.shape

        x_ = []
        for pooling_fn in self.groups.values():
            features_ = pooling_fn(x, mask)
            x_.append(features_)
        x = torch.cat(x_, dim=1)
        x = x.view(batch_size, -1)

        return x


class LamaActor(nn.Module):
    def __init__(self, features_in, hidden, action_size):
        super().__init__()
        self.observation_net = nn.Sequential(nn.Linear(features_in, hidden), nn.ReLU())
        self.aggregation_net = LamaPooling(hidden)
        self.policy_net = nn.Sequential(
            nn.Linear(self.aggregation_net.features_out, hidden), nn.ReLU(),
            nn.Linear(hidden, action_size))

    def forward(self, observation):
        x = self.observation_net(observation)
        x = self.aggregation_net(x)
        return self.policy_net(x)


def make_batch(g, batch_size, history_len=8, payload=4, noise=6):
    obs = torch.randn(batch_size, history_len, 1 + payload + noise, generator=g)
    obs[:, :, 0] = 0.0
    marked = torch.randint(0, history_len - 1, (batch_size,), generator=g)
    obs[torch.arange(batch_size), marked, 0] = 1.0
    action = obs[torch.arange(batch_size), marked, 1:1 + payload]
    return obs, action


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    actor = LamaActor(features_in=11, hidden=32, action_size=4)
    optimizer = torch.optim.Adam(actor.parameters(), lr=3e-3)
    val_obs, val_action = make_batch(g, 1024)
    for step in range(401):
        obs, action = make_batch(g, 128)
        loss = nn.functional.mse_loss(actor(obs), action)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            with torch.no_grad():
                val_loss = nn.functional.mse_loss(actor(val_obs), val_action).item()
                pool = actor.aggregation_net.groups["softmax"]
                h = actor.observation_net(val_obs).transpose(1, 2)
                weights = pool.attention_pooling(h).squeeze(1)
                top = (weights.argmax(1) == val_obs[:, :, 0].argmax(1)).float().mean().item()
            print(f"step {step} train mse {loss.item():.4f} val mse {val_loss:.4f} "
                  f"attention weight min {weights.min().item():.3f} max {weights.max().item():.3f} "
                  f"row sum {weights.sum(1).mean().item():.2f} top-weight on marked step {top:.3f}")


if __name__ == "__main__":
    main()
