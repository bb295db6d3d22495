"""English: an average's denominator is the count of what was summed (session 9)."""

MESSAGES = {
    "denominator.message": "a sum over the pass is divided by {expr} = {value}, but the pass delivered {batches} batches of {samples} samples: the mean is {factor} times the mean over the {what} summed",
    "denominator.cause": "the denominator is not the number of things the loop summed: a fixed length (a configured maximum of batches) when the loader has fewer, or the size of the whole dataset when this process saw a shard of it (DistributedSampler, a sampler over part of the dataset), so the reported mean is scaled by the ratio",
    "denominator.next": "count what the loop sums (n += 1 per batch, or n += batch size) and divide by that count, or divide by len(loader) / the sampler's length; under DDP divide the rank's sum by the rank's own count, or all_reduce sum and count first",
    "denominator.shard.cause": "under DDP each rank's DistributedSampler gives it 1 / {world} of the set, but its sum is divided by the size of the whole set: every rank reports {factor} times its own mean (and decisions taken on it, a scheduler on plateau or the best checkpoint, follow the scaled number)",
    "denominator.shard.next": "divide each rank's sum by the samples this rank saw (count them in the loop), or all_reduce the sum and the count across ranks before dividing",
}
