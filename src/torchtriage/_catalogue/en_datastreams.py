"""English: the data ledger's token streams (issue 25): windows over a 1-D array of token ids."""

MESSAGES = {
    "ledger.stream_split.message": "{count} of {n} {k}-token windows ({share}) of the token stream evaluated at {eval_where} were trained on: the same {k} tokens are in the sequences trained on at {train_where} (e.g. evaluation position {example})",
    "ledger.stream_split.cause": "the evaluation tokens overlap the training tokens: the validation stretch of the token array (or its documents) is also inside the training shards or slices",
    "ledger.stream_split.next": "cut the token array (or its list of documents) once into disjoint ranges, build the training shards only from the training range, and evaluate only on the held-out range",
    "ledger.window_split.message": "{count} of {n} samples ({share}) that loader {eval} ({eval_where}) only evaluates on share most of their steps along axis {axis} with samples trained on through loader {train} ({train_where}): overlapping windows of one series, split after windowing (e.g. sample {example})",
    "ledger.window_unloaded.message": "{count} of {n} samples ({share}) of held-out dataset {eval} ({eval_where}), which no DataLoader iterates, share most of their steps along axis {axis} with samples trained on through loader {train} ({train_where}): overlapping windows of one series, split after windowing (e.g. sample {example})",
    "ledger.window_split.cause": "the samples are windows cut from one series with a stride shorter than the window and split at random: each evaluation window's steps are inside its training neighbours, so the evaluation measures interpolation of data already trained on",
    "ledger.window_split.next": "split the series first (by time, or by whole days / sequences), then cut windows inside each part; leave a gap of one window between the parts",
    "ledger.edge_reverse.message": "{count} of {n} edges ({share}) evaluated at {eval_where} are training edges read in the other direction: their reverse edge is in the graph trained on at {train_where}, where {symmetric} of the edges are stored in both directions (e.g. edge {u} -> {v} evaluated, {v} -> {u} trained on)",
    "ledger.edge_reverse.cause": "the graph stores each undirected link as two directed edges and the split permuted the directed edge ids, not the links: the two directions of a link landed in different splits, so the held-out link stays in the training positives and the message-passing graph",
    "ledger.edge_reverse.next": "split links, not directed edges: keep an edge and its reverse in the same split (permute the link ids and add both directions of each), and remove both directions of every held-out link from the message-passing graph",
}
