# Source: Zhangcx19/IJCAI-23-PFedRec, data.py, engine.py, mlp.py, train.py, commit f65423f231e85a4e4318f608b17ccd78deb83033
# Report: https://github.com/Zhangcx19/IJCAI-23-PFedRec/issues/3
import copy
import math
import random

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

random.seed(0)


class UserItemRatingDataset(Dataset):
    """Wrapper, convert <user, item, rating> Tensor into Pytorch Dataset"""

    def __init__(self, user_tensor, item_tensor, target_tensor):
        self.user_tensor = user_tensor
        self.item_tensor = item_tensor
        self.target_tensor = target_tensor

    def __getitem__(self, index):
        return self.user_tensor[index], self.item_tensor[index], self.target_tensor[index]

    def __len__(self):
        return self.user_tensor.size(0)


class SampleGenerator(object):
    """Construct dataset for NCF"""

    def __init__(self, ratings):
        assert 'userId' in ratings.columns
        assert 'itemId' in ratings.columns
        assert 'rating' in ratings.columns

        self.ratings = ratings
        self.preprocess_ratings = self._binarize(ratings)
        self.user_pool = set(self.ratings['userId'].unique())
        self.item_pool = set(self.ratings['itemId'].unique())
        # 99 negatives for each user's validation item and 99 for its test item
        self.negatives = self._sample_negative(ratings)
        self.train_ratings, self.val_ratings, self.test_ratings = self._split_loo(self.preprocess_ratings)

    def _binarize(self, ratings):
        """binarize into 0 or 1, imlicit feedback"""
        ratings = copy.deepcopy(ratings)
        ratings.loc[ratings['rating'] > 0, 'rating'] = 1.0
        return ratings

    def _split_loo(self, ratings):
        """leave one out train/test split """
        ratings['rank_latest'] = ratings.groupby(['userId'])['timestamp'].rank(method='first', ascending=False)
        test = ratings[ratings['rank_latest'] == 1]
        val = ratings[ratings['rank_latest'] == 2]
        train = ratings[ratings['rank_latest'] > 2]
        assert train['userId'].nunique() == test['userId'].nunique() == val['userId'].nunique()
        assert len(train) + len(test) + len(val) == len(ratings)
        return train[['userId', 'itemId', 'rating']], val[['userId', 'itemId', 'rating']], test[['userId', 'itemId', 'rating']]

    def _sample_negative(self, ratings):
        """return all negative items & 198 sampled negative items"""
        interact_status = ratings.groupby('userId')['itemId'].apply(set).reset_index().rename(
            columns={'itemId': 'interacted_items'})
        interact_status['negative_items'] = interact_status['interacted_items'].apply(lambda x: self.item_pool - x)
        interact_status['negative_samples'] = interact_status['negative_items'].apply(lambda x: random.sample(sorted(x), 198))
        return interact_status[['userId', 'negative_items', 'negative_samples']]

    def store_all_train_data(self, num_negatives):
        """each sub-list stores a user's positives and negatives"""
        users, items, ratings = [], [], []
        train_ratings = pd.merge(self.train_ratings, self.negatives[['userId', 'negative_items']], on='userId')
        train_ratings['negatives'] = train_ratings['negative_items'].apply(lambda x: random.sample(sorted(x), num_negatives))
        grouped_train_ratings = train_ratings.groupby('userId')
        for userId, user_train_ratings in grouped_train_ratings:
            single_user, user_item, user_rating = [], [], []
            for row in user_train_ratings.itertuples():
                single_user.append(int(row.userId))
                user_item.append(int(row.itemId))
                user_rating.append(float(row.rating))
                for i in range(num_negatives):
                    single_user.append(int(row.userId))
                    user_item.append(int(row.negatives[i]))
                    user_rating.append(float(0))  # negative samples get 0 rating
            users.append(single_user)
            items.append(user_item)
            ratings.append(user_rating)
        assert len(users) == len(items) == len(ratings) == len(self.user_pool)
        return [users, items, ratings]

    def _eval_data(self, eval_ratings, first, last):
        eval_ratings = pd.merge(eval_ratings, self.negatives[['userId', 'negative_samples']], on='userId')
        eval_users, eval_items, negative_users, negative_items = [], [], [], []
        for row in eval_ratings.itertuples():
            eval_users.append(int(row.userId))
            eval_items.append(int(row.itemId))
            for i in range(first, last):
                negative_users.append(int(row.userId))
                negative_items.append(int(row.negative_samples[i]))
        assert 99 * len(eval_users) == len(negative_users)
        return [torch.LongTensor(eval_users), torch.LongTensor(eval_items), torch.LongTensor(negative_users),
                torch.LongTensor(negative_items)]

    @property
    def validate_data(self):
        return self._eval_data(self.val_ratings, 0, 99)

    @property
    def test_data(self):
        return self._eval_data(self.test_ratings, 99, 198)


