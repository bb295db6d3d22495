# Source: DeepGraphLearning/KnowledgeGraphEmbedding, codes/model.py (KGEModel.RotatE, train_step, test_step), commit 617062aaedf53bf4d6b44450a580a96dc30e0632;
# codes/dataloader.py (TrainDataset, TestDataset, BidirectionalOneShotIterator) at commit 2e440e0f9c687314d5ff67ead68ce985dc446e3a; codes/run.py main loop
# RotatE with self-adversarial negative sampling: relations are rotations in the complex plane, negatives are
# weighted by softmax(score * temperature).detach(), positives/negatives weighted by word2vec-style subsampling.
# Suspicious-looking but correct patterns kept from the original:
#   - F.softmax(negative_score * adversarial_temperature, dim=1).detach(): the sampling weights are deliberately
#     excluded from back-propagation ("we do not apply back-propagation on the sampling weight")
#   - gamma and embedding_range are nn.Parameters with requires_grad=False that sit in model.parameters() and are
#     passed to Adam (filtered by requires_grad in run.py); they never change
#   - embeddings are bare nn.Parameters (no nn.Embedding) read with index_select; relation phases = emb/(range/pi)
#   - alternating head-batch / tail-batch corruption (BidirectionalOneShotIterator); negatives that are true
#     triples are filtered out in the dataset, so a batch's negative set changes every step
#   - loss = (positive_sample_loss + negative_sample_loss)/2 where both are negated weighted log-sigmoids; the
#     logged positive/negative losses can move in opposite directions
#   - the learning rate is divided by 10 at warm_up_steps = max_steps // 2 by rebuilding the Adam optimizer
#   - filter_bias of -1 added to the scores of other true entities in test_step (filtered ranking)
# Adaptation: FB15k/wn18 files replaced by a synthetic typed KG (200 entities, 6 relations); argparse/logging/
# checkpoints removed; hidden_dim 1000 -> 32, negative_sample_size 256 -> 32, batch 1024 -> 64, max_steps 240;
# np.in1d (removed in NumPy 2) -> np.isin with the same arguments.
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class TrainDataset(Dataset):
    def __init__(self, triples, nentity, nrelation, negative_sample_size, mode):
        self.len = len(triples)
        self.triples = triples
        self.triple_set = set(triples)
        self.nentity = nentity
        self.nrelation = nrelation
        self.negative_sample_size = negative_sample_size
        self.mode = mode
        self.count = self.count_frequency(triples)
        self.true_head, self.true_tail = self.get_true_head_and_tail(self.triples)

    def __len__(self):
        return self.len

    def __getitem__(self, idx):
        positive_sample = self.triples[idx]

        head, relation, tail = positive_sample

        subsampling_weight = self.count[(head, relation)] + self.count[(tail, -relation-1)]
        subsampling_weight = torch.sqrt(1 / torch.Tensor([subsampling_weight]))

        negative_sample_list = []
        negative_sample_size = 0

        while negative_sample_size < self.negative_sample_size:
            negative_sample = np.random.randint(self.nentity, size=self.negative_sample_size*2)
            if self.mode == 'head-batch':
                mask = np.isin(
                    negative_sample,
                    self.true_head[(relation, tail)],
                    assume_unique=True,
                    invert=True
                )
            elif self.mode == 'tail-batch':
                mask = np.isin(
                    negative_sample,
                    self.true_tail[(head, relation)],
                    assume_unique=True,
                    invert=True
                )
            else:
                raise ValueError('Training batch mode %s not supported' % self.mode)
            negative_sample = negative_sample[mask]
            negative_sample_list.append(negative_sample)
            negative_sample_size += negative_sample.size

        negative_sample = np.concatenate(negative_sample_list)[:self.negative_sample_size]

        negative_sample = torch.LongTensor(negative_sample)

        positive_sample = torch.LongTensor(positive_sample)

        return positive_sample, negative_sample, subsampling_weight, self.mode

    @staticmethod
    def collate_fn(data):
        positive_sample = torch.stack([_[0] for _ in data], dim=0)
        negative_sample = torch.stack([_[1] for _ in data], dim=0)
        subsample_weight = torch.cat([_[2] for _ in data], dim=0)
        mode = data[0][3]
        return positive_sample, negative_sample, subsample_weight, mode

    @staticmethod
    def count_frequency(triples, start=4):
        count = {}
        for head, relation, tail in triples:
            if (head, relation) not in count:
                count[(head, relation)] = start
            else:
                count[(head, relation)] += 1

            if (tail, -relation-1) not in count:
                count[(tail, -relation-1)] = start
            else:
                count[(tail, -relation-1)] += 1
        return count

    @staticmethod
    def get_true_head_and_tail(triples):
        true_head = {}
        true_tail = {}

        for head, relation, tail in triples:
            if (head, relation) not in true_tail:
                true_tail[(head, relation)] = []
            true_tail[(head, relation)].append(tail)
            if (relation, tail) not in true_head:
                true_head[(relation, tail)] = []
            true_head[(relation, tail)].append(head)

        for relation, tail in true_head:
            true_head[(relation, tail)] = np.array(list(set(true_head[(relation, tail)])))
        for head, relation in true_tail:
            true_tail[(head, relation)] = np.array(list(set(true_tail[(head, relation)])))

        return true_head, true_tail


