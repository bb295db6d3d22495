# Source: pyemma/Argo, trainer/embedding_trainer.py (EmbeddingTrainer), model/two_tower.py (TwoTowerModel), data/dataset.py (MovieLenRatingDataset, prepare_movie_len_rating_dataset), movie_len_embeddings.py, commit acd79520455b71742e1691213a82fd49767159ba
# Report: https://github.com/pyemma/Argo/pull/27
# Two-tower rating model on MovieLens: user / item embeddings -> towers -> merge MLP -> rating,
# MSE, AdamW; several trials are trained and the one with the lowest evaluation loss exports
# its item-tower embeddings for the downstream ranking models. MovieLens ratings.csv is
# replaced by synthetic ratings from latent user / item factors (pandas frame with the same
# columns); cardinalities 3,000,000 -> 200 / 100, train batch 8192 -> 512.
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


class TwoTowerModel(nn.Module):
    def __init__(self):
        super().__init__()

        # here we use user/item to different the 2 towers, which is a common convention in industry
        self.embedding_dim = 32
        self.user_cardinality = 200
        self.item_cardinality = 100

        # create embedding lookup table
        self.user_embedding = nn.Embedding(num_embeddings=self.user_cardinality, embedding_dim=self.embedding_dim)
        self.item_embedding = nn.Embedding(num_embeddings=self.item_cardinality, embedding_dim=self.embedding_dim)

        # local tower, linear projection and non-linear activation
        self.user_tower = nn.Sequential(
            nn.Linear(self.embedding_dim, 128),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(128, 64),
        )
        self.item_tower = nn.Sequential(
            nn.Linear(self.embedding_dim, 128),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(128, 64),  # this is the actual item embedding dimension that we are outputting
        )

        # merge net, combine user and item tower output for final predictions
        self.merge_net = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, user_ids, item_ids):
        user_embeddings = self.user_embedding(user_ids)  # B x dim
        item_embeddings = self.item_embedding(item_ids)  # B x dim

        user_hidden = self.user_tower(user_embeddings)  # B x hidden_dim
        item_hidden = self.item_tower(item_embeddings)  # B x hidden_dim

        hidden = torch.concat((user_hidden, item_hidden), dim=-1)  # B x 2 * hidden_dim
        out = self.merge_net(hidden)  # B x 1
        return out


class MovieLenRatingDataset(Dataset):
    """
    This dataset only load the ratings file. Primarily this is used for
    the MF or the two tower model to compute the item side embeddings.
    """

    def __init__(self, data):
        self.users = torch.LongTensor(data["userId"].values)
        self.movies = torch.LongTensor(data["movieId"].values)
        self.ratings = torch.FloatTensor(data["rating"].values)

    def __len__(self):
        return self.users.shape[0]

    def __getitem__(self, index):
        return self.users[index], self.movies[index], self.ratings[index]


def synthetic_ratings(n=40000, n_users=200, n_items=100, seed=0):
    rng = np.random.RandomState(seed)
    u = rng.normal(0, 1, (n_users, 4))
    v = rng.normal(0, 1, (n_items, 4))
    users = rng.randint(0, n_users, n)
    items = rng.randint(0, n_items, n)
    bu, bi = rng.normal(0, 0.8, n_users), rng.normal(0, 0.8, n_items)
    r = 3.0 + bu[users] + bi[items] + 0.3 * (u[users] * v[items]).sum(1) + 0.3 * rng.normal(0, 1, n)
    r = np.clip(np.round(r * 2) / 2, 0.5, 5.0)
    return pd.DataFrame({"userId": users, "movieId": items, "rating": r, "timestamp": np.arange(n)})


def prepare_movie_len_rating_dataset(eval_ratio=0.1):
    ratings = synthetic_ratings()

    eval_data = ratings.sample(frac=eval_ratio, random_state=0)
    train_data = ratings.drop(index=eval_data.index)

    train_data = train_data.reset_index(drop=True)
    eval_data = eval_data.reset_index(drop=True)

    return MovieLenRatingDataset(train_data), MovieLenRatingDataset(eval_data)


