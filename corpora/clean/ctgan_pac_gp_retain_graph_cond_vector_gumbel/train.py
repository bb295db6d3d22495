# Source: sdv-dev/CTGAN, ctgan/synthesizers/ctgan.py + ctgan/data_sampler.py + ctgan/data_transformer.py,
# commit f4fcd21d96e291fb1d6b7a14b83236927560b81e
# https://github.com/sdv-dev/CTGAN
#
# CTGAN (tabular GAN): mode-specific normalisation of continuous columns (scalar in tanh + one-hot mode),
# conditional vectors with training-by-sampling (real rows drawn to match a PERMUTED copy of the condition), a
# PacGAN discriminator (pac=10 rows viewed as one input), WGAN-GP penalty on pac-grouped interpolates with
# create_graph=True, `pen.backward(retain_graph=True)` followed by `loss_d.backward()` on the same graph,
# gumbel-softmax (tau=0.2) outputs for one-hot spans (retried if NaN), the conditional cross-entropy computed on
# the generator's RAW pre-activation logits, Residual generator blocks that concatenate their input,
# zero_grad(set_to_none=False), Adam betas (0.5, 0.9).
# Adaptation: rdt is not installed, so DataTransformer uses sklearn's BayesianGaussianMixture directly (as the
# ClusterBasedNormalizer does; the mode is the most probable component instead of a sampled one); the "adult"
# CSV is replaced by 2000 generated rows (age bimodal, hours, education/workclass categories, income depending on
# education); embedding 128 -> 32, generator/discriminator dims (256, 256) -> (64, 64), batch 500 -> 200,
# epochs 300 -> 25; no tqdm; a marginal-fidelity score (1 - mean of KS / total-variation distances between real and
# sampled columns, as SDMetrics' column shapes) is printed every 5 epochs.
from collections import namedtuple

import numpy as np
import pandas as pd
import torch
from scipy.stats import ks_2samp
from sklearn.mixture import BayesianGaussianMixture
from torch import optim
from torch.nn import BatchNorm1d, Dropout, LeakyReLU, Linear, Module, ReLU, Sequential, functional

SpanInfo = namedtuple('SpanInfo', ['dim', 'activation_fn'])
ColumnTransformInfo = namedtuple(
    'ColumnTransformInfo',
    ['column_name', 'column_type', 'transform', 'output_info', 'output_dimensions'],
)


