"""Renderers: a `Report` as terminal text, JSON or a standalone HTML page (public namespace;
the drawing lives in `torchtriage._render`)."""

from typing import Any

from .._render._text import render_text as render_text
from ._json import dump_json as dump_json
from ._json import load_json as load_json
from ._json import render_json as render_json

__all__ = ["dump_json", "load_json", "render_html", "render_json", "render_text"]


def __getattr__(name: str) -> Any:
    if name == "render_html":  # the HTML template is loaded only when asked for
        from ._page import render_html

        return render_html
    raise AttributeError(name)
