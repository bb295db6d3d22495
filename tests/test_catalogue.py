"""Every message exists in English, and each translation uses exactly the same fields."""

from __future__ import annotations

import pytest

from torchtriage._catalogue import LANGUAGES, catalogue, fields_of, get_language, msg, set_language


def test_translations_have_the_same_fields_as_english():
    tables = catalogue()
    en = tables["en"]
    for lang in LANGUAGES:
        for key, template in tables[lang].items():
            assert key in en, f"{lang}: key {key!r} has no English original"
            assert fields_of(template) == fields_of(en[key]), f"{lang}: fields differ for {key!r}"


def test_every_english_key_is_translated_to_chinese():
    tables = catalogue()
    missing = sorted(set(tables["en"]) - set(tables["zh"]))
    assert missing == []


def test_language_switch_and_fallback():
    assert get_language() == "en"
    try:
        set_language("zh")
        assert msg("report.title") == "torchtriage 诊断报告"
    finally:
        set_language("en")
    assert msg("report.count", count=3) == "seen 3 times"
    with pytest.raises(ValueError, match=r"language 'fr' is not available; accepted: en, zh"):
        set_language("fr")
    with pytest.raises(KeyError, match="message key 'no.such.key' is not in the catalogue"):
        msg("no.such.key")