# ------------------------------------------------------------------------------------- data_transformer.py
class DataTransformer(object):
    """Data Transformer: continuous columns -> (tanh scalar, one-hot mode); discrete -> one-hot."""

    def __init__(self, max_clusters=10, weight_threshold=0.005):
        self._max_clusters = max_clusters
        self._weight_threshold = weight_threshold

    def _fit_continuous(self, data):
        column_name = data.columns[0]
        gm = BayesianGaussianMixture(
            n_components=min(len(data), self._max_clusters),
            weight_concentration_prior_type='dirichlet_process',
            weight_concentration_prior=0.001,
            max_iter=100,
            n_init=1,
            random_state=0,
        )
        gm.fit(data.to_numpy().reshape(-1, 1))
        valid = gm.weights_ > self._weight_threshold
        num_components = int(valid.sum())
        return ColumnTransformInfo(
            column_name=column_name,
            column_type='continuous',
            transform=(gm, valid),
            output_info=[SpanInfo(1, 'tanh'), SpanInfo(num_components, 'softmax')],
            output_dimensions=1 + num_components,
        )

    def _fit_discrete(self, data):
        column_name = data.columns[0]
        categories = sorted(data[column_name].unique())
        num_categories = len(categories)
        return ColumnTransformInfo(
            column_name=column_name,
            column_type='discrete',
            transform=categories,
            output_info=[SpanInfo(num_categories, 'softmax')],
            output_dimensions=num_categories,
        )

    def fit(self, raw_data, discrete_columns=()):
        self.output_info_list = []
        self.output_dimensions = 0
        self.dataframe = True
        self._column_transform_info_list = []
        for column_name in raw_data.columns:
            if column_name in discrete_columns:
                column_transform_info = self._fit_discrete(raw_data[[column_name]])
            else:
                column_transform_info = self._fit_continuous(raw_data[[column_name]])

            self.output_info_list.append(column_transform_info.output_info)
            self.output_dimensions += column_transform_info.output_dimensions
            self._column_transform_info_list.append(column_transform_info)

    def _transform_continuous(self, column_transform_info, data):
        gm, valid = column_transform_info.transform
        x = data.to_numpy().reshape(-1, 1)
        means = gm.means_.reshape(-1)[valid]
        stds = np.sqrt(gm.covariances_.reshape(-1))[valid]
        probs = gm.predict_proba(x)[:, valid]
        comp = probs.argmax(1)
        normalized = np.clip((x[:, 0] - means[comp]) / (4 * stds[comp]), -.99, .99)
        output = np.zeros((len(data), column_transform_info.output_dimensions))
        output[:, 0] = normalized
        output[np.arange(len(data)), 1 + comp] = 1.0
        return output

    def _transform_discrete(self, column_transform_info, data):
        categories = column_transform_info.transform
        index = np.searchsorted(categories, data.to_numpy())
        output = np.zeros((len(data), len(categories)))
        output[np.arange(len(data)), index] = 1.0
        return output

    def transform(self, raw_data):
        column_data_list = []
        for column_transform_info in self._column_transform_info_list:
            data = raw_data[column_transform_info.column_name]
            if column_transform_info.column_type == 'continuous':
                column_data_list.append(self._transform_continuous(column_transform_info, data))
            else:
                column_data_list.append(self._transform_discrete(column_transform_info, data))
        return np.concatenate(column_data_list, axis=1).astype(float)

    def inverse_transform(self, data):
        st = 0
        recovered = {}
        for column_transform_info in self._column_transform_info_list:
            dim = column_transform_info.output_dimensions
            column_data = data[:, st:st + dim]
            if column_transform_info.column_type == 'continuous':
                gm, valid = column_transform_info.transform
                means = gm.means_.reshape(-1)[valid]
                stds = np.sqrt(gm.covariances_.reshape(-1))[valid]
                comp = np.argmax(column_data[:, 1:], axis=1)
                value = np.clip(column_data[:, 0], -1, 1) * 4 * stds[comp] + means[comp]
                recovered[column_transform_info.column_name] = value
            else:
                categories = column_transform_info.transform
                recovered[column_transform_info.column_name] = np.array(categories)[column_data.argmax(1)]
            st += dim
        return pd.DataFrame(recovered)


