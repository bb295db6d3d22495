"""会话 13 中关于跨越回合结束的自举目标的检查的消息（中文）。"""

MESSAGES = {
    "terminal.unused":
        "TD 目标（{text}）从未使用回放批次的结束标志 {name}（从批次解包并转换，却没有在任何地方读取）："
        "批次的 {total} 个转移中有 {ends} 个是终止转移，它们的目标仍然从下一状态的价值自举",
    "terminal.unused.cause":
        "终止转移没有同一回合的下一状态：它的目标只是奖励。自举项没有 (1 - done) 掩码时，r + gamma * max Q(s') "
        "会把回合结束状态的价值拉高到普通状态的水平，价值尺度一路攀升到 1 / (1 - gamma)",
    "terminal.unused.next":
        "用结束掩码乘以自举项：target = rewards + gamma * (1 - dones) * max_next_q（使用 terminated 标志，而不是"
        "时间上限造成的截断）",
    "terminal.carry":
        "{name} 在回合数据中向后递推（{text}），却没有乘上循环在另一项上使用的结束掩码：这段数据包含 {total} 步中的 "
        "{ends} 个回合结束，在每一处，下一回合的累计和都流入了正在结束的回合",
    "terminal.carry.cause":
        "回报或 GAE 优势是单个回合内的求和：在结束标志为真的那一步，递推必须重新开始（gae = delta + gamma * lam * "
        "(1 - done) * gae）。只掩盖自举价值而保留累计和，会让一个回合的最后几步获得下一回合的奖励，评论家也会在跨越"
        "回合边界的回报上回归",
    "terminal.carry.next":
        "用该步的未结束掩码乘以递推项（gae = gae * gamma * lam * (1 - done)），或在该步结束回合时把它重置为 0",
}
