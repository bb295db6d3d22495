"""Messages of the contrastive loss whose positive pairs are each an embedding with itself (English)."""

MESSAGES = {
    "silent.contrastive_self_pairs": "the positive pair of each of {rows} rows of this contrastive loss is an embedding with itself: both vectors of every labelled pair are identical (the row's logit is its self-similarity; {hits} of {n} rows already rank their positive first)",
    "silent.contrastive_self_pairs.cause": "the two views passed to the loss are the same rows: a slice taken twice (embed[:bs] for both views where the second is embed[bs:]), the first view's tensor passed for the second, or both views made from one augmentation. The loss is low by construction and teaches the encoder nothing about matching two views of a sample.",
    "silent.contrastive_self_pairs.next": "At that line, print which rows each view takes (the slice bounds, the tensor passed for each view) and check that view 1 and view 2 come from different augmentations: their max |difference| must not be 0.",
}
