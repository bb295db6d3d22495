"""Messages of the session-11 checks on the scale of inputs and of pass metrics (English)."""

MESSAGES = {
    "data.int_scaled_as_narrower": "{dtype} data divided by {c}, the maximum of {kind} data: its values reach {top} (its type holds up to {limit}), so the result reaches {q} instead of staying in [0, 1]",
    "data.int_scaled_as_narrower.cause": "the scale constant was written for {kind} data and this tensor is wider (a 16-bit image decoded as uint16 / int32): the inputs fall far outside the range the code normalises them to, and the model trains on them as they are.",
    "data.int_scaled_as_narrower.next": "Divide by the maximum of the data's own type (torch.iinfo(x.dtype).max) or of its bit depth, before converting it to float.",
}
