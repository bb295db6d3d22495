"""English: the gradient chain (issue 4)."""

MESSAGES = {
    # static: registration and frozen parameters
    "gradients.unregistered_tensor.message":
        "{parameter} is a tensor with requires_grad=True stored as a plain attribute of {module}: "
        "it is not a registered parameter",
    "gradients.unregistered_tensor.cause":
        "nn.Module registers only nn.Parameter attributes; a plain tensor is invisible to parameters(), "
        "so the optimizer never updates it, .to(device) never moves it and state_dict() never saves it",
    "gradients.unregistered_tensor.next": "wrap it: self.{attribute} = nn.Parameter(...)",
    "gradients.unregistered_tensors.message":
        "{parameter} is a Python {container} of tensors with requires_grad=True: they are not registered parameters",
    "gradients.unregistered_tensors.cause":
        "tensors kept in a plain {container} are not registered, so the optimizer never sees {items}",
    "gradients.unregistered_tensors.next": "use nn.{fix} instead of a Python {container}",
    "gradients.unregistered_modules.message":
        "{parameter} is a Python {container} of modules: their parameters ({values} values) are not registered in {module}",
    "gradients.unregistered_modules.cause":
        "submodules kept in a plain {container} ({items}) are not registered: parameters() and the optimizer "
        "miss them, .to(device) does not move them, state_dict() does not save them",
    "gradients.unregistered_modules.next": "use nn.{fix} instead of a Python {container}",
    "gradients.frozen.message": "{module}: {parameters} parameter(s) ({values} values) are frozen (requires_grad=False)",
    "gradients.frozen.cause": "requires_grad=False was set on purpose (a frozen backbone or embedding); they get no gradient",
    "gradients.frozen.next": "nothing to do if intended; otherwise call requires_grad_(True) before building the optimizer",
    # per-parameter causes
    "gradients.unused.message":
        "{count} trainable parameter(s) of {module} get no gradient: {module} was never called in the forward",
    "gradients.unused.cause":
        "the module is not used in this forward (a branch not taken, or a layer defined but never called), "
        "so its grad stays None",
    "gradients.unused.next": "check forward(): is {module} called on every path that should train it?",
    "gradients.cut_to_python.message":
        "{count} parameter(s) ({parameter}, ...) get no gradient: the path to the loss leaves the graph at {op} ({line})",
    "gradients.cut_to_python.cause":
        "{op} turns a tensor into Python numbers; whatever is built from them (torch.tensor(...)) "
        "has no history, so backward cannot reach the parameters behind it",
    "gradients.cut_to_python.next": "keep the computation in tensors: use the tensor itself instead of {op} at {line}",
    "gradients.cut_detach.message":
        "{count} parameter(s) ({parameter}, ...) get no gradient: their path to the loss is cut by {op} at {line}",
    "gradients.cut_detach.cause":
        "detach() returns a tensor without history; everything computed from it is invisible to backward",
    "gradients.cut_detach.next": "remove the detach() at {line} if these parameters should train (keep it for logging or targets)",
    "gradients.cut_no_grad.message":
        "{count} parameter(s) ({parameter}, ...) get no gradient: {module} ran under {mode} ({line})",
    "gradients.cut_no_grad.cause":
        "no graph is recorded under torch.no_grad(); outputs computed there do not require grad",
    "gradients.cut_no_grad.cause.inference_mode":
        "no graph is recorded under torch.inference_mode(); outputs computed there can never require grad",
    "gradients.cut_no_grad.next": "run the training forward outside torch.no_grad() (keep no_grad for validation)",
    "gradients.cut_no_grad.next.inference_mode": "run the training forward outside torch.inference_mode()",
    "gradients.cut_in_module.message":
        "{count} parameter(s) of {module} get no gradient: {module} returns a tensor that does not require grad",
    "gradients.cut_in_module.cause":
        "inside {module}.forward the result is cut from its parameters (a detach, a no_grad block, or "
        "a tensor rebuilt from data)",
    "gradients.cut_in_module.next": "read {module}.forward for detach(), no_grad or torch.tensor(...) on the way to its output",
    "gradients.unreached.message":
        "{count} parameter(s) of {module} get no gradient from any loss",
    "gradients.unreached.cause":
        "{module} ran, but its output was not used in the loss, or was replaced on the way by a tensor created with requires_grad=False",
    "gradients.unreached.cause.no_forward": "the module was not called in this forward, or its output was dropped or cut on the way to the loss (detach, no_grad, .item() → torch.tensor, a tensor created with requires_grad=False)",
    "gradients.unreached.next.no_forward": "pass the forward as a function, diagnose_gradients(model, lambda: loss_fn(model(x), y)), to name the op and line",
    "gradients.unreached.next": "follow {module}'s output to the loss; check that it is not overwritten or dropped",
    "gradients.leaf_not_registered.message":
        "the loss depends on a tensor {shape} with requires_grad=True that is no parameter of the model ({line})",
    "gradients.leaf_not_registered.cause":
        "a tensor created with requires_grad=True (inside forward or outside the model) is a leaf of the graph "
        "but not a registered parameter: it gets a grad, but the optimizer does not hold it and it is re-created each call",
    "gradients.leaf_not_registered.next": "create it once in __init__ as nn.Parameter(...) and pass it to the optimizer",
    "gradients.param_recreated.message":
        "{parameter} is a different Parameter object than when the model was watched: it was re-created ({line})",
    "gradients.param_recreated.cause":
        "assigning a new nn.Parameter (e.g. inside forward) replaces the registered one; the optimizer still "
        "holds the old object, which never gets a gradient",
    "gradients.param_recreated.next": "create parameters once in __init__; update values in place under no_grad if needed",
    "gradients.zero.message": "{parameter} gets a gradient that is exactly zero everywhere",
    "gradients.zero.cause":
        "the path exists but carries zero: a mask, a multiplication by zero, or an op with zero derivative",
    "gradients.zero.cause.dead_relu":
        "{module}'s outputs were never positive on this batch: a following ReLU passes no gradient (dead units)",
    "gradients.zero.next": "look for masks or factors that are 0 between {module} and the loss",
    "gradients.zero.next.dead_relu": "check {module}'s initialization, bias and learning rate; try LeakyReLU/GELU",
    # optimizer
    "gradients.not_in_optimizer.message":
        "{count} parameter(s) of {module} ({parameter}, ...) receive a gradient but are in no optimizer param group",
    "gradients.not_in_optimizer.cause":
        "the optimizer was built from a subset of the parameters (or before a layer was added): these are never updated",
    "gradients.not_in_optimizer.next": "build the optimizer from model.parameters() after the model is complete",
    "gradients.optimizer_stale.message":
        "optimizer {optimizer} ({optimizer_class}) holds {not_in_model} parameter(s) that are no longer the model's; "
        "{missing} trainable parameter(s) of the model are in no optimizer",
    "gradients.optimizer_stale.cause":
        "the optimizer was built before the model (or its parameters) was replaced or re-created: it updates the old tensors",
    "gradients.optimizer_stale.next": "create the optimizer after the final model, e.g. after load / to(device) / re-creation",
    "gradients.optimizer_idle.message": "optimizer {optimizer} ({op}) never stepped in {steps} optimizer steps: its {parameters} parameters ({examples}) got gradients that nothing applied",
    "gradients.optimizer_idle.message.model": "optimizer {optimizer} ({op}) of {model} never stepped in {steps} optimizer steps: its {parameters} parameters ({examples}) got gradients that nothing applied",
    "gradients.optimizer_idle.cause": "the backward computes these gradients every step, but step() is never called on this optimizer (one optimizer per model and one .step() forgotten), so these parameters never change",
    "gradients.optimizer_idle.next": "call step() on this optimizer after backward() (and zero_grad() before the next one), or put its parameters into the optimizer that steps",
    "gradients.lr_zero.message": "optimizer {optimizer} group {group} has learning rate 0 over {steps} step(s)",
    "gradients.lr_zero.cause": "with lr=0 the update is zero: the parameters do not change although they have gradients",
    "gradients.lr_zero.next": "check the lr value and the scheduler (a warmup that starts at 0 must rise)",
    # loss and loop
    "gradients.loss_no_grad_fn.message":
        "the loss passed to backward() does not require grad (no grad_fn): backward() will fail with "
        "\"element 0 of tensors does not require grad\"",
    "gradients.loss_no_grad_fn.cause.to_python":
        "the loss was rebuilt from Python numbers: {op} at {line} left the graph and torch.tensor(...) made a new leaf",
    "gradients.loss_no_grad_fn.next.to_python": "compute the loss from tensors (e.g. x ** 2, not torch.tensor(x.item() ** 2))",
    "gradients.loss_no_grad_fn.cause.no_grad": "the forward ran under torch.no_grad() ({line}): no graph was recorded",
    "gradients.loss_no_grad_fn.next.no_grad": "remove the no_grad block around the training forward",
    "gradients.loss_no_grad_fn.cause.inference_mode": "the forward ran under torch.inference_mode() ({line})",
    "gradients.loss_no_grad_fn.next.inference_mode": "remove inference_mode around the training forward",
    "gradients.loss_no_grad_fn.cause.detach": "the path to the loss was cut by {op} at {line}",
    "gradients.loss_no_grad_fn.next.detach": "remove the detach() at {line}",
    "gradients.loss_no_grad_fn.cause.frozen": "every parameter of the model has requires_grad=False",
    "gradients.loss_no_grad_fn.next.frozen": "unfreeze the layers to train (requires_grad_(True))",
    "gradients.loss_no_grad_fn.cause.leaf":
        "the loss was built only from tensors created with requires_grad=False (no parameter on its path)",
    "gradients.loss_no_grad_fn.next.leaf": "check that the loss is computed from the model's output, not from data or a copy",
    "gradients.nonleaf_grad.message": "`.grad` was read on a non-leaf tensor {shape} at {line}: it is always None",
    "gradients.nonleaf_grad.cause":
        "backward() fills .grad only for leaf tensors (parameters, inputs created with requires_grad=True)",
    "gradients.nonleaf_grad.next": "call .retain_grad() on it before backward(), or read the leaf's .grad",
    "gradients.zero_grad_missing.message":
        "gradients accumulate across optimizer steps: the grads used by the last {op}.step() were not reset before this backward",
    "gradients.zero_grad_missing.cause":
        "backward() adds into .grad; without optimizer.zero_grad() each step applies the sum of all past gradients",
    "gradients.zero_grad_missing.next":
        "call optimizer.zero_grad() once per optimizer step (with gradient accumulation: right after step())",
    "gradients.eval_builds_graph.message":
        "{model} ran in eval() mode with autograd on ({line}): the forward builds a graph that no backward uses",
    "gradients.eval_builds_graph.cause": "eval() changes dropout / batch norm only; it does not turn off autograd",
    "gradients.eval_builds_graph.next": "wrap validation in torch.no_grad() or torch.inference_mode() to save memory and time",
}
