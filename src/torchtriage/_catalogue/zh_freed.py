"""中文：第二次 backward() 遇到的张量（`_triage/_freed.py`）。"""

MESSAGES = {
    "freed.through": "（经由 {name}）",
    "freed.kept": "（某个张量跨步保留，例如隐藏状态）",
    "freed.held": "：{name}{made} 所属的计算图已被之前的 backward() 遍历并释放{entered}",
    "freed.made": "（在 {made} 创建）",
    "freed.entered": "；它在 {where} 进入本次 backward 的计算图",
    "freed.carried": "：一个计算图已被之前的 backward() 释放的张量在 {where} 进入本次 backward 的计算图（某个张量跨步保留，例如隐藏状态）",
    "freed.carried_named": "：{name} 在 {where} 从一步传到下一步，仍持有之前某一步的计算图，而那一步的 backward() 已释放它（隐藏状态未 detach）",
    "freed.next.carried": "在传递处 detach（下一步之前 {name} = {name}.detach()：截断的时间反向传播）；retain_graph=True 则会反向传播经过之前的每一步，每步越来越慢",
    "freed.root": "：{name}{made} 已被之前的 backward() 反向传播过，其计算图已释放",
    "freed.next.root": "每个损失只调用一次 backward()（多个损失共享计算图时先求和）；只有确实需要两次时才在 {name} 的第一次 backward 上用 retain_graph=True",
    "freed.next.generic": "对跨步保留的张量调用 detach（h = h.detach()）；只有确实需要两次反向传播时才用 retain_graph=True",
    "freed.next.held": "在复用处使用 {name}.detach()，若梯度不应再次经它回传（GAN 判别器步骤使用生成器输出），或重新计算 {name}；只有确实需要两次反向传播时才在第一次 backward() 上用 retain_graph=True",
}
