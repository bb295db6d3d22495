# Source: APPFL/APPFL, src/appfl/algorithm/legacy/client_optimizer.py (ClientOptim.update), commit 177f47903ef6f5d6df425d0499a8e5b2702fed6b
# Report: https://github.com/APPFL/APPFL/issues/197
import copy
import time

import numpy as np
import torch
from torch.optim import *  # noqa: F401,F403


class Config:
    device = "cpu"
    validation = True
    save_model_state_dict = False


class BaseClient:
    def __init__(self, id, weight, model, loss_fn, dataloader, cfg, outfile, test_dataloader, metric):
        self.id, self.weight, self.model, self.loss_fn = id, weight, model, loss_fn
        self.dataloader, self.cfg, self.outfile = dataloader, cfg, outfile
        self.test_dataloader, self.metric = test_dataloader, metric
        self.round = 0

    def client_log_title(self):
        print("%10s %10s %12s %12s %12s %12s" % ("Round", "LocalEpoch", "PerIter[s]", "TrainLoss", "TrainAccu", "TestLoss"))

    def client_log_content(self, t, per_iter_time, train_loss, train_accuracy, test_loss, test_accuracy):
        print("%10s %10s %12.2f %12.6g %12.4f %12.6g" % (self.round, t, per_iter_time, train_loss, train_accuracy, test_loss))

    def client_validation(self):
        self.model.eval()
        loss, n = 0.0, 0
        with torch.no_grad():
            for data, target in self.test_dataloader:
                loss += self.loss_fn(self.model(data), target).item() * len(target)
                n += len(target)
        self.model.train()
        return loss / n, 0.0


class ClientOptim(BaseClient):
    """This client optimizer which perform updates for certain number of epochs in each training round."""
    def __init__(self, id, weight, model, loss_fn, dataloader, cfg, outfile, test_dataloader, metric, **kwargs):
        super(ClientOptim, self).__init__(id, weight, model, loss_fn, dataloader, cfg, outfile, test_dataloader, metric)
        self.__dict__.update(kwargs)
        super(ClientOptim, self).client_log_title()

    def update(self):
        self.model.to(self.cfg.device)
        optimizer = eval(self.optim)(self.model.parameters(), **self.optim_args)

        ## Local training
        for t in range(self.num_local_epochs):
            start_time = time.time()
            train_loss, target_true, target_pred = 0, [], []
            for data, target in self.dataloader:
                data = data.to(self.cfg.device)
                target = target.to(self.cfg.device)
                optimizer.zero_grad()
                output = self.model(data)
                loss = self.loss_fn(output, target)
                loss.backward()
                optimizer.step()
                target_true.append(target.detach().cpu().numpy())
                target_pred.append(output.detach().cpu().numpy())
                train_loss += loss.item()
                if self.clip_grad or self.use_dp:
                    torch.nn.utils.clip_grad_norm_(
                        self.model.parameters(),
                        self.clip_value,
                        norm_type=self.clip_norm,
                    )

            train_loss /= len(self.dataloader)
            target_true, target_pred = np.concatenate(target_true), np.concatenate(target_pred)
            train_accuracy = float(self.metric(target_true, target_pred))

            ## Validation
            if self.cfg.validation == True and self.test_dataloader != None:  # noqa: E712,E711
                test_loss, test_accuracy = super(ClientOptim, self).client_validation()
            else:
                test_loss, test_accuracy = 0, 0
            per_iter_time = time.time() - start_time
            super(ClientOptim, self).client_log_content(t + 1, per_iter_time, train_loss, train_accuracy, test_loss, test_accuracy)

        self.round += 1
        self.primal_state = copy.deepcopy(self.model.state_dict())
        return self.primal_state


def r2_metric(y_true, y_pred):
    return 1 - ((y_true - y_pred) ** 2).sum() / ((y_true - y_true.mean()) ** 2).sum()


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    # tabular client data with unscaled features (e.g. sensor readings in the tens)
    x = 6.0 * torch.randn(1200, 10, generator=g)
    w_true = torch.randn(10, 1, generator=g)
    y = x @ w_true + 0.5 * torch.randn(1200, 1, generator=g)
    train = torch.utils.data.TensorDataset(x[:1000], y[:1000])
    test = torch.utils.data.TensorDataset(x[1000:], y[1000:])
    dataloader = torch.utils.data.DataLoader(train, batch_size=32, shuffle=True)
    test_dataloader = torch.utils.data.DataLoader(test, batch_size=100)
    model = torch.nn.Linear(10, 1)
    client = ClientOptim(0, 1.0, model, torch.nn.MSELoss(), dataloader, Config(), None, test_dataloader, r2_metric,
                         optim="SGD", optim_args={"lr": 0.03}, num_local_epochs=4,
                         clip_grad=True, clip_value=1.0, clip_norm=2, use_dp=False)
    for _ in range(2):
        client.update()


if __name__ == "__main__":
    main()
