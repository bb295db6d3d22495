"""English: the tensor a second backward() ran into (`_triage/_freed.py`)."""

MESSAGES = {
    "freed.through": " (through {name})",
    "freed.kept": " (a tensor kept across steps, e.g. a hidden state)",
    "freed.held": ": {name}{made} belongs to a graph that an earlier backward() already ran through and freed{entered}",
    "freed.made": " (made at {made})",
    "freed.entered": "; it enters this backward's graph at {where}",
    "freed.carried": ": a tensor whose graph an earlier backward() freed enters this backward's graph at {where} (a tensor kept across steps, e.g. a hidden state)",
    "freed.carried_named": ": {name}, carried from one step to the next at {where}, still holds the graph of an earlier step, which that step's backward() freed (a hidden state not detached)",
    "freed.next.carried": "detach it where it is carried ({name} = {name}.detach() before the next step: truncated backpropagation through time); retain_graph=True would instead backpropagate through every earlier step, each step slower",
    "freed.root": ": {name}{made} was already backpropagated by an earlier backward(), which freed its graph",
    "freed.next.root": "call backward() once per loss (sum the losses first when several share a graph); retain_graph=True on the first backward of {name} only when both passes are meant",
    "freed.next.generic": "detach tensors carried across steps (h = h.detach()); use retain_graph=True only when two backward passes are meant",
    "freed.next.held": "use {name}.detach() where it is reused when no gradient should flow back through it a second time (a GAN's discriminator step on the generator's output), or compute {name} again; retain_graph=True on the first backward() only when both passes are meant",
}
