"""English: the data ledger's evaluation passes (issue 25): each sample once per pass."""

MESSAGES = {
    "ledger.eval_duplicates.message": "one pass of evaluation loader {loader} ({where}, {ranks} rank(s)) delivered {delivered} samples for {distinct} distinct ones: {dup} evaluated twice (e.g. sample {example}); a metric averaged over the pass moves by up to {bias} points",
    "ledger.eval_duplicates.cause": "the sampler {sampler} repeats samples within one evaluation pass, so they count twice in any metric averaged over it",
    "ledger.eval_duplicates.next": "give the evaluation loader a sampler that yields each sample once (SequentialSampler), or de-duplicate the results by sample id before computing the metric",
    "ledger.eval_duplicates_ranks.cause": "DistributedSampler pads the evaluation split to a multiple of the world size by repeating its first samples, so a metric merged across ranks counts them twice and depends on the number of processes",
    "ledger.eval_duplicates_ranks.next": "de-duplicate the merged results by sample id (keep the first rank's), or evaluate the split on one rank, or pad-free with torch.utils.data.Subset shards of unequal size",
    "ledger.eval_lost.message": "one pass of evaluation loader {loader} ({where}, {ranks} rank(s)) delivered {distinct} distinct of its {n} samples: {lost} never evaluated; a metric over the pass misses up to {bias} points of the split",
    "ledger.eval_lost.cause": "the evaluation loader drops samples (drop_last=True leaves the final partial batch out), so the metric is computed on part of the split",
    "ledger.eval_lost.next": "build evaluation loaders with drop_last=False so that every sample is evaluated once",
    "ledger.eval_lost_ranks.cause": "the DistributedSampler of the evaluation loader was built with drop_last=True, so the tail of the split that does not fill every rank is never evaluated",
    "ledger.eval_lost_ranks.next": "build the evaluation DistributedSampler with drop_last=False and de-duplicate its padding by sample id when merging",
}
