"""English: gradient clipping the configuration turned off."""

MESSAGES = {
    "dynamics.clip_configured_off":
        "the configuration turns gradient clipping off ({key} = {value}), but clip_grad_norm_ ran with "
        "max_norm={max_norm}: it clipped the gradient on {clipped}/{read} steps (median gradient norm {median}, "
        "{ratio}x the max_norm, scaled down to {max_norm})",
    "dynamics.clip_configured_off.cause":
        "a max_norm of 0 means 'no clipping', but a falsy test such as `cfg.get('max_norm') or 1.0` or "
        "`if clip_grad and clip_grad.get('max_norm'):` treats 0 like a missing value and falls back to a default",
    "dynamics.clip_configured_off.next":
        "test for a missing value explicitly (`cfg.get('max_norm') is not None`) and skip clip_grad_norm_ when "
        "the configured max_norm is 0",
}
