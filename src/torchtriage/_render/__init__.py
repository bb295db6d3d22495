"""Drawing a report: terminal text (`_text.py`, with the module tree of `_tree.py` and the
sparklines of `_spark.py`), the standalone HTML page (`_html.py`, charts from `_svg.py`) and
the notebook fragment (`_fragment.py`). They read a `Report`'s findings, meta and series and
never import the report model at run time, so `Report` can display itself through them. The
public namespace is `torchtriage.report`."""
