"""中文：数据账本的词元流（issue 25）：一维词元数组上的窗口。"""

MESSAGES = {
    "ledger.stream_split.message": "在 {eval_where} 评估的词元流中，{n} 个 {k} 词元窗口里有 {count} 个（{share}）被训练过：同样的 {k} 个词元出现在 {train_where} 训练的序列中（例如评估位置 {example}）",
    "ledger.stream_split.cause": "评估词元与训练词元重叠：词元数组中的验证区段（或其文档）也在训练分片或切片之中",
    "ledger.stream_split.next": "把词元数组（或文档列表）一次切成互不相交的区间，只用训练区间构建训练分片，并只在留出的区间上评估",
    "ledger.window_split.message": "加载器 {eval}（{eval_where}）只用于评估的 {n} 个样本中有 {count} 个（{share}）沿轴 {axis} 的大部分步与经加载器 {train}（{train_where}）训练过的样本相同：同一序列的重叠窗口在切窗之后才划分（例如样本 {example}）",
    "ledger.window_unloaded.message": "没有任何 DataLoader 遍历的留出数据集 {eval}（{eval_where}）的 {n} 个样本中有 {count} 个（{share}）沿轴 {axis} 的大部分步与经加载器 {train}（{train_where}）训练过的样本相同：同一序列的重叠窗口在切窗之后才划分（例如样本 {example}）",
    "ledger.window_split.cause": "样本是以小于窗口长度的步长从同一序列切出的窗口并被随机划分：每个评估窗口的各步都在其训练邻居之中，评估衡量的只是对已训练数据的插值",
    "ledger.window_split.next": "先划分序列（按时间，或按整天 / 整条序列），再在每一部分内切窗；在各部分之间留出一个窗口长度的间隔",
    "ledger.edge_reverse.message": "在 {eval_where} 评估的 {n} 条边中有 {count} 条（{share}）是反向读取的训练边：其反向边在 {train_where} 训练所用的图中，而该图中 {symmetric} 的边以两个方向存储（例如评估边 {u} -> {v}，训练过 {v} -> {u}）",
    "ledger.edge_reverse.cause": "图把每条无向连接存成两条有向边，而划分打乱的是有向边的编号而不是连接：同一连接的两个方向落入不同的划分，留出的连接仍在训练正样本和消息传递图中",
    "ledger.edge_reverse.next": "按连接而不是有向边划分：让一条边与其反向边处于同一划分（打乱连接编号，再加入每条连接的两个方向），并从消息传递图中删除每条留出连接的两个方向",
}
