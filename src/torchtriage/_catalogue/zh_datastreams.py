"""中文：数据账本的词元流（issue 25）：一维词元数组上的窗口。"""

MESSAGES = {
    "ledger.stream_split.message": "在 {eval_where} 评估的词元流中，{n} 个 {k} 词元窗口里有 {count} 个（{share}）被训练过：同样的 {k} 个词元出现在 {train_where} 训练的序列中（例如评估位置 {example}）",
    "ledger.stream_split.cause": "评估词元与训练词元重叠：词元数组中的验证区段（或其文档）也在训练分片或切片之中",
    "ledger.stream_split.next": "把词元数组（或文档列表）一次切成互不相交的区间，只用训练区间构建训练分片，并只在留出的区间上评估",
}
