"""中文：把梯度传入被训练参数的回归目标。"""

MESSAGES = {
    "silent.target_not_detached.bootstrap":
        "这个 {loss} 的自举（TD）目标带梯度地由 {shared} 个预测值同样依赖的参数计算（{names}）：backward 会经由目标把梯度"
        "传入这些参数（读取的 {read} 次调用中有 {carried} 次），更新对它自己的目标求了导",
    "silent.target_not_detached.other":
        "这个 {loss} 的目标带梯度地由 {shared} 个预测值同样依赖的参数计算（{names}）：backward 也会把目标拉向预测值"
        "（{calls} 次调用）",
    "silent.target_not_detached.cause.bootstrap":
        "TD 目标 r + gamma * Q(s') 对更新而言必须是常数：若由在线网络计算且没有 .detach() 或 torch.no_grad()（例如双 DQN "
        "中由在线网络估值、critic 的下一状态值），梯度会流入 Q(s')，半梯度更新变成残差梯度更新，在随机转移上收敛到不同的值",
    "silent.target_not_detached.cause.other":
        "回归目标对更新通常是固定的；由被训练参数计算的目标也会被拉向预测值（某些一致性损失有意如此，否则有坍塌风险）",
    "silent.target_not_detached.next":
        "分离目标（q_next = net(next_states).gather(1, idx).detach()，或在 torch.no_grad() 下计算）",
}
