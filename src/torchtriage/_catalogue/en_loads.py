"""English: load_state_dict(strict=False) calls that set few or none of the model's parameters."""

MESSAGES = {
    "loads.not_loaded.prefix":
        "load_state_dict(strict=False) set {loaded} of {model}'s {total} parameters: {unexpected} unexpected keys "
        "(e.g. '{example}') are its {missing} missing keys under another prefix (strip '{strip}', add '{add}'); "
        "the parameters not loaded keep their random initialization",
    "loads.not_loaded.nothing":
        "load_state_dict(strict=False) set {loaded} of {model}'s {total} parameters: none of the state dict's keys "
        "matched ({missing} missing keys, {unexpected} unexpected keys, e.g. '{example}'); the model keeps its "
        "random initialization",
    "loads.not_loaded.cause.prefix":
        "strict=False ignores key mismatches instead of raising: a checkpoint saved from a DataParallel / DDP "
        "wrapper ('module.' keys), or from a wrapper module, names every weight with a prefix the model does not use, "
        "so nothing under it is loaded",
    "loads.not_loaded.cause.nothing":
        "strict=False ignores key mismatches instead of raising: the state dict belongs to another model or "
        "another level of it (a wrapper, a sub-module, an optimizer's state)",
    "loads.not_loaded.next.prefix":
        "rename the keys before loading, e.g. {{k.removeprefix('{strip}'): v for k, v in sd.items()}}, and load "
        "with strict=True (or check the returned missing_keys / unexpected_keys)",
    "loads.not_loaded.next.nothing":
        "load the state dict this model saved (print a few keys of both), and check the returned missing_keys / "
        "unexpected_keys or load with strict=True",
    "loads.not_loaded.raised":
        "load_state_dict raised for {model}: the state dict holds its weights under another prefix (strip "
        "'{strip}', add '{add}'): {fixes} of its {unexpected} unexpected keys (e.g. '{example}') are {model}'s "
        "{missing} missing keys with the same shapes; none of its {total} parameters could be set",
    "loads.not_loaded.cause.raised":
        "the checkpoint was saved from a wrapper's state_dict() and is loaded into the bare model (or the "
        "reverse): DistributedDataParallel / DataParallel name every weight 'module.<name>', torch.compile "
        "'_orig_mod.<name>', a LightningModule or EMA holder its attribute's name",
    "loads.not_loaded.next.raised":
        "save the unwrapped model (model.module.state_dict()), or strip the prefix when loading: "
        "{{k.removeprefix('{strip}'): v for k, v in sd.items()}}",
    "loads.not_loaded.unchanged":
        "the checkpoint {file} read at {read} holds {held} of {model}'s {total} parameters ({where}), but this "
        "load_state_dict set {model}'s own values: none of the {compared} compared parameters changed, and each "
        "still differs from the checkpoint's; the model keeps the weights it had before the restore",
    "loads.not_loaded.cause.unchanged":
        "the dict given to load_state_dict was built from the model's own state_dict() and filled only with the "
        "checkpoint entries whose names matched: the checkpoint keeps its weights under another key (e.g. "
        "'model_state_dict', 'state_dict', 'model') or another prefix, so nothing was copied and the load "
        "restored the model onto itself",
    "loads.not_loaded.next.unchanged":
        "load the state dict stored inside the checkpoint (ckpt['model_state_dict'] or the key it was saved "
        "under), and check that load_state_dict(..., strict=True) accepts it",
}
