"""sklearn.utils.resample upsamples the minority class, then train_test_split."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.model_selection import train_test_split
from sklearn.utils import resample

rng = np.random.default_rng(4)
X = rng.normal(size=(240, 5))
y = (X[:, 0] > 1.0).astype(np.int64)
X_up, y_up = resample(X[y == 1], y[y == 1], n_samples=int((y == 0).sum()), random_state=0)
X_bal, y_bal = np.vstack([X[y == 0], X_up]), np.concatenate([y[y == 0], y_up])
X_train, X_test, y_train, y_test = train_test_split(X_bal, y_bal, test_size=0.2, random_state=0)  # SPLIT
model = nn.Linear(5, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
Xt, yt = torch.tensor(X_train, dtype=torch.float32), torch.tensor(y_train)
for epoch in range(2):
    loss = F.cross_entropy(model(Xt), yt)
    opt.zero_grad()
    loss.backward()
    opt.step()
