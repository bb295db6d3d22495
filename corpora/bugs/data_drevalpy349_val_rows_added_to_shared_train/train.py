# Source: daisybio/drevalpy, drevalpy/experiment.py, drevalpy/datasets/dataset.py, commit 587cefd8e3c60151e85ee311d2f36d7e7b5a4a47
# Report: https://github.com/daisybio/drevalpy/issues/349
import copy

import numpy as np
import torch
import torch.nn as nn


class DrugResponseDataset:
    def __init__(self, response, cell_line_ids, drug_ids, dataset_name="synthetic"):
        self._response = response
        self._cell_line_ids = cell_line_ids
        self._drug_ids = drug_ids
        self._predictions = None
        self.dataset_name = dataset_name
        self.cv_splits = None

    @property
    def response(self):
        return self._response

    @property
    def cell_line_ids(self):
        return self._cell_line_ids

    @property
    def drug_ids(self):
        return self._drug_ids

    @property
    def predictions(self):
        return self._predictions

    def __len__(self):
        return len(self._response)

    def add_rows(self, other):
        self._response = np.concatenate([self._response, other.response])
        self._cell_line_ids = np.concatenate([self._cell_line_ids, other.cell_line_ids])
        self._drug_ids = np.concatenate([self._drug_ids, other.drug_ids])

    def shuffle(self, random_state=42):
        indices = np.arange(len(self))
        np.random.seed(random_state)
        np.random.shuffle(indices)
        self._response = self.response[indices]
        self._cell_line_ids = self.cell_line_ids[indices]
        self._drug_ids = self.drug_ids[indices]

    def subset(self, idx):
        return DrugResponseDataset(self._response[idx], self._cell_line_ids[idx], self._drug_ids[idx],
                                   self.dataset_name)

    def copy(self):
        return DrugResponseDataset(copy.deepcopy(self.response), copy.deepcopy(self.cell_line_ids),
                                   copy.deepcopy(self.drug_ids), self.dataset_name)

    def split_dataset(self, n_cv_splits, validation_ratio=0.1, random_state=42):
        rng = np.random.RandomState(random_state)
        order = rng.permutation(len(self))
        folds = np.array_split(order, n_cv_splits)
        splits = []
        for k in range(n_cv_splits):
            test_idx = folds[k]
            rest = np.concatenate([folds[j] for j in range(n_cv_splits) if j != k])
            n_val = int(len(rest) * validation_ratio)
            splits.append({"train": self.subset(rest[n_val:]), "validation": self.subset(rest[:n_val]),
                           "test": self.subset(test_idx)})
        self.cv_splits = splits


def make_data(n_cells=60, n_drugs=20, seed=0):
    rng = np.random.RandomState(seed)
    cell_latent = rng.normal(size=(n_cells, 4))
    drug_latent = rng.normal(size=(n_drugs, 4))
    cell_features = np.tanh(cell_latent @ rng.normal(size=(4, 24))).astype(np.float32)
    drug_features = np.tanh(drug_latent @ rng.normal(size=(4, 12))).astype(np.float32)
    cells, drugs = np.meshgrid(np.arange(n_cells), np.arange(n_drugs), indexing="ij")
    cells, drugs = cells.ravel(), drugs.ravel()
    response = (cell_latent[cells] * drug_latent[drugs]).sum(1) + rng.normal(0, 1.0, size=len(cells))
    data = DrugResponseDataset(response.astype(np.float32), cells, drugs)
    return data, cell_features, drug_features


class ElasticNetModel:
    early_stopping = False

    @classmethod
    def get_model_name(cls):
        return "ElasticNet"

    @classmethod
    def get_hyperparameter_set(cls):
        return [{"l1_ratio": 0.5, "alpha": 0.01}, {"l1_ratio": 0.5, "alpha": 0.1}]

    def build_model(self, hyperparameters):
        self.hyperparameters = hyperparameters
        self.model = nn.Linear(36, 1)

    def train(self, output, cell_line_input, drug_input):
        x = torch.from_numpy(np.concatenate([cell_line_input[output.cell_line_ids],
                                             drug_input[output.drug_ids]], 1))
        y = torch.from_numpy(output.response)
        optimizer = torch.optim.Adam(self.model.parameters(), lr=0.05)
        alpha, l1 = self.hyperparameters["alpha"], self.hyperparameters["l1_ratio"]
        for _ in range(100):
            optimizer.zero_grad()
            w = self.model.weight
            loss = ((self.model(x).squeeze(1) - y) ** 2).mean() \
                + alpha * (l1 * w.abs().sum() + (1 - l1) * (w ** 2).sum())
            loss.backward()
            optimizer.step()

    def predict(self, cell_line_ids, drug_ids, cell_line_input, drug_input):
        x = torch.from_numpy(np.concatenate([cell_line_input[cell_line_ids], drug_input[drug_ids]], 1))
        with torch.no_grad():
            return self.model(x).squeeze(1).numpy()


