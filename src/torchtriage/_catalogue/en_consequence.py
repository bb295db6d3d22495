"""English: errors counted on the earlier finding that caused them (`_triage/_consequence.py`)."""

MESSAGES = {
    "consequence.raised": "{error} (step {step}, {where}), on the non-finite values this finding made",
    "consequence.printed": "the values the error message prints",
    "consequence.no_line": "no line of yours",
}