class EmbeddingTrainer:
    """
    This is a trainer dedicated for embedding training (e.g. two tower model), and the
    output embedding would be exported and saved for downstream applications
    """

    def __init__(self, model, train_dataset, eval_dataset):
        self.model = model
        self.train_dataloader = DataLoader(train_dataset, batch_size=512, shuffle=True)
        self.eval_dataloader = DataLoader(eval_dataset, batch_size=1024)

        self.device = torch.device("cpu")
        self.model.to(self.device)

        # loss function, in movie len, we treat as a regression task to minimize the rating
        # in the future, we could consider contrastive loss
        self.loss = nn.MSELoss()

        # optimizer
        self.optimizer = optim.AdamW(self.model.parameters(), lr=0.001)

    def train(self, num_epochs: int = 5):
        print("Start embedding training...")

        for epoch in range(num_epochs):
            self.model.train()
            running_loss = 0.0

            for i, (user_ids, item_ids, ratings) in enumerate(self.train_dataloader):
                user_ids = user_ids.to(self.device)
                item_ids = item_ids.to(self.device)
                ratings = ratings.to(self.device)

                self.optimizer.zero_grad()

                predictions = self.model(user_ids, item_ids).squeeze(1)  # B x 1 -> B,
                loss = self.loss(predictions, ratings)

                # backward pass
                loss.backward()
                self.optimizer.step()

                running_loss += loss.item()

                if i % 50 == 49:
                    print(f"Epoch [{epoch + 1}/{num_epochs}], Step [{i + 1}/{len(self.train_dataloader)}], Loss: {running_loss / 50:.4f}")
                    running_loss = 0.0

    def eval(self):
        """
        Eval on the eval dataset and return the loss
        """
        self.model.eval()
        total_loss = 0.0

        with torch.no_grad():
            for user_ids, item_ids, ratings in self.eval_dataloader:
                user_ids = user_ids.to(self.device)
                item_ids = item_ids.to(self.device)
                ratings = ratings.to(self.device)

                predictions = self.model(user_ids, item_ids)
                loss = self.loss(predictions, ratings)

                total_loss += loss.item()

        print(f"Total evaluation loss: {total_loss:.4f}")
        return total_loss

    def export(self):
        self.model.eval()

        with torch.no_grad():
            item_ids = torch.LongTensor([i for i in range(self.model.item_cardinality)])
            item_ids = item_ids.to(self.device)
            item_embeddings = self.model.item_embedding(item_ids)
            item_embeddings = self.model.item_tower(item_embeddings)  # num_item x item_dim

        return item_embeddings.cpu().numpy()


NUM_TRIAL = 3

if __name__ == "__main__":
    torch.set_num_threads(1)
    train_dataset, eval_dataset = prepare_movie_len_rating_dataset(eval_ratio=0.05)
    print(f"{len(train_dataset)} training / {len(eval_dataset)} evaluation ratings, rating variance "
          f"{eval_dataset.ratings.var().item():.4f}")
    best_embeddings, best_embeddings_loss = None, None

    # we train and eval embedding for serval trails to find the best parameters
    for trial in range(NUM_TRIAL):
        torch.manual_seed(trial)
        model = TwoTowerModel()
        trainer = EmbeddingTrainer(model=model, train_dataset=train_dataset, eval_dataset=eval_dataset)
        trainer.train(num_epochs=2 * (trial + 1))
        loss = trainer.eval()

        if best_embeddings_loss is None or loss < best_embeddings_loss:
            best_embeddings_loss = loss
            best_embeddings = trainer.export()
            print(f"On trial {trial}, found the best loss {loss:.4f}, current best {best_embeddings_loss:.4f}...")
