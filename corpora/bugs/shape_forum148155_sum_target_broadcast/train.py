# Report: https://discuss.pytorch.org/t/output-of-the-model-depends-on-the-shape-of-the-weights-tensor/148155
# "I want to train the model to sum the three inputs": a bias-free Linear(3, 1) fitted with
# MSELoss, SGD and ReduceLROnPlateau, the weights initialised to zeros as in the question.
import torch
from torch.nn import Sequential as Seq, Linear as Lin
from torch.optim.lr_scheduler import ReduceLROnPlateau


def main():
    torch.manual_seed(0)
    X = torch.rand((1024, 3))
    y = (X[:,0] + X[:,1] + X[:,2])
    m = Seq(Lin(3, 1, bias=False))

    m[0].weight = torch.nn.parameter.Parameter(torch.tensor([[0, 0, 0]], dtype=torch.float))

    optim = torch.optim.SGD(m.parameters(), lr=10e-2)
    scheduler = ReduceLROnPlateau(optim, 'min', factor=0.5, patience=20)
    mse = torch.nn.MSELoss()
    for epoch in range(500):
        optim.zero_grad()
        out = m(X)
        loss = mse(out, y)
        loss.backward()
        optim.step()
        if epoch % 50 == 0:
            print(epoch, loss.item())
        scheduler.step(loss)
    with torch.no_grad():
        err = (m(X)[:, 0] - y).abs().mean().item()
    print("learned weights", [round(w, 4) for w in m[0].weight[0].tolist()], "mean abs error %.4f" % err)


if __name__ == "__main__":
    main()
