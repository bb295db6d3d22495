"""The message catalogue: every user-facing sentence, by key, per language.

Each domain keeps its sentences in `en_<domain>.py` and `zh_<domain>.py` beside this file,
a module-level dict `MESSAGES = {key: template}`; templates use `str.format` fields.
A key missing in the chosen language falls back to English. `tests/test_catalogue.py`
checks that every key used exists in English and that the fields match across languages.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import string
from typing import Any

LANGUAGES = ("en", "zh")
_lang = os.environ.get("TORCHTRIAGE_LANG", "en") if os.environ.get("TORCHTRIAGE_LANG") in LANGUAGES else "en"
_tables: dict[str, dict[str, str]] | None = None


def _load() -> dict[str, dict[str, str]]:
    global _tables
    if _tables is None:
        tables: dict[str, dict[str, str]] = {lang: {} for lang in LANGUAGES}
        for info in pkgutil.iter_modules(__path__):
            lang, _, domain = info.name.partition("_")
            if lang in tables and domain:
                mod = importlib.import_module(f"{__name__}.{info.name}")
                tables[lang].update(mod.MESSAGES)
        _tables = tables
    return _tables


def set_language(lang: str) -> None:
    """Choose the language of messages created from now on: one of `LANGUAGES`."""
    global _lang
    if lang not in LANGUAGES:
        raise ValueError(f"language {lang!r} is not available; accepted: {', '.join(LANGUAGES)}")
    _lang = lang


def get_language() -> str:
    return _lang


def msg(key: str, /, **fields: Any) -> str:
    """The sentence for `key` in the current language, filled with `fields`."""
    tables = _load()
    template = tables.get(_lang, {}).get(key) or tables["en"].get(key)
    if template is None:
        raise KeyError(f"message key {key!r} is not in the catalogue")
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError):
        # A broken template must not break the user's run: show it unformatted.
        return template + " " + repr(fields)


def has_message(key: str) -> bool:
    """True when the catalogue has `key` (English holds every key: the fallback language)."""
    return key in _load()["en"]


def fields_of(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def catalogue() -> dict[str, dict[str, str]]:
    """All languages' tables (a copy), for tests and translators."""
    return {lang: dict(t) for lang, t in _load().items()}
