"""English: per-sample side data looked up by batch position while the loader shuffles (`_ledger/_sidedata.py`)."""

MESSAGES = {
    "ledger.side_misaligned.message": "a per-sample input given next to the batches of shuffled loader {loader} ({where}) matches its own sample no better than the other samples of its batch (contrast {mixed} over {batches} batches), while the same input matches its samples in loader {other}, which keeps dataset order (contrast {ordered}): the side data is looked up by batch position, so the shuffled loader pairs each sample with another sample's row",
    "ledger.side_misaligned.cause": "the side data (fed-back masks, cached features, priors) is indexed by the batch counter (side[i * batch_size:(i + 1) * batch_size]) in dataset order, while the loader draws its samples in a new random order every epoch",
    "ledger.side_misaligned.next": "look the side data up by the samples' own indices: have the dataset return each sample's index (or the side row itself) and index the side data with it, or keep the loader in dataset order",
}
