# Report: https://github.com/replicate/cog/issues/1681
# A cog Predictor whose predict() does a short test-time fine-tuning before answering (the
# training loop of the PyTorch forum thread the reporter followed). The decorator on predict()
# stands for the wrapper cog puts around predict(); the model is a small MLP and the request
# data are synthetic.
import torch
import torch.nn as nn


class BasePredictor:
    def setup(self):
        pass


class Predictor(BasePredictor):
    def setup(self):
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        self.loss_fn = nn.MSELoss()

    @torch.inference_mode()
    def predict(self, x_support, y_support, x_query, steps=200):
        w0 = self.model[0].weight.clone()
        for step in range(steps):
            self.optimizer.zero_grad()
            loss = self.loss_fn(self.model(x_support), y_support)
            loss.requires_grad_(True)
            loss.backward()
            self.optimizer.step()
            if step % 50 == 0 or step == steps - 1:
                print(f"step {step} loss {loss.item():.4f}")
        moved = (self.model[0].weight - w0).abs().max().item()
        print(f"max change of first-layer weights: {moved:.6f}")
        return self.model(x_query)


def main():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(8, 1, generator=g)
    x_support = torch.randn(64, 8, generator=g)
    y_support = torch.sin(x_support @ w)
    x_query = torch.randn(32, 8, generator=g)
    y_query = torch.sin(x_query @ w)
    predictor = Predictor()
    predictor.setup()
    pred = predictor.predict(x_support, y_support, x_query)
    print(f"query MSE {((pred - y_query) ** 2).mean().item():.4f}")


if __name__ == "__main__":
    main()