class MLP(torch.nn.Module):
    def __init__(self, config):
        super(MLP, self).__init__()
        self.embedding_item = torch.nn.Embedding(num_embeddings=config['num_items'], embedding_dim=config['latent_dim'])
        self.affine_output = torch.nn.Linear(in_features=config['latent_dim'], out_features=1)
        self.logistic = torch.nn.Sigmoid()

    def forward(self, item_indices):
        item_embedding = self.embedding_item(item_indices)
        logits = self.affine_output(item_embedding)
        return self.logistic(logits)


def hit_and_ndcg(test_scores, negative_scores, top_k=10):
    hits, ndcgs = [], []
    for u in range(len(test_scores)):
        rank = int((negative_scores[u] > test_scores[u]).sum()) + 1
        hits.append(1.0 if rank <= top_k else 0.0)
        ndcgs.append(math.log(2) / math.log(1 + rank) if rank <= top_k else 0.0)
    return float(np.mean(hits)), float(np.mean(ndcgs))


class Engine(object):
    def __init__(self, config):
        self.config = config
        self.model = MLP(config)
        self.server_model_param = {}
        self.client_model_params = {}
        self.crit = torch.nn.BCELoss()

    def instance_user_train_loader(self, user_train_data):
        dataset = UserItemRatingDataset(user_tensor=torch.LongTensor(user_train_data[0]),
                                        item_tensor=torch.LongTensor(user_train_data[1]),
                                        target_tensor=torch.FloatTensor(user_train_data[2]))
        return DataLoader(dataset, batch_size=self.config['batch_size'], shuffle=True)

    def fed_train_single_batch(self, model_client, batch_data, optimizers):
        _, items, ratings = batch_data[0], batch_data[1], batch_data[2]
        ratings = ratings.float()
        optimizer, optimizer_i = optimizers
        # update score function.
        optimizer.zero_grad()
        ratings_pred = model_client(items)
        loss = self.crit(ratings_pred.view(-1), ratings)
        loss.backward()
        optimizer.step()
        # update item embedding.
        optimizer_i.zero_grad()
        ratings_pred = model_client(items)
        loss_i = self.crit(ratings_pred.view(-1), ratings)
        loss_i.backward()
        optimizer_i.step()
        return model_client, loss_i.item()

    def aggregate_clients_params(self, round_user_params):
        t = 0
        for user in round_user_params.keys():
            user_params = round_user_params[user]
            if t == 0:
                self.server_model_param = copy.deepcopy(user_params)
            else:
                for key in user_params.keys():
                    self.server_model_param[key].data += user_params[key].data
            t += 1
        for key in self.server_model_param.keys():
            self.server_model_param[key].data = self.server_model_param[key].data / len(round_user_params)

    def fed_train_a_round(self, all_train_data, round_id):
        participants = random.sample(range(self.config['num_users']), int(self.config['num_users'] * self.config['clients_sample_ratio']))
        round_participant_params = {}
        all_loss = {}
        for user in participants:
            loss = 0
            model_client = copy.deepcopy(self.model)
            if round_id != 0:
                user_param_dict = copy.deepcopy(self.model.state_dict())
                if user in self.client_model_params.keys():
                    for key in self.client_model_params[user].keys():
                        user_param_dict[key] = copy.deepcopy(self.client_model_params[user][key].data)
                user_param_dict['embedding_item.weight'] = copy.deepcopy(self.server_model_param['embedding_item.weight'].data)
                model_client.load_state_dict(user_param_dict)
            optimizer = torch.optim.SGD(model_client.affine_output.parameters(), lr=self.config['lr'])
            optimizer_i = torch.optim.SGD(model_client.embedding_item.parameters(),
                                          lr=self.config['lr'] * self.config['num_items'] * self.config['lr_eta'])
            optimizers = [optimizer, optimizer_i]
            user_train_data = [all_train_data[0][user], all_train_data[1][user], all_train_data[2][user]]
            user_dataloader = self.instance_user_train_loader(user_train_data)
            model_client.train()
            sample_num = 0
            for epoch in range(self.config['local_epoch']):
                for batch_id, batch in enumerate(user_dataloader):
                    model_client, loss_u = self.fed_train_single_batch(model_client, batch, optimizers)
                    loss += loss_u * len(batch[0])
                    sample_num += len(batch[0])
                all_loss[user] = loss / sample_num
            client_param = model_client.state_dict()
            self.client_model_params[user] = copy.deepcopy(client_param)
            round_participant_params[user] = copy.deepcopy(self.client_model_params[user])
            del round_participant_params[user]['affine_output.weight']
            del round_participant_params[user]['affine_output.bias']
        self.aggregate_clients_params(round_participant_params)
        return all_loss

    def fed_evaluate(self, evaluate_data):
        test_users, test_items = evaluate_data[0], evaluate_data[1]
        negative_items = evaluate_data[3]
        test_scores, negative_scores = [], []
        for user in range(self.config['num_users']):
            user_model = copy.deepcopy(self.model)
            if user in self.client_model_params.keys():
                user_model.load_state_dict(self.client_model_params[user])
            user_model.eval()
            with torch.no_grad():
                test_scores.append(user_model(test_items[user: user + 1]).view(-1)[0].item())
                negative_scores.append(user_model(negative_items[user * 99: (user + 1) * 99]).view(-1).numpy())
        return hit_and_ndcg(test_scores, negative_scores)


