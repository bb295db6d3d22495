"""中文：配置中已关闭的梯度裁剪。"""

MESSAGES = {
    "dynamics.clip_configured_off":
        "配置关闭了梯度裁剪（{key} = {value}），但 clip_grad_norm_ 以 max_norm={max_norm} 运行："
        "它在 {clipped}/{read} 步裁剪了梯度（梯度范数中位数 {median}，为 max_norm 的 {ratio} 倍，被缩小到 {max_norm}）",
    "dynamics.clip_configured_off.cause":
        "max_norm 为 0 表示“不裁剪”，但 `cfg.get('max_norm') or 1.0` 或 `if clip_grad and clip_grad.get('max_norm'):` "
        "这样的真值判断把 0 当作缺失值，退回到默认值",
    "dynamics.clip_configured_off.next":
        "显式判断缺失值（`cfg.get('max_norm') is not None`），配置的 max_norm 为 0 时不要调用 clip_grad_norm_",
}
