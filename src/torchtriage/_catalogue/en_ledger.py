"""English: the data ledger (issue 25): coverage, order, splits and ranks of the samples."""

MESSAGES = {
    "ledger.coverage.message": "{lost} of {samples} samples ({share}) that loader {loader} delivered in {epochs} complete epoch(s) never reached a backward pass ({batches} of {per_epoch} batches in the first such epoch)",
    "ledger.coverage.cause": "the loop skips batches before their loss is backpropagated ({skip}), so each epoch trains on less data than the sampler delivers",
    "ledger.coverage.next": "filter the data before building the loader (or use drop_last=True for a final partial batch) so that what the sampler delivers is what is trained on",
    "ledger.coverage_unknown.cause": "the loop asked for the next batch before running a forward or a backward with these batches, so each epoch trains on less data than the sampler delivers",
    "ledger.coverage_unknown.next": "look for a condition that skips batches in the loop, and filter the data before building the loader instead",
    "ledger.order.message": "loader {loader} ({where}) delivered the same sample order again in epoch(s) {epochs} of {compared} complete epochs, although its {sampler} shuffles",
    "ledger.order.cause": "the shuffling generator was re-seeded with the same seed before each epoch (a fixed generator= given to a loader built each epoch, or torch.manual_seed inside the epoch loop), so every epoch replays one order",
    "ledger.order.next": "seed once, before the epoch loop, and build the loader once",
    "ledger.order_set_epoch.cause": "a DistributedSampler shuffles with seed + epoch, and set_epoch() was never called (its epoch stayed {epoch}), so every epoch replays the same order on every rank",
    "ledger.order_set_epoch.next": "call sampler.set_epoch(epoch) at the start of each epoch, before iterating the loader",
    "ledger.split.message": "{count} of {n} samples ({share}) that loader {eval} ({eval_where}) only evaluates on were trained on through loader {train} ({train_where}); matched by {how}, e.g. sample {example}",
    "ledger.split.cause": "the evaluation data is not held out: it overlaps the training data (index ranges that intersect in a split made by hand, the whole dataset in the training loader, a second dataset built from the same rows)",
    "ledger.split.next": "cut one permutation of the indices into disjoint parts, build every split from it, and check that the training and evaluation indices do not intersect",
    "ledger.ranks.message": "ranks {a} and {b} drew {count} of {n} samples ({share}) of the same epoch from loader {loader} ({where}), whose sampler is {sampler}",
    "ledger.ranks.cause": "without a DistributedSampler every rank iterates the whole dataset: the ranks train on the same samples, and an epoch costs world_size times the work for one epoch of data",
    "ledger.ranks.next": "DataLoader(dataset, sampler=DistributedSampler(dataset), ...) (no shuffle=True beside it) and sampler.set_epoch(epoch) each epoch",
    "ledger.ranks_same_rank.cause": "the DistributedSampler was given the same rank (or num_replicas=1) on every process, so each rank draws the same shard",
    "ledger.ranks_same_rank.next": "build the DistributedSampler after init_process_group without rank= / num_replicas= (they default to the process group's)",
}
