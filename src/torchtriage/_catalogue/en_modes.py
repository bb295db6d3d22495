"""Messages of what is random in evaluation (issue 26 item 5, modes)."""

MESSAGES = {
    "modes.eval_random":
        "{model} in eval() mode runs random ops in its forward: {count} module(s), first {first}; the same batch "
        "evaluated twice gives different outputs",
    "modes.eval_random.cause":
        "eval() switches off nn.Dropout and makes BatchNorm use its running statistics, but ops that draw random "
        "numbers in a forward (torch.randn, bernoulli, a dropout called with training=True or switched back to "
        "train()) still draw them: an evaluation metric then varies from run to run",
    "modes.eval_random.next":
        "if the sampling is meant (a VAE's sample, MC dropout), pass a torch.Generator to make it repeatable; "
        "otherwise return the deterministic value in eval() mode (if self.training: ...) and keep dropout modules "
        "in eval()",
    "modes.eval_bn_updates":
        "{model} is in eval() mode but {count} BatchNorm module(s) ({first}, ...) are in train() mode: the "
        "evaluation forward changed their running statistics",
    "modes.eval_bn_updates.training":
        "{model} is in eval() mode but {count} BatchNorm module(s) ({first}, ...) ran in train() mode in a forward "
        "whose output fed a training step (a backward followed before its next forward): batch statistics on "
        "purpose (a momentum key encoder, an EMA teacher), no evaluation result used them",
    "modes.eval_bn_updates.training.next":
        "nothing to change if batch statistics are meant; when this model is evaluated, put its BatchNorms in eval() "
        "too",
    "modes.eval_bn_updates.cause":
        "a BatchNorm in train() mode normalizes with the batch's own statistics and folds them into its running "
        "mean and variance, so the evaluation data now shape every later forward, and the evaluated output "
        "depends on the batch it sits in",
    "modes.eval_bn_updates.next":
        "do not switch BatchNorm modules back to train() after model.eval() (a loop that calls .train() on "
        "submodules, a module built after eval()); call model.eval() right before evaluating",
}
