"""中文：每个留出样本的去向（第 12 轮）：完整评估、只担任一种角色、只在划分的一侧。"""

MESSAGES = {
    "ledger.eval_lost_fixed.message": "评估加载器 {loader}（{where}）的每一遍（共 {passes} 遍）都漏掉其 {samples} 个样本中相同的 {lost} 个（{share}，行 {rows}）：指标是在按位置选出的 {kept} 个样本上计算的，而不是在它所指的评估集上",
    "ledger.eval_lost_fixed.cause": "评估加载器的采样器不打乱顺序时，drop_last=True 每一遍都丢掉最后不满的一批，即评估集末尾的同一批样本；按时间、类别或文件排序的评估集会整段缺失",
    "ledger.eval_lost_fixed.next": "评估加载器使用 drop_last=False（只对训练加载器丢弃最后不满的一批：drop_last=train）",
    "ledger.role_train.message": "加载器 {loader}（{where}）训练的正是 {train} 训练的那 {rows} 行，而数据集 {n} 行中有 {never} 行（例如 {examples}）从未被任何加载器读取：留出的行从未使用，训练行被拟合了两次",
    "ledger.role_eval.message": "加载器 {loader}（{where}）评估的正是 {train} 训练的那 {rows} 行，而数据集 {n} 行中有 {never} 行（例如 {examples}）从未被任何加载器读取：留出集的指标是在训练行上测得的",
    "ledger.role_sampler.cause": "该加载器拿到的是训练划分的采样器：为留出行构建的索引采样器 '{sampler}' 从未交给任何 DataLoader",
    "ledger.role_sampler.next": "把留出划分的采样器交给这个 DataLoader（sampler={sampler}），使每个划分的行只担任一种角色",
    "ledger.role_name.cause": "以 {role} 划分命名的加载器读取的是训练划分的行（它的采样器或索引列表是训练用的），因此留出的行从未被读取",
    "ledger.role_name.next": "让这个加载器建立在留出行之上（使用它自己的采样器或 Subset），使每个划分的行只担任一种角色",
}
