"""Messages of the sharded evaluation pass whose metric stays one rank's (issue 26, session 8)."""

MESSAGES = {
    "evalsync.not_reduced":
        "the evaluation pass over the loader made at {where} ({sampler}) gave this rank {samples} of the "
        "{size} samples ({share} %), and no collective combined the ranks' results afterwards: the metric "
        "each rank computed is of its own shard only",
    "evalsync.not_reduced.cause":
        "a DistributedSampler splits the evaluation set across the {world} ranks; without an all_reduce of the "
        "metric's sums and counts (or an all_gather of the predictions) each rank reports a different number, "
        "none of them the metric of the whole set, and decisions taken on it (the best checkpoint, early "
        "stopping) differ per rank",
    "evalsync.hand_sharded":
        "the evaluation forwards at {where} saw other inputs on each of the {world} ranks (the set cut per rank by "
        "hand) and no collective combined the ranks' results afterwards: rank 0's metric covers its {forwards} of the "
        "{total} evaluated batches ({share} %), the rest were evaluated on the other ranks and thrown away",
    "evalsync.hand_sharded.cause":
        "the evaluation data is sharded across the ranks like the training data, but only one rank reports the "
        "metric (and keeps the best checkpoint) without an all_reduce of the sums and counts, so the reported number "
        "and the model selected are those of one rank's subset of the evaluation set",
    "evalsync.not_reduced.next":
        "all-reduce the metric's sum and count across ranks before dividing (t = torch.tensor([correct, total]); "
        "dist.all_reduce(t); acc = t[0] / t[1]), or gather the predictions (torchmetrics, "
        "accelerator.gather_for_metrics), or evaluate the whole set on one rank",
}