def make_ratings(num_users, num_items, per_user, seed=0):
    # implicit feedback with no structure: every user picks items uniformly at random,
    # so no model can rank a held-out item above 99 random ones better than chance (HR@10 ~ 0.10)
    rng = np.random.RandomState(seed)
    rows = []
    for u in range(num_users):
        for k, i in enumerate(rng.choice(num_items, per_user, replace=False)):
            rows.append((u, int(i), int(rng.randint(1, 6)), int(rng.randint(0, 10 ** 6))))
    return pd.DataFrame(rows, columns=['userId', 'itemId', 'rating', 'timestamp'])


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = {'clients_sample_ratio': 1.0, 'num_round': 12, 'local_epoch': 1, 'lr_eta': 80, 'batch_size': 256,
              'lr': 0.1, 'num_users': 40, 'num_items': 310, 'latent_dim': 16, 'num_negative': 4}
    rating = make_ratings(config['num_users'], config['num_items'], per_user=100)
    sample_generator = SampleGenerator(ratings=rating)
    validate_data = sample_generator.validate_data
    test_data = sample_generator.test_data
    engine = Engine(config)

    best_val_hr, final_test = 0, None
    for round in range(config['num_round']):
        all_train_data = sample_generator.store_all_train_data(config['num_negative'])
        tr_loss = engine.fed_train_a_round(all_train_data, round_id=round)
        hit_ratio, ndcg = engine.fed_evaluate(test_data)
        val_hit_ratio, val_ndcg = engine.fed_evaluate(validate_data)
        print('[Round {}] train loss {:.4f} | test HR@10 = {:.4f}, NDCG = {:.4f} | val HR@10 = {:.4f}'.format(
            round, float(np.mean(list(tr_loss.values()))), hit_ratio, ndcg, val_hit_ratio))
        if val_hit_ratio >= best_val_hr:
            best_val_hr = val_hit_ratio
            final_test = (round, hit_ratio, ndcg)
    print('Best test hr: {:.4f}, ndcg: {:.4f} at round {}'.format(final_test[1], final_test[2], final_test[0]))
    print('chance level of HR@10 with 1 positive among 100 candidates: 0.10')


if __name__ == '__main__':
    main()
