"""中文：load_state_dict() 加载的 state_dict() 快照与模型共享存储。"""

MESSAGES = {
    "selfload.aliased":
        "load_state_dict() 恢复的是在 {where}（第 {step} 步）由 state_dict() 取得的状态字典，但其中 {n} 个参数张量"
        "就是 {model} 自己的参数，而不是副本：此后 {steps} 次优化器更新写入了它们（{writes} 次写入），因此这次加载只是把当前权重复制到自身，"
        "快照（“最佳”权重）已经丢失",
    "selfload.aliased.cause":
        "state_dict() 返回与实时参数共享存储的引用；用 best = model.state_dict() 保存的快照会跟随之后的每一次优化器更新",
    "selfload.aliased.next":
        "保存副本：best = copy.deepcopy(model.state_dict()) 或 {{k: v.detach().clone() for k, v in "
        "model.state_dict().items()}}",
}
