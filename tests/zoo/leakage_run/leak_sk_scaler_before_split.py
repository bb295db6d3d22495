"""StandardScaler fitted on every row, then train_test_split."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

rng = np.random.default_rng(0)
X = rng.normal(10.0, 4.0, size=(300, 5))
y = (X[:, 0] > 10).astype(np.int64)
X = StandardScaler().fit_transform(X)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)  # SPLIT
Xt, yt = torch.tensor(X_train, dtype=torch.float32), torch.tensor(y_train)
model = nn.Linear(5, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    loss = F.cross_entropy(model(Xt), yt)
    opt.zero_grad()
    loss.backward()
    opt.step()
