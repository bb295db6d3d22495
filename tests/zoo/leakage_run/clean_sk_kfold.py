"""K-fold cross-validation done right: a new model and a scaler fitted per fold on its
training rows; the folds are listed up front (each model still sees one fold only)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

rng = np.random.default_rng(2)
X = rng.normal(3.0, 2.0, size=(150, 4))
y = (X.sum(1) > 12).astype(np.int64)
folds = list(StratifiedKFold(n_splits=3, shuffle=True, random_state=0).split(X, y))  # SPLIT
scores = []
for tr, te in folds:
    scaler = StandardScaler().fit(X[tr])
    Xtr = torch.tensor(scaler.transform(X[tr]), dtype=torch.float32)
    Xte = torch.tensor(scaler.transform(X[te]), dtype=torch.float32)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loss = F.cross_entropy(model(Xtr), torch.tensor(y[tr]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        scores.append((model(Xte).argmax(1).numpy() == y[te]).mean())
