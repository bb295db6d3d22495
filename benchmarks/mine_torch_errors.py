"""Mine PyTorch's own error-message templates from the installed torch (issue 12).

Two sources:
  * the check messages compiled into torch's shared libraries (`TORCH_CHECK(cond, "...")`
    leaves its string literals in `.rodata`): read with a small ELF reader, every
    NUL-terminated printable run, as `strings` would, restricted to the read-only data section;
  * the messages of its Python sources: `raise SomeError("...")` / f-strings (placeholders
    become `{}`) and `torch._check*(cond, lambda: "...")`.

Only error-like texts are kept (a word such as expected, must, got, cannot, not supported,
invalid...), and each gets one *topic* by plain keyword presence, the way the issue counts them
(size/shape/dimension, dtype, device, layout, gradient, inplace, optimizer; else "other").
The topic is the miner's own labelling, independent of the classifier.

    python benchmarks/mine_torch_errors.py            # writes tests/data/torch_errors_<version>.tsv
    python benchmarks/mine_torch_errors.py --out PATH
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
TORCH = Path(torch.__file__).resolve().parent

_ERRORISH = re.compile(
    r"\b(?:expected|expects?|must|got|cannot|can't|can not|not supported|unsupported|invalid|"
    r"should|mismatch|out of range|does not|doesn't|is not|are not|only supports?|requires?|"
    r"not implemented|failed|incompatible|illegal|not allowed|unable|too (?:many|few|large|small))\b",
    re.IGNORECASE)
# What is not a message: symbols, paths, schemas, code, format-only strings.
_NOT_MESSAGE = re.compile(r"(?:\.(?:cpp|h|cu|py|so)\b|::\w+\(|->|^\s*(?:def|return|if|for|import|class)\b|"
                          r"[{};]\s*$|^[\w:<>,\s*&]+\)$|https?://|\bTORCH_\w+\b|%\w*\s*$)")
TOPICS = (
    # (topic, keywords) in the issue's own counting words; first hit wins
    ("optimizer", r"\boptimi[sz]er\b|\bparam(?:eter)?_groups?\b|\bparameter list\b|\blr\b|learning rate|momentum"),
    ("inplace", r"in-?place|\binplace\b|is at version|version counter"),
    ("gradient", r"\bgrad|\bbackward\b|\bautograd\b|\bgraph\b|\bleaf\b|\bdifferentiab"),
    ("device", r"\bdevices?\b|\bcuda\b|\bcpu\b|\bmps\b|\bmeta\b|\bxpu\b|\bpinned?\b|\baccelerator\b"),
    ("dtype", r"\bdtypes?\b|scalar ?type|\bfloating\b|\bintegral\b|\binteger\b|\bcomplex\b|\bHalf\b|"
              r"\bBFloat16\b|\bFloat\b|\bDouble\b|\bLong\b|\bbool(?:ean)?\b"),
    ("layout", r"contiguous|\bstrides?\b|\blayout\b|\bsparse\b|memory.format|channels.last|\bstrided\b"),
    ("shape", r"\bsizes?\b|\bshapes?\b|\bdim(?:ension)?s?\b|\bndim\b|\bnumel\b|\bbroadcast|\b\d-?D\b|"
              r"\brank\b|\bchannels\b|\bbatch|\bnumber of elements\b|\bsame length\b"),
)
_TOPICS = tuple((name, re.compile(rx, re.IGNORECASE)) for name, rx in TOPICS)


def topic_of(text: str) -> str:
    for name, rx in _TOPICS:
        if rx.search(text):
            return name
    return "other"


# ---------------------------------------------------------------- shared libraries
def _rodata(path: Path) -> bytes:
    """The bytes of the `.rodata` section of an ELF64 little-endian file (b"" when absent)."""
    with open(path, "rb") as fh:
        head = fh.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return b""
        shoff, = struct.unpack_from("<Q", head, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
        fh.seek(shoff)
        table = fh.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        names_off, names_size = sections[shstrndx][4], sections[shstrndx][5]
        fh.seek(names_off)
        names = fh.read(names_size)
        for sec in sections:
            name = names[sec[0]:names.index(b"\0", sec[0])]
            if name == b".rodata":
                fh.seek(sec[4])
                return fh.read(sec[5])
    return b""


_PRINTABLE = re.compile(rb"[\x20-\x7e\t\n]{12,}")


def library_strings(path: Path) -> Iterator[str]:
    for m in _PRINTABLE.finditer(_rodata(path)):
        yield m.group().decode("ascii")


# ---------------------------------------------------------------- Python sources
def _template(node: ast.AST) -> str | None:
    """A string literal, an f-string (placeholders as {}) or a "+"-joined mix of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            parts.append(v.value if isinstance(v, ast.Constant) else "{}")
        return "".join(str(p) for p in parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        left, right = _template(node.left), _template(node.right)
        if isinstance(node.op, ast.Mod):
            return left
        return (left or "{}") + (right or "{}") if (left or right) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _template(node.func.value)
    if isinstance(node, ast.Lambda):
        return _template(node.body)
    return None


def python_messages(path: Path) -> Iterator[tuple[str, str]]:
    """(exception type, template) for each raise / torch._check message of one source file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            text = _template(node.exc.args[0])
            if text and name.endswith(("Error", "Exception")):
                yield name, text
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr.startswith("_check") and len(node.args) >= 2:
            text = _template(node.args[1])
            if text:
                kind = {"_check_index": "IndexError", "_check_value": "ValueError",
                        "_check_type": "TypeError", "_check_not_implemented": "NotImplementedError"}
                yield kind.get(node.func.attr, "RuntimeError"), text


# ---------------------------------------------------------------- filtering
def is_message(text: str) -> bool:
    text = text.strip()
    if len(text) < 12 or len(text) > 400 or " " not in text or "\n" in text.strip("\n"):
        return False
    if not _ERRORISH.search(text) or _NOT_MESSAGE.search(text):
        return False
    words = re.findall(r"[A-Za-z]{2,}", text)
    return len(words) >= 3


def mine() -> list[tuple[str, str, str, str]]:
    """Sorted, de-duplicated (topic, source, exception type, template) rows."""
    seen: dict[str, tuple[str, str, str, str]] = {}
    for lib in sorted((TORCH / "lib").glob("*.so*")):
        for text in library_strings(lib):
            text = text.strip()
            if is_message(text) and text not in seen:
                seen[text] = (topic_of(text), f"lib/{lib.name}", "RuntimeError", text)
    for src in sorted(TORCH.rglob("*.py")):
        rel = src.relative_to(TORCH).as_posix()
        if rel.startswith(("testing/", "_inductor/", "_dynamo/", "onnx/", "utils/benchmark/", "_export/",
                           "export/", "fx/", "_functorch/_aot_autograd/", "distributed/_", "ao/", "jit/",
                           "_higher_order_ops/", "_subclasses/", "compiler/", "_library/", "_logging/",
                           "utils/_sympy/", "_numpy/", "package/", "_custom_op/", "_strobelight/")):
            continue
        for etype, text in python_messages(src):
            text = text.strip()
            if is_message(text) and text not in seen:
                seen[text] = (topic_of(text), rel, etype, text)
    return sorted(seen.values(), key=lambda r: (r[0], r[1], r[3]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    version = torch.__version__.split("+")[0]
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / f"torch_errors_{version}.tsv"))
    args = ap.parse_args(argv)
    rows = mine()
    counts: dict[str, int] = {}
    for row in rows:
        counts[row[0]] = counts.get(row[0], 0) + 1
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from triage_coverage import classify_template

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    kept = [r for r in rows if r[0] != "other"]
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(f"# torch {torch.__version__}: error-message templates mined by benchmarks/mine_torch_errors.py\n")
        fh.write(f"# {len(rows)} error-like templates; by topic: "
                 + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
                 + "; the 'other' topic is not kept here. category/code: the triage's reading when mined.\n")
        fh.write("topic\tsource\ttype\ttemplate\tcategory\tcode\n")
        for row in kept:
            category, code = classify_template(row[2], row[3])
            cells = [c.replace("\t", " ").replace("\n", " ") for c in row] + [category, code]
            fh.write("\t".join(cells) + "\n")
    print(f"{len(rows)} templates from torch {torch.__version__}, {len(kept)} on the issue's topics "
          f"-> {os.path.relpath(out)}")
    print("  " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
