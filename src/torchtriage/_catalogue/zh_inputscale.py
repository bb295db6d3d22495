"""会话 11 关于输入尺度与整轮指标的检查的消息（中文）。"""

MESSAGES = {
    "data.int_scaled_as_narrower": "{dtype} 数据被除以 {c}（{kind} 数据的最大值）：其值达到 {top}（该类型最大可到 {limit}），结果达到 {q}，而不是落在 [0, 1] 内",
    "data.int_scaled_as_narrower.cause": "缩放常数是为 {kind} 数据写的，而这个张量更宽（16 位图像解码为 uint16 / int32）：输入远远超出代码想要归一化到的范围，模型照样用它们训练。",
    "data.int_scaled_as_narrower.next": "在转换为浮点之前，除以数据自身类型的最大值（torch.iinfo(x.dtype).max）或其位深的最大值。",
}