# ----------------------------------------------------------------------------------------- data_sampler.py
class DataSampler(object):
    """DataSampler samples the conditional vector and corresponding data for CTGAN."""

    def __init__(self, data, output_info, log_frequency):
        self._data_length = len(data)

        def is_discrete_column(column_info):
            return len(column_info) == 1 and column_info[0].activation_fn == 'softmax'

        n_discrete_columns = sum([
            1 for column_info in output_info if is_discrete_column(column_info)
        ])

        self._discrete_column_matrix_st = np.zeros(n_discrete_columns, dtype='int32')

        # Store the row id for each category in each discrete column.
        # For example _rid_by_cat_cols[a][b] is a list of all rows with the
        # a-th discrete column equal value b.
        self._rid_by_cat_cols = []

        # Compute _rid_by_cat_cols
        st = 0
        for column_info in output_info:
            if is_discrete_column(column_info):
                span_info = column_info[0]
                ed = st + span_info.dim

                rid_by_cat = []
                for j in range(span_info.dim):
                    rid_by_cat.append(np.nonzero(data[:, st + j])[0])
                self._rid_by_cat_cols.append(rid_by_cat)
                st = ed
            else:
                st += sum([span_info.dim for span_info in column_info])
        assert st == data.shape[1]

        # Prepare an interval matrix for efficiently sample conditional vector
        max_category = max(
            [column_info[0].dim for column_info in output_info if is_discrete_column(column_info)],
            default=0,
        )

        self._discrete_column_cond_st = np.zeros(n_discrete_columns, dtype='int32')
        self._discrete_column_n_category = np.zeros(n_discrete_columns, dtype='int32')
        self._discrete_column_category_prob = np.zeros((n_discrete_columns, max_category))
        self._n_discrete_columns = n_discrete_columns
        self._n_categories = sum([
            column_info[0].dim for column_info in output_info if is_discrete_column(column_info)
        ])

        st = 0
        current_id = 0
        current_cond_st = 0
        for column_info in output_info:
            if is_discrete_column(column_info):
                span_info = column_info[0]
                ed = st + span_info.dim
                category_freq = np.sum(data[:, st:ed], axis=0)
                if log_frequency:
                    category_freq = np.log(category_freq + 1)
                category_prob = category_freq / np.sum(category_freq)
                self._discrete_column_category_prob[current_id, : span_info.dim] = category_prob
                self._discrete_column_cond_st[current_id] = current_cond_st
                self._discrete_column_n_category[current_id] = span_info.dim
                current_cond_st += span_info.dim
                current_id += 1
                st = ed
            else:
                st += sum([span_info.dim for span_info in column_info])

    def _random_choice_prob_index(self, discrete_column_id):
        probs = self._discrete_column_category_prob[discrete_column_id]
        r = np.expand_dims(np.random.rand(probs.shape[0]), axis=1)
        return (probs.cumsum(axis=1) > r).argmax(axis=1)

    def sample_condvec(self, batch):
        """Generate the conditional vector for training."""
        if self._n_discrete_columns == 0:
            return None

        discrete_column_id = np.random.choice(np.arange(self._n_discrete_columns), batch)

        cond = np.zeros((batch, self._n_categories), dtype='float32')
        mask = np.zeros((batch, self._n_discrete_columns), dtype='float32')
        mask[np.arange(batch), discrete_column_id] = 1
        category_id_in_col = self._random_choice_prob_index(discrete_column_id)
        category_id = self._discrete_column_cond_st[discrete_column_id] + category_id_in_col
        cond[np.arange(batch), category_id] = 1

        return cond, mask, discrete_column_id, category_id_in_col

    def sample_original_condvec(self, batch):
        """Generate the conditional vector for generation use original frequency."""
        if self._n_discrete_columns == 0:
            return None

        category_freq = self._discrete_column_category_prob.flatten()
        category_freq = category_freq[category_freq != 0]
        category_freq = category_freq / np.sum(category_freq)
        col_idxs = np.random.choice(np.arange(len(category_freq)), batch, p=category_freq)
        cond = np.zeros((batch, self._n_categories), dtype='float32')
        cond[np.arange(batch), col_idxs] = 1

        return cond

    def sample_data(self, data, n, col, opt):
        """Sample data from original training data satisfying the sampled conditional vector."""
        if col is None:
            idx = np.random.randint(len(data), size=n)
            return data[idx]

        idx = []
        for c, o in zip(col, opt):
            idx.append(np.random.choice(self._rid_by_cat_cols[c][o]))

        return data[idx]

    def dim_cond_vec(self):
        """Return the total number of categories."""
        return self._n_categories


