"""A TF-IDF vocabulary built on every document, then the matrix is split."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import train_test_split

words = ["good", "bad", "great", "awful", "fine", "poor", "movie", "plot", "actor", "scene", "long", "short"]
rng = np.random.default_rng(0)
docs = [" ".join(rng.choice(words, size=6)) + f" doc{i}" for i in range(120)]
labels = np.array([int(("good" in d) or ("great" in d)) for d in docs])
X = TfidfVectorizer().fit_transform(docs)
X_tr, X_te, y_tr, y_te = train_test_split(X, labels, test_size=0.25, random_state=0)  # SPLIT
Xt = torch.tensor(X_tr.toarray(), dtype=torch.float32)
model = nn.Linear(Xt.shape[1], 2)
opt = torch.optim.Adam(model.parameters(), lr=0.05)
for epoch in range(3):
    loss = F.cross_entropy(model(Xt), torch.tensor(y_tr))
    opt.zero_grad()
    loss.backward()
    opt.step()
