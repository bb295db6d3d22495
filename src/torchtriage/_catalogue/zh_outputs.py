"""中文：写出输出文件（`_outputs.py`）。"""

MESSAGES = {
    "outputs.not_folder": "{flag} {path}：已存在且不是文件夹",
    "outputs.no_folder": "{flag} {path}：文件夹 {folder} 不存在",
    "outputs.is_folder": "{flag} {path}：这是一个文件夹，需要的是文件路径",
    "outputs.unwritable": "{flag} {path}：不可写（{reason}）",
    "outputs.write_failed": "{flag} {path}：无法写出输出：{reason}",
    "outputs.stdout_failed": "标准输出：无法写出输出：{reason}",
}
