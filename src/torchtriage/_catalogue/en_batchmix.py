"""Messages of the probe of samples that mix across a batch (English)."""

MESSAGES = {
    "silent.samples_mixed": "the outputs of {changed} of the other {others} samples of a batch changed when only sample 0 changed: the samples of the batch mix in the forward pass",
    "silent.samples_mixed.site": "the outputs of {changed} of the other {others} samples of a batch changed when only sample 0 changed: the samples mix first at {at}, which was given {layout}",
    "silent.samples_mixed.at": "the outputs of {changed} of the other {others} samples of a batch changed when only sample 0 changed: the samples mix first at {at}",
    "silent.samples_mixed.cause": "a layer reads the batch axis as another axis: an RNN / LSTM / GRU or an attention whose batch_first does not match the layout of the tensor it gets ((batch, time, feature) against (time, batch, feature)), a view / reshape where a permute / transpose was meant, or a softmax / normalisation over the batch axis. Each sample's prediction then depends on the other samples of its batch (and on the batch size), in training and at inference.",
    "silent.samples_mixed.next": "At that line, print the tensor's shape and the layer's batch_first: keep the batch axis where the layer expects it (batch_first=True for (batch, time, feature), or permute(1, 0, 2) before a time-major layer), and move axes with permute / transpose, not view.",
}