class FeedForwardNetwork(nn.Module):
    def __init__(self, n_features, n_units_per_layer, dropout_prob):
        super().__init__()
        layers, width = [], n_features
        for units in n_units_per_layer:
            layers += [nn.Linear(width, units), nn.ReLU(), nn.Dropout(dropout_prob)]
            width = units
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(1)


class SimpleNeuralNetwork:
    early_stopping = False

    @classmethod
    def get_model_name(cls):
        return "SimpleNeuralNetwork"

    @classmethod
    def get_hyperparameter_set(cls):
        return [{"units_per_layer": [16], "dropout_prob": 0.3, "max_epochs": 40},
                {"units_per_layer": [256, 256], "dropout_prob": 0.0, "max_epochs": 40}]

    def build_model(self, hyperparameters):
        torch.manual_seed(0)
        self.hyperparameters = hyperparameters
        self.model = FeedForwardNetwork(36, hyperparameters["units_per_layer"], hyperparameters["dropout_prob"])

    def train(self, output, cell_line_input, drug_input):
        x = torch.from_numpy(np.concatenate([cell_line_input[output.cell_line_ids],
                                             drug_input[output.drug_ids]], 1))
        y = torch.from_numpy(output.response)
        optimizer = torch.optim.Adam(self.model.parameters(), lr=3e-3)
        loss_fn = nn.MSELoss()
        g = torch.Generator().manual_seed(0)
        self.model.train()
        for _ in range(self.hyperparameters["max_epochs"]):
            perm = torch.randperm(len(y), generator=g)
            for i in range(0, len(y), 64):
                idx = perm[i:i + 64]
                optimizer.zero_grad()
                loss = loss_fn(self.model(x[idx]), y[idx])
                loss.backward()
                optimizer.step()

    def predict(self, cell_line_ids, drug_ids, cell_line_input, drug_input):
        x = torch.from_numpy(np.concatenate([cell_line_input[cell_line_ids], drug_input[drug_ids]], 1))
        self.model.eval()
        with torch.no_grad():
            return self.model(x).numpy()


def evaluate(dataset):
    return {"RMSE": float(np.sqrt(np.mean((dataset.predictions - dataset.response) ** 2)))}


def train_and_predict(model, hpams, train_dataset, prediction_dataset, cl_features, drug_features):
    model.build_model(hyperparameters=hpams)
    model.train(output=train_dataset, cell_line_input=cl_features, drug_input=drug_features)
    prediction_dataset._predictions = model.predict(prediction_dataset.cell_line_ids, prediction_dataset.drug_ids,
                                                    cl_features, drug_features)
    return prediction_dataset


def hpam_tune(model, train_dataset, validation_dataset, hpam_set, cl_features, drug_features):
    if len(hpam_set) == 1:
        return hpam_set[0]
    best_hyperparameters, best_score = None, float("inf")
    for hyperparameter in hpam_set:
        validation_dataset = train_and_predict(model, hyperparameter, train_dataset, validation_dataset,
                                               cl_features, drug_features)
        score = evaluate(validation_dataset)["RMSE"]
        print(f"  hpams {hyperparameter['units_per_layer'] if 'units_per_layer' in hyperparameter else hyperparameter}"
              f" validation RMSE {score:.3f}")
        if score < best_score:
            best_score = score
            best_hyperparameters = hyperparameter
    return best_hyperparameters


def get_datasets_from_cv_split(split):
    train_dataset = split["train"]
    validation_dataset = split["validation"]
    test_dataset = split["test"]
    return train_dataset, validation_dataset, test_dataset


def drug_response_experiment(models, response_data, cl_features, drug_features, n_cv_splits=2):
    response_data.split_dataset(n_cv_splits=n_cv_splits, validation_ratio=0.1, random_state=42)
    for model_class in models:
        print(f"Running {model_class.get_model_name()}")
        model_hpam_set = model_class.get_hyperparameter_set()
        for split_index, split in enumerate(response_data.cv_splits):
            train_dataset, validation_dataset, test_dataset = get_datasets_from_cv_split(split)
            print(f" fold {split_index + 1}: {len(train_dataset)} train rows, "
                  f"{len(validation_dataset)} validation rows, {len(test_dataset)} test rows")
            model = model_class()
            best_hpams = hpam_tune(model, train_dataset, validation_dataset, model_hpam_set,
                                   cl_features, drug_features)
            train_dataset.add_rows(validation_dataset)  # use full train val set data for final training
            train_dataset.shuffle(random_state=42)
            test_dataset = train_and_predict(model, best_hpams, train_dataset, test_dataset,
                                             cl_features, drug_features)
            print(f"  best {best_hpams}, test RMSE {evaluate(test_dataset)['RMSE']:.3f}")


def main():
    torch.set_num_threads(1)
    response_data, cl_features, drug_features = make_data()
    drug_response_experiment([ElasticNetModel, SimpleNeuralNetwork], response_data,
                             cl_features, drug_features)


if __name__ == "__main__":
    main()
