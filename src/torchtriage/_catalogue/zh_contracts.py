"""中文：张量契约（issue 2 §3）。"""

_FORMS = ("可接受：维度名（B、T、C、batch）、非负整数、'*'（任意一个维度）、"
          "'...'（任意多个维度），用空格或逗号分隔，或由名字与整数组成的元组")

MESSAGES = {
    "contract.bad_field": "契约字段 {fields} 未知；可接受：shape、dtype、device、contiguous",
    "contract.bad_spec": "契约 {spec} 不是合法的规格；可接受：形状字符串、元组，或包含 shape/dtype/device/contiguous 的字典",
    "contract.bad_shape_type": "类型为 {got} 的形状规格无效；" + _FORMS,
    "contract.bad_token": "形状规格 {shape}：记号 {token} 无效；" + _FORMS,
    "contract.two_ellipses": "形状规格 {shape}：'...' 最多只能出现一次",
    "contract.bad_dtype": "dtype {got} 不是 torch 的 dtype；可接受：torch.float32、'float32'、'torch.int64' 等，或它们的元组",
    "contract.bad_device": "设备 {got} 无效；可接受：'cpu'、'cuda'、'cuda:0'、'meta'、'mps'、torch.device",
    "contract.bad_contiguous": "contiguous={got} 无效；可接受：True、False、None",
    "contract.bad_io": "类型为 {got} 的 {what} 无效；可接受：单个规格（字符串或字典）、规格元组、名字到规格的字典",
    "contract.not_tensor": "期望 Tensor，实际为 {got}",
    "contract.dtype": "dtype 为 {got}，应为 {expected}",
    "contract.device": "设备为 {got}，应为 {expected}",
    "contract.contiguous": "张量为 {got}（步长 {stride}），应为 {expected}",
    "contract.ndim_at_least": "有 {got} 个维度，至少应有 {expected} 个",
    "contract.ndim": "有 {got} 个维度，应为 {expected} 个",
    "contract.dim_literal": "第 {axis} 维为 {got}，应为 {expected}",
    "contract.dim_bound": "第 {axis} 维为 {got}，但 {name} 已绑定为 {bound}",
    "contract.no_binding": "无",
    "contract.message": "{where}{tensor}：{detail}",
    "contract.cause.shape": "张量形状违反契约（上游的轴顺序、批大小或特征维度有误）",
    "contract.cause.dtype": "张量的 dtype 与契约不同",
    "contract.cause.device": "张量所在设备与契约不同",
    "contract.cause.contiguous": "transpose/permute/切片使张量的内存布局不再是标准布局",
    "contract.next.shape": "在产生 {tensor} 的地方打印其 shape，并与目前已绑定的维度名比较",
    "contract.next.dtype": "在构造 {tensor} 的地方转换类型（.float()、.long()）",
    "contract.next.device": "在构造 {tensor} 的地方用 .to(device) 移动它",
    "contract.next.contiguous": "对 {tensor} 调用 .contiguous()，或在下游用 .reshape 代替 .view",
    "contract.error": (
        "{message}\n"
        "  实际：{observed}\n"
        "  期望：{expected}\n"
        "  目前已绑定的维度：{dims}\n"
        "  本次调用中其他未通过的字段：{others}"
    ),
}
