"""English: the data ledger's token streams (issue 25): windows over a 1-D array of token ids."""

MESSAGES = {
    "ledger.stream_split.message": "{count} of {n} {k}-token windows ({share}) of the token stream evaluated at {eval_where} were trained on: the same {k} tokens are in the sequences trained on at {train_where} (e.g. evaluation position {example})",
    "ledger.stream_split.cause": "the evaluation tokens overlap the training tokens: the validation stretch of the token array (or its documents) is also inside the training shards or slices",
    "ledger.stream_split.next": "cut the token array (or its list of documents) once into disjoint ranges, build the training shards only from the training range, and evaluate only on the held-out range",
}
