"""English: a name-based module freeze that cannot reach a parameter its test selects."""

MESSAGES = {
    "gradient.freeze_missed_bare_parameter":
        "{param} ({elements} elements) is still trainable and was updated although the freeze rule selects its "
        "name: the loop over {iterates}() (test at line {test_line}) sees modules only, and {param} is a "
        "parameter registered directly on {owner}; {frozen} other tensors are frozen",
    "gradient.freeze_missed_bare_parameter.unmoved":
        "{param} ({elements} elements) is still trainable although the freeze rule's test (line {test_line}) "
        "selects its name: the loop over {iterates}() sees modules only, and {param} is a parameter registered "
        "directly on {owner}",
    "gradient.freeze_missed_bare_parameter.cause":
        "named_modules() / named_children() hand the test module names; a parameter that belongs to a module "
        "with submodules (learnable queries, a class token, a position table) is never one of them, so a "
        "pattern naming it never fires and it keeps training inside the frozen part",
    "gradient.freeze_missed_bare_parameter.next":
        "apply the rule to named_parameters() as well (set requires_grad = False on the parameters whose name "
        "matches), then check that the count of trainable parameters is the one intended",
}
