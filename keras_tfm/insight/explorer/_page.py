"""The explorer's page put together: `page.html` filled with the styles, the script and the data.

The page's parts are package data beside this file, each in its own language: `page.html` (the markup, with
`$title`, `$style`, `$script` and `$data` placeholders for `string.Template`), `frame.html` (the iframe
`show_attention` puts a page in, for Jupyter), `explorer.css`, and the script in
one file per concern. The pure functions (`decode.js`, `select.js`,
`rollout.js`, `colors.js`, `change.js`) also load in node,
where tests/insight/js tests them; the views (`head_view.js`, `model_view.js`, `image_view.js`) and
`main.js` run in the page only. The page inlines them all, so it stays one file that opens offline.
"""

import functools
import html
import importlib.resources
import json
import string

# The script's files in the order the page runs them: the pure functions, the views, then main.js, which reads the
# data and starts the page (it comes last because it calls the views' functions at once).
SCRIPT_FILES = ("decode.js", "select.js", "rollout.js", "colors.js", "change.js", "head_view.js", "model_view.js",
                "image_view.js", "change_view.js", "main.js")


@functools.lru_cache(maxsize=None)
def read_part(name):
    """The text of one of the page's files (package data of `keras_tfm.insight.explorer`), e.g.
    `read_part("main.js")`."""
    return importlib.resources.files("keras_tfm.insight.explorer").joinpath(name).read_text(encoding="utf-8")


def script_json(data):
    """`data` as JSON that can stand inside a `<script>` block: "</script>" or "<!--" in a token would end or
    break the block, so <, > and & are written as JSON's \\u escapes (the parsed value is the same)."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def build_page(data, title):
    """The whole page, as a string: one self-contained HTML file with inline styles, script and `data`.

    Args:
        data: what the script reads (`AttentionHistory.data()`), any JSON-serialisable value.
        title: the page's heading, plain text (HTML-escaped here; `$` or `{{...}}` in it stay as they are,
            since `string.Template` fills the placeholders of `page.html` only, never those of a filled-in value).

    Returns:
        The page's HTML.

    Example:

    >>> page = build_page(AttentionHistory().add(maps).data(), "attention")  # doctest: +SKIP
    >>> page.startswith("<!DOCTYPE html>")  # doctest: +SKIP
    True
    """
    script = "\n".join(read_part(name) for name in SCRIPT_FILES)
    return string.Template(read_part("page.html")).substitute(
        title=html.escape(title), style=read_part("explorer.css"), script=script, data=script_json(data))


def build_frame(page, height):
    """`frame.html`: an iframe holding `page` (escaped into its `srcdoc`), `height` pixels high. The frame keeps
    the page's script, styles and element ids apart from a notebook's and from other pages'.

    Example:

    >>> build_frame("<p>hi</p>", 300).split(" style=")[0]
    '<iframe srcdoc="&lt;p&gt;hi&lt;/p&gt;"'
    """
    return string.Template(read_part("frame.html")).substitute(page=html.escape(page, quote=True), height=int(height))