class TestDataset(Dataset):
    def __init__(self, triples, all_true_triples, nentity, nrelation, mode):
        self.len = len(triples)
        self.triple_set = set(all_true_triples)
        self.triples = triples
        self.nentity = nentity
        self.nrelation = nrelation
        self.mode = mode

    def __len__(self):
        return self.len

    def __getitem__(self, idx):
        head, relation, tail = self.triples[idx]

        if self.mode == 'head-batch':
            tmp = [(0, rand_head) if (rand_head, relation, tail) not in self.triple_set
                   else (-1, head) for rand_head in range(self.nentity)]
            tmp[head] = (0, head)
        elif self.mode == 'tail-batch':
            tmp = [(0, rand_tail) if (head, relation, rand_tail) not in self.triple_set
                   else (-1, tail) for rand_tail in range(self.nentity)]
            tmp[tail] = (0, tail)
        else:
            raise ValueError('negative batch mode %s not supported' % self.mode)

        tmp = torch.LongTensor(tmp)
        filter_bias = tmp[:, 0].float()
        negative_sample = tmp[:, 1]

        positive_sample = torch.LongTensor((head, relation, tail))

        return positive_sample, negative_sample, filter_bias, self.mode

    @staticmethod
    def collate_fn(data):
        positive_sample = torch.stack([_[0] for _ in data], dim=0)
        negative_sample = torch.stack([_[1] for _ in data], dim=0)
        filter_bias = torch.stack([_[2] for _ in data], dim=0)
        mode = data[0][3]
        return positive_sample, negative_sample, filter_bias, mode


class BidirectionalOneShotIterator(object):
    def __init__(self, dataloader_head, dataloader_tail):
        self.iterator_head = self.one_shot_iterator(dataloader_head)
        self.iterator_tail = self.one_shot_iterator(dataloader_tail)
        self.step = 0

    def __next__(self):
        self.step += 1
        if self.step % 2 == 0:
            data = next(self.iterator_head)
        else:
            data = next(self.iterator_tail)
        return data

    @staticmethod
    def one_shot_iterator(dataloader):
        while True:
            for data in dataloader:
                yield data