# ------------------------------------------------------------------------------------ synthesizers/ctgan.py
class Discriminator(Module):
    """Discriminator for the CTGAN."""

    def __init__(self, input_dim, discriminator_dim, pac=10):
        super(Discriminator, self).__init__()
        dim = input_dim * pac
        self.pac = pac
        self.pacdim = dim
        seq = []
        for item in list(discriminator_dim):
            seq += [Linear(dim, item), LeakyReLU(0.2), Dropout(0.5)]
            dim = item

        seq += [Linear(dim, 1)]
        self.seq = Sequential(*seq)

    def calc_gradient_penalty(self, real_data, fake_data, device='cpu', pac=10, lambda_=10):
        """Compute the gradient penalty."""
        alpha = torch.rand(real_data.size(0) // pac, 1, 1, device=device)
        alpha = alpha.repeat(1, pac, real_data.size(1))
        alpha = alpha.view(-1, real_data.size(1))

        interpolates = alpha * real_data + ((1 - alpha) * fake_data)

        disc_interpolates = self(interpolates)

        gradients = torch.autograd.grad(
            outputs=disc_interpolates,
            inputs=interpolates,
            grad_outputs=torch.ones(disc_interpolates.size(), device=device),
            create_graph=True,
            retain_graph=True,
            only_inputs=True,
        )[0]

        gradients_view = gradients.view(-1, pac * real_data.size(1)).norm(2, dim=1) - 1
        gradient_penalty = ((gradients_view) ** 2).mean() * lambda_

        return gradient_penalty

    def forward(self, input_):
        """Apply the Discriminator to the `input_`."""
        assert input_.size()[0] % self.pac == 0
        return self.seq(input_.view(-1, self.pacdim))


class Residual(Module):
    """Residual layer for the CTGAN."""

    def __init__(self, i, o):
        super(Residual, self).__init__()
        self.fc = Linear(i, o)
        self.bn = BatchNorm1d(o)
        self.relu = ReLU()

    def forward(self, input_):
        """Apply the Residual layer to the `input_`."""
        out = self.fc(input_)
        out = self.bn(out)
        out = self.relu(out)
        return torch.cat([out, input_], dim=1)


class Generator(Module):
    """Generator for the CTGAN."""

    def __init__(self, embedding_dim, generator_dim, data_dim):
        super(Generator, self).__init__()
        dim = embedding_dim
        seq = []
        for item in list(generator_dim):
            seq += [Residual(dim, item)]
            dim += item
        seq.append(Linear(dim, data_dim))
        self.seq = Sequential(*seq)

    def forward(self, input_):
        """Apply the Generator to the `input_`."""
        data = self.seq(input_)
        return data


class CTGAN(object):
    """Conditional Table GAN Synthesizer."""

    def __init__(self, embedding_dim=128, generator_dim=(256, 256), discriminator_dim=(256, 256),
                 generator_lr=2e-4, generator_decay=1e-6, discriminator_lr=2e-4, discriminator_decay=1e-6,
                 batch_size=500, discriminator_steps=1, log_frequency=True, verbose=False, epochs=300, pac=10):
        assert batch_size % 2 == 0

        self._embedding_dim = embedding_dim
        self._generator_dim = generator_dim
        self._discriminator_dim = discriminator_dim

        self._generator_lr = generator_lr
        self._generator_decay = generator_decay
        self._discriminator_lr = discriminator_lr
        self._discriminator_decay = discriminator_decay

        self._batch_size = batch_size
        self._discriminator_steps = discriminator_steps
        self._log_frequency = log_frequency
        self._verbose = verbose
        self._epochs = epochs
        self.pac = pac
        self._device = torch.device('cpu')

        self._transformer = None
        self._data_sampler = None
        self._generator = None
        self.loss_values = None

    @staticmethod
    def _gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
        for _ in range(10):
            transformed = functional.gumbel_softmax(logits, tau=tau, hard=hard, eps=eps, dim=dim)
            if not torch.isnan(transformed).any():
                return transformed

        raise ValueError('gumbel_softmax returning NaN.')

    def _apply_activate(self, data):
        """Apply proper activation function to the output of the generator."""
        data_t = []
        st = 0
        for column_info in self._transformer.output_info_list:
            for span_info in column_info:
                if span_info.activation_fn == 'tanh':
                    ed = st + span_info.dim
                    data_t.append(torch.tanh(data[:, st:ed]))
                    st = ed
                elif span_info.activation_fn == 'softmax':
                    ed = st + span_info.dim
                    transformed = self._gumbel_softmax(data[:, st:ed], tau=0.2)
                    data_t.append(transformed)
                    st = ed
                else:
                    raise ValueError(f'Unexpected activation function {span_info.activation_fn}.')

        return torch.cat(data_t, dim=1)

    def _cond_loss(self, data, c, m):
        """Compute the cross entropy loss on the fixed discrete column."""
        loss = []
        st = 0
        st_c = 0
        for column_info in self._transformer.output_info_list:
            for span_info in column_info:
                if len(column_info) != 1 or span_info.activation_fn != 'softmax':
                    # not discrete column
                    st += span_info.dim
                else:
                    ed = st + span_info.dim
                    ed_c = st_c + span_info.dim
                    tmp = functional.cross_entropy(
                        data[:, st:ed], torch.argmax(c[:, st_c:ed_c], dim=1), reduction='none'
                    )
                    loss.append(tmp)
                    st = ed
                    st_c = ed_c

        loss = torch.stack(loss, dim=1)  # noqa: PD013

        return (loss * m).sum() / data.size()[0]

    def fit(self, train_data, discrete_columns=(), epochs=None, callback=None):
        """Fit the CTGAN Synthesizer models to the training data."""
        if epochs is None:
            epochs = self._epochs

        self._transformer = DataTransformer()
        self._transformer.fit(train_data, discrete_columns)

        train_data = self._transformer.transform(train_data)

        self._data_sampler = DataSampler(
            train_data, self._transformer.output_info_list, self._log_frequency
        )

        data_dim = self._transformer.output_dimensions

        self._generator = Generator(
            self._embedding_dim + self._data_sampler.dim_cond_vec(), self._generator_dim, data_dim
        ).to(self._device)

        discriminator = Discriminator(
            data_dim + self._data_sampler.dim_cond_vec(), self._discriminator_dim, pac=self.pac
        ).to(self._device)

        optimizerG = optim.Adam(
            self._generator.parameters(),
            lr=self._generator_lr,
            betas=(0.5, 0.9),
            weight_decay=self._generator_decay,
        )

        optimizerD = optim.Adam(
            discriminator.parameters(),
            lr=self._discriminator_lr,
            betas=(0.5, 0.9),
            weight_decay=self._discriminator_decay,
        )

        mean = torch.zeros(self._batch_size, self._embedding_dim, device=self._device)
        std = mean + 1

        self.loss_values = pd.DataFrame(columns=['Epoch', 'Generator Loss', 'Distriminator Loss'])

        if callback is not None:
            callback(-1, None, None)
        steps_per_epoch = max(len(train_data) // self._batch_size, 1)
        for i in range(epochs):
            for id_ in range(steps_per_epoch):
                for n in range(self._discriminator_steps):
                    fakez = torch.normal(mean=mean, std=std)

                    condvec = self._data_sampler.sample_condvec(self._batch_size)
                    if condvec is None:
                        c1, m1, col, opt = None, None, None, None
                        real = self._data_sampler.sample_data(
                            train_data, self._batch_size, col, opt
                        )
                    else:
                        c1, m1, col, opt = condvec
                        c1 = torch.from_numpy(c1).to(self._device)
                        m1 = torch.from_numpy(m1).to(self._device)
                        fakez = torch.cat([fakez, c1], dim=1)

                        perm = np.arange(self._batch_size)
                        np.random.shuffle(perm)
                        real = self._data_sampler.sample_data(
                            train_data, self._batch_size, col[perm], opt[perm]
                        )
                        c2 = c1[perm]

                    fake = self._generator(fakez)
                    fakeact = self._apply_activate(fake)

                    real = torch.from_numpy(real.astype('float32')).to(self._device)

                    if c1 is not None:
                        fake_cat = torch.cat([fakeact, c1], dim=1)
                        real_cat = torch.cat([real, c2], dim=1)
                    else:
                        real_cat = real
                        fake_cat = fakeact

                    y_fake = discriminator(fake_cat)
                    y_real = discriminator(real_cat)

                    pen = discriminator.calc_gradient_penalty(
                        real_cat, fake_cat, self._device, self.pac
                    )
                    loss_d = -(torch.mean(y_real) - torch.mean(y_fake))

                    optimizerD.zero_grad(set_to_none=False)
                    pen.backward(retain_graph=True)
                    loss_d.backward()
                    optimizerD.step()

                fakez = torch.normal(mean=mean, std=std)
                condvec = self._data_sampler.sample_condvec(self._batch_size)

                if condvec is None:
                    c1, m1, col, opt = None, None, None, None
                else:
                    c1, m1, col, opt = condvec
                    c1 = torch.from_numpy(c1).to(self._device)
                    m1 = torch.from_numpy(m1).to(self._device)
                    fakez = torch.cat([fakez, c1], dim=1)

                fake = self._generator(fakez)
                fakeact = self._apply_activate(fake)

                if c1 is not None:
                    y_fake = discriminator(torch.cat([fakeact, c1], dim=1))
                else:
                    y_fake = discriminator(fakeact)

                if condvec is None:
                    cross_entropy = 0
                else:
                    cross_entropy = self._cond_loss(fake, c1, m1)

                loss_g = -torch.mean(y_fake) + cross_entropy

                optimizerG.zero_grad(set_to_none=False)
                loss_g.backward()
                optimizerG.step()

            generator_loss = loss_g.detach().cpu().item()
            discriminator_loss = loss_d.detach().cpu().item()

            epoch_loss_df = pd.DataFrame({
                'Epoch': [i],
                'Generator Loss': [generator_loss],
                'Discriminator Loss': [discriminator_loss],
            })
            if not self.loss_values.empty:
                self.loss_values = pd.concat([self.loss_values, epoch_loss_df]).reset_index(
                    drop=True
                )
            else:
                self.loss_values = epoch_loss_df
            if callback is not None:
                callback(i, generator_loss, discriminator_loss)

    def sample(self, n):
        """Sample data similar to the training data."""
        self._generator.eval()
        steps = n // self._batch_size + 1
        data = []
        with torch.no_grad():
            for i in range(steps):
                mean = torch.zeros(self._batch_size, self._embedding_dim)
                std = mean + 1
                fakez = torch.normal(mean=mean, std=std).to(self._device)

                condvec = self._data_sampler.sample_original_condvec(self._batch_size)
                if condvec is not None:
                    c1 = torch.from_numpy(condvec).to(self._device)
                    fakez = torch.cat([fakez, c1], dim=1)

                fake = self._generator(fakez)
                fakeact = self._apply_activate(fake)
                data.append(fakeact.detach().cpu().numpy())
        self._generator.train()

        data = np.concatenate(data, axis=0)
        data = data[:n]

        return self._transformer.inverse_transform(data)


# ----------------------------------------------------------------------------------------------------- data
def make_adult_like(n=2000, seed=0):
    rng = np.random.RandomState(seed)
    education = rng.choice(['HS-grad', 'Some-college', 'Bachelors', 'Masters'], n, p=[0.4, 0.3, 0.2, 0.1])
    workclass = rng.choice(['Private', 'Self-emp', 'Gov'], n, p=[0.7, 0.15, 0.15])
    age = np.where(rng.rand(n) < 0.6, rng.normal(28, 4, n), rng.normal(50, 6, n))
    edu_level = pd.Series(education).map({'HS-grad': 0, 'Some-college': 1, 'Bachelors': 2, 'Masters': 3}).to_numpy()
    income = np.exp(rng.normal(10.0 + 0.25 * edu_level, 0.3, n)) / 1000.0
    hours = np.where(rng.rand(n) < 0.7, 40 + rng.normal(0, 1, n), rng.normal(50, 8, n))
    return pd.DataFrame({'age': age, 'workclass': workclass, 'education': education,
                         'hours_per_week': hours, 'income_k': income})


def column_shapes_score(real, synthetic, discrete_columns):
    """1 - KS statistic for continuous columns, 1 - total variation distance for discrete ones; mean over columns."""
    scores = []
    for column in real.columns:
        if column in discrete_columns:
            p = real[column].value_counts(normalize=True)
            q = synthetic[column].value_counts(normalize=True).reindex(p.index, fill_value=0.0)
            scores.append(1 - 0.5 * np.abs(p - q).sum())
        else:
            scores.append(1 - ks_2samp(real[column], synthetic[column]).statistic)
    return float(np.mean(scores))


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    real_data = make_adult_like()
    discrete_columns = ['workclass', 'education']

    ctgan = CTGAN(embedding_dim=32, generator_dim=(64, 64), discriminator_dim=(64, 64), batch_size=200,
                  epochs=25, pac=10)
    scores = []

    def callback(epoch, g_loss, d_loss):
        if epoch == -1 or (epoch + 1) % 5 == 0:
            score = column_shapes_score(real_data, ctgan.sample(1000), discrete_columns)
            scores.append(score)
            if epoch == -1:
                print(f"Epoch 0 (untrained): column shapes score {score:.4f}")
            else:
                print(f"Epoch {epoch + 1}: Gen. {g_loss:.4f} | Discrim. {d_loss:.4f} | column shapes score {score:.4f}")

    ctgan.fit(real_data, discrete_columns, callback=callback)
    print(f"[summary] column shapes score first={scores[0]:.4f} last={scores[-1]:.4f} increased={scores[-1] > scores[0]}")


if __name__ == '__main__':
    main()
