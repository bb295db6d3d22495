"""损失目标的行被随机噪声覆盖的消息（中文）。"""

MESSAGES = {
    "silent.target_overwritten_with_noise": "在模型调用之前，这个损失目标的 {n} 行中有 {rows} 行被随机噪声（{op}）原地覆盖：这些行的干净目标丢失了，模型被训练去输出噪声",
    "silent.target_overwritten_with_noise.cause": "本应作用于输入的破坏（条件丢弃、加噪、掩码）被原地写进了同时作为损失目标的批次张量：同一个张量既当干净标签又当被破坏的输入。",
    "silent.target_overwritten_with_noise.next": "在破坏之前保存一份干净目标（target = x.clone()），或者破坏一份副本（x_in = x.clone(); x_in[i] = noise），把未改动的张量传给损失。",
}