class KGEModel(nn.Module):
    def __init__(self, model_name, nentity, nrelation, hidden_dim, gamma,
                 double_entity_embedding=False, double_relation_embedding=False):
        super(KGEModel, self).__init__()
        self.model_name = model_name
        self.nentity = nentity
        self.nrelation = nrelation
        self.hidden_dim = hidden_dim
        self.epsilon = 2.0

        self.gamma = nn.Parameter(
            torch.Tensor([gamma]),
            requires_grad=False
        )

        self.embedding_range = nn.Parameter(
            torch.Tensor([(self.gamma.item() + self.epsilon) / hidden_dim]),
            requires_grad=False
        )

        self.entity_dim = hidden_dim*2 if double_entity_embedding else hidden_dim
        self.relation_dim = hidden_dim*2 if double_relation_embedding else hidden_dim

        self.entity_embedding = nn.Parameter(torch.zeros(nentity, self.entity_dim))
        nn.init.uniform_(
            tensor=self.entity_embedding,
            a=-self.embedding_range.item(),
            b=self.embedding_range.item()
        )

        self.relation_embedding = nn.Parameter(torch.zeros(nrelation, self.relation_dim))
        nn.init.uniform_(
            tensor=self.relation_embedding,
            a=-self.embedding_range.item(),
            b=self.embedding_range.item()
        )

        if model_name == 'RotatE' and (not double_entity_embedding or double_relation_embedding):
            raise ValueError('RotatE should use --double_entity_embedding')

    def forward(self, sample, mode='single'):
        if mode == 'single':
            batch_size, negative_sample_size = sample.size(0), 1

            head = torch.index_select(self.entity_embedding, dim=0, index=sample[:,0]).unsqueeze(1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=sample[:,1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, dim=0, index=sample[:,2]).unsqueeze(1)

        elif mode == 'head-batch':
            tail_part, head_part = sample
            batch_size, negative_sample_size = head_part.size(0), head_part.size(1)

            head = torch.index_select(
                self.entity_embedding,
                dim=0,
                index=head_part.view(-1)
            ).view(batch_size, negative_sample_size, -1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=tail_part[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, dim=0, index=tail_part[:, 2]).unsqueeze(1)

        elif mode == 'tail-batch':
            head_part, tail_part = sample
            batch_size, negative_sample_size = tail_part.size(0), tail_part.size(1)

            head = torch.index_select(self.entity_embedding, dim=0, index=head_part[:, 0]).unsqueeze(1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=head_part[:, 1]).unsqueeze(1)
            tail = torch.index_select(
                self.entity_embedding,
                dim=0,
                index=tail_part.view(-1)
            ).view(batch_size, negative_sample_size, -1)

        else:
            raise ValueError('mode %s not supported' % mode)

        return self.RotatE(head, relation, tail, mode)

    def RotatE(self, head, relation, tail, mode):
        pi = 3.14159262358979323846

        re_head, im_head = torch.chunk(head, 2, dim=2)
        re_tail, im_tail = torch.chunk(tail, 2, dim=2)

        #Make phases of relations uniformly distributed in [-pi, pi]

        phase_relation = relation/(self.embedding_range.item()/pi)

        re_relation = torch.cos(phase_relation)
        im_relation = torch.sin(phase_relation)

        if mode == 'head-batch':
            re_score = re_relation * re_tail + im_relation * im_tail
            im_score = re_relation * im_tail - im_relation * re_tail
            re_score = re_score - re_head
            im_score = im_score - im_head
        else:
            re_score = re_head * re_relation - im_head * im_relation
            im_score = re_head * im_relation + im_head * re_relation
            re_score = re_score - re_tail
            im_score = im_score - im_tail

        score = torch.stack([re_score, im_score], dim = 0)
        score = score.norm(dim = 0)

        score = self.gamma.item() - score.sum(dim = 2)
        return score

    @staticmethod
    def train_step(model, optimizer, train_iterator, args):
        model.train()

        optimizer.zero_grad()

        positive_sample, negative_sample, subsampling_weight, mode = next(train_iterator)

        negative_score = model((positive_sample, negative_sample), mode=mode)

        if args.negative_adversarial_sampling:
            #In self-negative sampling, we do not apply back-propagation on the sampling weight
            negative_score = (F.softmax(negative_score * args.adversarial_temperature, dim = 1).detach()
                              * F.logsigmoid(-negative_score)).sum(dim = 1)
        else:
            negative_score = F.logsigmoid(-negative_score).mean(dim = 1)

        positive_score = model(positive_sample)

        positive_score = F.logsigmoid(positive_score).squeeze(dim = 1)

        if args.uni_weight:
            positive_sample_loss = positive_score.mean()
            negative_sample_loss = negative_score.mean()
        else:
            positive_sample_loss = - (subsampling_weight * positive_score).sum()/subsampling_weight.sum()
            negative_sample_loss = - (subsampling_weight * negative_score).sum()/subsampling_weight.sum()

        loss = (positive_sample_loss + negative_sample_loss)/2

        if args.regularization != 0.0:
            #Use L3 regularization for ComplEx and DistMult
            regularization = args.regularization * (
                model.entity_embedding.norm(p = 3)**3 +
                model.relation_embedding.norm(p = 3).norm(p = 3)**3
            )
            loss = loss + regularization
            regularization_log = {'regularization': regularization.item()}
        else:
            regularization_log = {}

        loss.backward()

        optimizer.step()

        log = {
            **regularization_log,
            'positive_sample_loss': positive_sample_loss.item(),
            'negative_sample_loss': negative_sample_loss.item(),
            'loss': loss.item()
        }

        return log

    @staticmethod
    def test_step(model, test_triples, all_true_triples, args):
        model.eval()
        test_dataloader_head = DataLoader(
            TestDataset(test_triples, all_true_triples, args.nentity, args.nrelation, 'head-batch'),
            batch_size=args.test_batch_size, num_workers=0, collate_fn=TestDataset.collate_fn)
        test_dataloader_tail = DataLoader(
            TestDataset(test_triples, all_true_triples, args.nentity, args.nrelation, 'tail-batch'),
            batch_size=args.test_batch_size, num_workers=0, collate_fn=TestDataset.collate_fn)
        test_dataset_list = [test_dataloader_head, test_dataloader_tail]
        logs = []
        with torch.no_grad():
            for test_dataset in test_dataset_list:
                for positive_sample, negative_sample, filter_bias, mode in test_dataset:
                    batch_size = positive_sample.size(0)

                    score = model((positive_sample, negative_sample), mode)
                    score += filter_bias

                    #Explicitly sort all the entities to ensure that there is no test exposure bias
                    argsort = torch.argsort(score, dim = 1, descending=True)

                    if mode == 'head-batch':
                        positive_arg = positive_sample[:, 0]
                    elif mode == 'tail-batch':
                        positive_arg = positive_sample[:, 2]
                    else:
                        raise ValueError('mode %s not supported' % mode)

                    for i in range(batch_size):
                        #Notice that argsort is not ranking
                        ranking = (argsort[i, :] == positive_arg[i]).nonzero()
                        assert ranking.size(0) == 1

                        #ranking + 1 is the true ranking used in evaluation metrics
                        ranking = 1 + ranking.item()
                        logs.append({
                            'MRR': 1.0/ranking,
                            'MR': float(ranking),
                            'HITS@10': 1.0 if ranking <= 10 else 0.0,
                        })

        metrics = {}
        for metric in logs[0].keys():
            metrics[metric] = sum([log[metric] for log in logs])/len(logs)

        return metrics


def make_kg(nentity=200, nrelation=6, seed=0):
    """ Synthetic KG: 10 entity types; relation r links type k to type (k + r + 1) % 10. """
    rng = np.random.RandomState(seed)
    etype = rng.randint(10, size=nentity)
    triples = set()
    for r in range(nrelation):
        for h in rng.choice(nentity, size=120, replace=False):
            cands = np.where(etype == (etype[h] + r + 1) % 10)[0]
            for t in rng.choice(cands, size=min(2, len(cands)), replace=False):
                triples.add((int(h), r, int(t)))
    triples = sorted(triples)
    rng.shuffle(triples)
    return triples[100:], triples[:100]


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    args = SimpleNamespace(nentity=200, nrelation=6, hidden_dim=32, gamma=6.0, negative_sample_size=32,
                           batch_size=64, learning_rate=0.01, max_steps=240, adversarial_temperature=1.0,
                           negative_adversarial_sampling=True, uni_weight=False, regularization=0.0,
                           test_batch_size=16, log_steps=50)
    train_triples, test_triples = make_kg(args.nentity, args.nrelation)
    all_true_triples = train_triples + test_triples

    kge_model = KGEModel(model_name='RotatE', nentity=args.nentity, nrelation=args.nrelation,
                         hidden_dim=args.hidden_dim, gamma=args.gamma, double_entity_embedding=True,
                         double_relation_embedding=False)

    train_dataloader_head = DataLoader(
        TrainDataset(train_triples, args.nentity, args.nrelation, args.negative_sample_size, 'head-batch'),
        batch_size=args.batch_size, shuffle=True, num_workers=0, collate_fn=TrainDataset.collate_fn)
    train_dataloader_tail = DataLoader(
        TrainDataset(train_triples, args.nentity, args.nrelation, args.negative_sample_size, 'tail-batch'),
        batch_size=args.batch_size, shuffle=True, num_workers=0, collate_fn=TrainDataset.collate_fn)
    train_iterator = BidirectionalOneShotIterator(train_dataloader_head, train_dataloader_tail)

    # Set training configuration
    current_learning_rate = args.learning_rate
    optimizer = torch.optim.Adam(
        filter(lambda p: p.requires_grad, kge_model.parameters()),
        lr=current_learning_rate
    )
    warm_up_steps = args.max_steps // 2

    m0 = KGEModel.test_step(kge_model, test_triples, all_true_triples, args)
    print('Test at step 0: MRR %.4f MR %.1f HITS@10 %.4f' % (m0['MRR'], m0['MR'], m0['HITS@10']))
    training_logs = []
    for step in range(0, args.max_steps):
        log = kge_model.train_step(kge_model, optimizer, train_iterator, args)
        training_logs.append(log)

        if step >= warm_up_steps:
            current_learning_rate = current_learning_rate / 10
            print('Change learning_rate to %f at step %d' % (current_learning_rate, step))
            optimizer = torch.optim.Adam(
                filter(lambda p: p.requires_grad, kge_model.parameters()),
                lr=current_learning_rate
            )
            warm_up_steps = warm_up_steps * 3

        if step % args.log_steps == 0:
            metrics = {}
            for metric in training_logs[0].keys():
                metrics[metric] = sum([log[metric] for log in training_logs])/len(training_logs)
            print('Training average at step %d: ' % step + ', '.join('%s %.4f' % kv for kv in metrics.items()))
            training_logs = []

    m = KGEModel.test_step(kge_model, test_triples, all_true_triples, args)
    print('Test at step %d: MRR %.4f MR %.1f HITS@10 %.4f' % (args.max_steps, m['MRR'], m['MR'], m['HITS@10']))
    print('[summary] filtered_MRR first=%.4f last=%.4f increased=%s' % (m0['MRR'], m['MRR'], m['MRR'] > m0['MRR']))


if __name__ == '__main__':
    main()
