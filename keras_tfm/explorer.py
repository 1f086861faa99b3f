"""The attention explorer: one self-contained HTML page to look at attention, and to watch it form over training.

`attention_html(maps, ...)` turns the output of `keras_tfm.attention_maps` into a page with inline JavaScript and
CSS (no CDN, no server: it opens from `file://` offline) and up to three views, chosen by what the maps are:

* **head view** (text, and a seq2seq model's self- and cross-attention): the query tokens on the left, the key
  tokens on the right, one line per (query, key, head) weighted by the attention, one colour per head. Heads are
  switched on and off, layers chosen from a list; hovering a token shows only its row (or, on the right, its
  column). After BertViz's head view (Vig, "A Multiscale Visualization of Attention in the Transformer Model",
  2019).
* **model view**: a grid of layers x heads thumbnails; clicking one opens it large, with the weight under the
  pointer.
* **image view** (ViT, when `image` is given): the image under a heat overlay of one layer and head (or the mean
  of the heads, or the attention rollout of Abnar & Zuidema, 2020) for the [CLS] token or a clicked patch.

Several snapshots of the same sample (one per epoch) make one page with an epoch slider:
`AttentionHistory` keeps them, and `keras_tfm.callbacks.AttentionMapCallback(html=True)` uses it to rewrite one
`attention.html` at every drawn epoch.

Weights are stored as 8 bits (`round(w * 255)`, so each shown weight is within 1/510 of the model's) in base64:
one byte per weight and epoch, plus a third for base64. A 6-layer, 8-head, 65-token model over 10 epochs is
about 2.7 MB.
"""

import base64
import html
import json
import os
import re
import struct
import zlib

import numpy as np

LEVELS = 255  # 8-bit quantisation: a weight w in [0, 1] is stored as round(w * LEVELS)


def _quantize(weights):
    """`(heads, q, k)` weights in [0, 1] -> uint8 levels."""
    return np.rint(np.clip(weights, 0.0, 1.0) * LEVELS).astype("uint8")


def _png(image):
    """PNG bytes of an `(height, width, channels)` image (uint8, or floats in [0, 1] or [0, 255])."""
    pixels = np.asarray(image)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    if pixels.ndim != 3 or pixels.shape[-1] not in (1, 3, 4):
        raise ValueError(f"`image` must have shape (height, width, 1, 3 or 4 channels). Received: shape {pixels.shape}")
    if pixels.dtype != np.uint8:
        pixels = pixels.astype("float64")
        scale = 255.0 if pixels.max() <= 1.0 else 1.0
        pixels = np.clip(np.rint(pixels * scale), 0, 255).astype("uint8")
    if pixels.shape[-1] == 1:
        pixels = np.repeat(pixels, 3, axis=-1)
    height, width, channels = pixels.shape
    color_type = 6 if channels == 4 else 2  # RGBA or RGB, 8 bits per channel
    rows = b"".join(b"\x00" + pixels[y].tobytes() for y in range(height))  # filter 0 (none) before each row

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def _patch_grid(num_tokens, image_shape, num_prefix_tokens):
    """(prefix tokens, rows, columns) of the patch grid for maps over `num_tokens` tokens and an image."""
    height, width = image_shape[:2]
    prefixes = (1, 0) if num_prefix_tokens is None else (num_prefix_tokens,)
    for prefix in prefixes:
        patches = num_tokens - prefix
        for rows in range(1, patches + 1):
            if patches % rows == 0 and abs(rows / (patches // rows) - height / width) < 1e-6:
                return prefix, rows, patches // rows
    raise ValueError(
        f"Cannot lay the {num_tokens} tokens of the maps out as a patch grid of an image of shape "
        f"{tuple(image_shape)} (tried {list(prefixes)} prefix tokens); pass `num_prefix_tokens`."
    )


def _as_layers(maps):
    """[(name, array)] from an `attention_maps` dict, a list of arrays, or one array."""
    if isinstance(maps, dict):
        items = list(maps.items())
    elif isinstance(maps, np.ndarray):
        items = [("attention", maps)]
    elif isinstance(maps, (list, tuple)):
        items = [(f"layer_{j}", m) for j, m in enumerate(maps)]
    else:
        raise TypeError(
            "`maps` must be the dict returned by `attention_maps`, a list of arrays or one array. "
            f"Received: {type(maps).__name__}"
        )
    if not items:
        raise ValueError("`maps` is empty: there is no attention to show.")
    return [(str(name), np.asarray(m, dtype="float32")) for name, m in items]


def _is_token_pair(tokens):
    return (isinstance(tokens, (tuple, list)) and len(tokens) == 2
            and all(isinstance(t, (tuple, list)) for t in tokens))


class AttentionHistory:
    """The attention of one sample at several moments of training, and the explorer page that shows them.

    Each `add` stores the maps of one epoch quantised to 8 bits; `html()` builds the page (with an epoch slider
    once there are two snapshots) and `save(path)` writes it. The layers and their shapes are fixed by the first
    snapshot.

    Args:
        tokens: labels of the tokens: one list (the same for queries and keys), or a `(source, target)` pair of
            lists for a seq2seq model (encoder layers use the source, "…/self_attention" layers the target,
            "…/cross_attention" layers target queries over source keys). Map rows and columns past the end of the
            labels (padding) are left out. Without labels, positions are numbered.
        image: for a ViT, the `(height, width, channels)` image the maps were computed on: adds the image view.
        title: heading of the page.
        sample: which sample of a batch of maps to keep.
        num_prefix_tokens: with `image`, tokens before the patches (1 for [CLS]); inferred when None.

    Example:

    >>> history = AttentionHistory(tokens=words)  # doctest: +SKIP
    >>> history.add(attention_maps(model, ids[:1]), epoch=1)  # doctest: +SKIP
    >>> history.save("attention.html")  # doctest: +SKIP
    """

    def __init__(self, tokens=None, image=None, title=None, sample=0, num_prefix_tokens=None):
        if tokens is not None and not isinstance(tokens, (list, tuple)):
            raise TypeError(f"`tokens` must be a list of strings or a (source, target) pair of lists. "
                            f"Received: {type(tokens).__name__}")
        if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or sample < 0:
            raise ValueError(f"`sample` must be a non-negative integer. Received: sample={sample!r}")
        if num_prefix_tokens is not None and (not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0):
            raise ValueError(f"`num_prefix_tokens` must be a non-negative integer or None. "
                             f"Received: num_prefix_tokens={num_prefix_tokens!r}")
        self.tokens = tokens
        self.image = None if image is None else np.asarray(image)
        self.title = title
        self.sample = int(sample)
        self.num_prefix_tokens = num_prefix_tokens
        self.layers = None  # [{"name", "heads", "queries", "keys"}], fixed by the first snapshot
        self.epochs = []  # labels of the snapshots
        self.snapshots = []  # per snapshot: [uint8 (heads, q, k) per layer]
        self._image_info = None
        if self.image is not None:
            self._image_png = base64.b64encode(_png(self.image)).decode("ascii")

    def _labels(self, name):
        if self.tokens is None:
            return None, None
        if _is_token_pair(self.tokens):
            source, target = (list(map(str, t)) for t in self.tokens)
            if name.endswith("cross_attention"):
                return target, source
            return (target, target) if name.endswith("self_attention") else (source, source)
        words = [str(t) for t in self.tokens]
        return words, words

    def _layout(self, layers):
        """Fixes each layer's shape and labels from the first snapshot."""
        described = []
        for name, m in layers:
            heads, queries, keys = m.shape
            query_labels, key_labels = self._labels(name)
            for labels, size, what in ((query_labels, queries, "query"), (key_labels, keys, "key")):
                if labels is not None and len(labels) > size:
                    raise ValueError(
                        f"`tokens` has {len(labels)} {what} labels for layer '{name}', which has only {size} "
                        f"{what} positions. Pass the labels of the tokens the maps were computed on."
                    )
            # Fewer key labels than keys is padding left out, but only if the keys past them get no attention
            # (masked); keys that are attended to are tokens without a label.
            if key_labels is not None and len(key_labels) < keys and np.max(m[:, :, len(key_labels):]) > 1e-6:
                raise ValueError(
                    f"`tokens` has {len(key_labels)} key labels for layer '{name}', which has {keys} key positions, "
                    f"and the ones past the labels are attended to (they are not masked padding). Pass one label "
                    "per token the maps were computed on."
                )
            query_labels = query_labels or [str(i) for i in range(queries)]
            key_labels = key_labels or [str(i) for i in range(keys)]
            described.append({"name": name, "heads": heads, "queries": query_labels, "keys": key_labels})
        if self.image is not None:
            square = [m.shape[-1] for _, m in layers if m.shape[-1] == m.shape[-2]]
            if not square:
                raise ValueError("The image view needs self-attention (square) maps; `maps` has none.")
            prefix, rows, columns = _patch_grid(square[0], self.image.shape, self.num_prefix_tokens)
            self._image_info = {"png": self._image_png, "prefix": prefix, "rows": rows, "columns": columns,
                                "height": int(self.image.shape[0]), "width": int(self.image.shape[1])}
        return described

    def add(self, maps, epoch=None):
        """Stores one snapshot (quantised) of `maps`: an `attention_maps` dict of `(batch, heads, q, k)` arrays
        (or `(heads, q, k)`), a list of such arrays, or one array. `epoch` labels it (default: 1, 2, ...)."""
        layers = []
        for name, m in _as_layers(maps):
            if m.ndim == 4:
                if self.sample >= m.shape[0]:
                    raise ValueError(f"`sample` ({self.sample}) is out of range: layer '{name}' has a batch of "
                                     f"{m.shape[0]}.")
                m = m[self.sample]
            if m.ndim != 3:
                raise ValueError(f"Each map must have shape (batch, heads, query_len, key_len) or (heads, query_len, "
                                 f"key_len). Received: layer '{name}' with shape {m.shape}")
            if not np.all(np.isfinite(m)):
                raise ValueError(f"Layer '{name}' has non-finite attention weights.")
            layers.append((name, m))
        if self.layers is None:
            self.layers = self._layout(layers)
        expected = [(layer["name"], layer["heads"]) for layer in self.layers]
        if [(name, m.shape[0]) for name, m in layers] != expected:
            raise ValueError(f"Every snapshot must have the layers and heads of the first: {expected}. Received: "
                             f"{[(name, m.shape[0]) for name, m in layers]}")
        snapshot = []
        for layer, (name, m) in zip(self.layers, layers):
            queries, keys = len(layer["queries"]), len(layer["keys"])
            snapshot.append(_quantize(m[:, :queries, :keys]))  # (heads, q, k); padding rows and columns cut
        self.snapshots.append(snapshot)
        self.epochs.append(len(self.epochs) + 1 if epoch is None else epoch)
        return self

    @property
    def nbytes(self):
        """Bytes of stored weights (one per weight and snapshot; the page holds them in base64, 4/3 as many)."""
        return sum(m.nbytes for snapshot in self.snapshots for m in snapshot)

    def data(self):
        """What the page's script reads: layers, labels, epochs, base64 weights and the image."""
        if not self.snapshots:
            raise ValueError("No snapshot yet: call `add(maps)` first.")
        views = ["image", "model"] if self._image_info else ["head", "model"]
        return {
            "title": self.title or "attention",
            "levels": LEVELS,
            "views": views,
            "start": self._start(),
            "epochs": [str(e) for e in self.epochs],
            "layers": self.layers,
            "maps": [[base64.b64encode(m.tobytes()).decode("ascii") for m in snapshot] for snapshot in self.snapshots],
            "image": self._image_info,
        }

    def _start(self):
        """The layers the page opens on, the most telling ones: a seq2seq model's last cross-attention (where the
        alignment is), else the last layer (the one the head reads: [CLS] or the pooled tokens); in the image
        view, the last self-attention layer, for the [CLS] token."""
        names = [layer["name"] for layer in self.layers]
        cross = [j for j, name in enumerate(names) if name.endswith("cross_attention")]
        square = [j for j, layer in enumerate(self.layers) if len(layer["queries"]) == len(layer["keys"])]
        return {"headLayer": cross[-1] if cross else len(names) - 1,
                "imageLayer": str(square[-1]) if square else "rollout"}

    def html(self):
        """The page, as a string."""
        data = json.dumps(self.data(), separators=(",", ":"))
        # Inside <script>, "</script>" or "<!--" in a token would end the block: escape <, > and & as JSON allows.
        data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        title = html.escape(self.title or "attention")
        return _PAGE.replace("{{title}}", title).replace("{{style}}", _STYLE).replace(
            "{{script}}", _SCRIPT).replace("{{data}}", data)

    def resume(self, path):
        """Puts back the earlier epochs of the page at `path` (a run interrupted and started again), when that page
        shows the same layers, labels and image as this history's first snapshot; epochs from this history's
        first one on are left out (they are drawn again). Returns how many snapshots were taken."""
        if not self.snapshots or not os.path.exists(path):
            return 0
        with open(path, encoding="utf-8") as file:
            found = re.search(_DATA_BLOCK, file.read(), re.S)
        if found is None:
            return 0
        old = json.loads(found.group(1))
        if old.get("layers") != self.layers or old.get("image") != self._image_info:
            return 0  # another model, sample or image: start afresh
        earlier = [i for i, epoch in enumerate(old["epochs"]) if _before(epoch, self.epochs[0])]
        shapes = [(layer["heads"], len(layer["queries"]), len(layer["keys"])) for layer in self.layers]
        snapshots = [[np.frombuffer(base64.b64decode(m), dtype="uint8").reshape(shape)
                      for m, shape in zip(old["maps"][i], shapes)] for i in earlier]
        self.snapshots[:0] = snapshots
        self.epochs[:0] = [old["epochs"][i] for i in earlier]
        return len(earlier)

    def save(self, path):
        """Writes the page to `path` (UTF-8) and returns the path."""
        with open(path, "w", encoding="utf-8") as file:
            file.write(self.html())
        return path


def _before(label, epoch):
    """Whether the stored epoch label comes before `epoch` (labels that are not numbers never do)."""
    try:
        return float(label) < float(epoch)
    except (TypeError, ValueError):
        return False


_DATA_BLOCK = r'<script id="explorer-data" type="application/json">(.*?)</script>'


def attention_html(maps, tokens=None, image=None, title=None, *, epochs=None, sample=0, num_prefix_tokens=None):
    """One self-contained HTML page (inline JavaScript and CSS, opens offline) to explore attention maps.

    Text and seq2seq maps get a head view and a model view; with `image`, a ViT's maps get an image view and a
    model view. See the module docstring for what each view shows.

    Args:
        maps: the dict returned by `keras_tfm.attention_maps` {name: `(batch, heads, q, k)`} (or `(heads, q, k)`
            arrays), a list of arrays, or one array. With `epochs`, a list of such dicts, one per epoch.
        tokens: token labels: one list, or a `(source, target)` pair for a seq2seq model; padding past the
            labels is left out.
        image: `(height, width, channels)` image of a ViT's sample: adds the image view.
        title: page heading.
        epochs: labels of the snapshots when `maps` is a list of them: adds an epoch slider.
        sample: which sample of the batch to show.
        num_prefix_tokens: with `image`, tokens before the patches (1 for [CLS]); inferred when None.

    Returns:
        The page as a string.

    Example:

    >>> maps = keras_tfm.attention_maps(model, ids[:1])  # doctest: +SKIP
    >>> page = attention_html(maps, tokens=["[CLS]", "a", "fine", "film"])  # doctest: +SKIP
    """
    history = AttentionHistory(tokens=tokens, image=image, title=title, sample=sample,
                               num_prefix_tokens=num_prefix_tokens)
    if epochs is None:
        history.add(maps)
    else:
        if not isinstance(maps, (list, tuple)) or len(maps) != len(epochs):
            raise ValueError(f"With `epochs` ({len(epochs)} labels), `maps` must be a list of as many snapshots. "
                             f"Received: {type(maps).__name__} of length {len(maps) if hasattr(maps, '__len__') else '?'}")
        for snapshot, epoch in zip(maps, epochs):
            history.add(snapshot, epoch=epoch)
    return history.html()


def save_attention_html(path, maps, **kwargs):
    """Writes `attention_html(maps, **kwargs)` to `path` and returns the path; open it in any browser."""
    with open(path, "w", encoding="utf-8") as file:
        file.write(attention_html(maps, **kwargs))
    return path


def show_attention(maps, height=720, **kwargs):
    """Shows the explorer inline in Jupyter, in an iframe that keeps its script and styles apart from the notebook.

    Args:
        maps: as for `attention_html`.
        height: height of the frame in pixels.
        **kwargs: `tokens`, `image`, `title`, `epochs`, `sample`, `num_prefix_tokens`, as for `attention_html`.

    Raises:
        ImportError: without IPython (imported here only, never when keras_tfm is imported).

    Example:

    >>> show_attention(keras_tfm.attention_maps(model, ids[:1]), tokens=words)  # doctest: +SKIP
    """
    try:
        from IPython.display import HTML, display
    except ImportError as error:
        raise ImportError("show_attention needs IPython (Jupyter). Outside a notebook, write the page with "
                          "save_attention_html(path, maps) and open it in a browser.") from error
    page = attention_html(maps, **kwargs)
    # An iframe keeps the page's script, styles and element ids apart from the notebook's and from other pages.
    frame = (f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{int(height)}px;'
             'border:1px solid #ddd" sandbox="allow-scripts"></iframe>')
    display(HTML(frame))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{title}}</title>
<style>{{style}}</style>
</head>
<body>
<header>
  <h1>{{title}}</h1>
  <nav id="tabs"></nav>
  <div id="epoch-control" hidden>
    <button id="play" type="button" title="play the epochs">&#9654;</button>
    <input id="epoch" type="range" min="0" max="0" value="0" aria-label="epoch">
    <span id="epoch-label"></span>
  </div>
</header>
<main>
  <section id="view-head" class="view" hidden>
    <div class="controls">
      <label>layer <select id="head-layer"></select></label>
      <span id="head-toggles"></span>
      <span class="hint">Hover a token to see only its row (left) or column (right). Click a head to switch it,
        double-click to show it alone.</span>
    </div>
    <div id="head-readout" class="readout">&nbsp;</div>
    <svg id="head-svg" xmlns="http://www.w3.org/2000/svg"></svg>
  </section>
  <section id="view-model" class="view" hidden>
    <p class="hint">Rows: layers; columns: heads. Each square is one head's attention (queries down, keys across;
      colours scaled to that head's largest weight). Click one to open it.</p>
    <div class="model-row">
      <div id="model-grid"></div>
      <div id="model-detail" hidden>
        <h2 id="detail-title"></h2>
        <div id="detail-readout" class="readout">&nbsp;</div>
        <div id="detail-frame">
          <span class="axis">queries ↓ keys →</span><div id="detail-keys"></div>
          <div id="detail-queries"></div><canvas id="detail-canvas"></canvas>
        </div>
      </div>
    </div>
  </section>
  <section id="view-image" class="view" hidden>
    <div class="controls">
      <label>layer <select id="image-layer"></select></label>
      <label>head <select id="image-head"></select></label>
      <button id="image-cls" type="button"></button>
      <label><input id="image-alpha" type="range" min="0" max="100" value="60"> overlay</label>
    </div>
    <p class="hint">The heat shows where the chosen query token looks. Click a patch to make it the query.</p>
    <div class="image-row">
      <figure><canvas id="image-plain"></canvas><figcaption>the image</figcaption></figure>
      <figure><div id="image-stack"><canvas id="image-base"></canvas><canvas id="image-overlay"></canvas></div>
        <figcaption>where the query looks</figcaption></figure>
      <div>
        <div id="image-readout" class="readout"></div>
        <div class="legend"><span>low</span><span id="image-legend"></span><span>high</span></div>
      </div>
    </div>
  </section>
</main>
<script id="explorer-data" type="application/json">{{data}}</script>
<script>{{script}}</script>
</body>
</html>
"""

_STYLE = """
[hidden] { display: none !important; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #fff; border-bottom: 1px solid #ddd; padding: 10px 18px; display: flex; flex-wrap: wrap;
  align-items: center; gap: 18px; position: sticky; top: 0; z-index: 2; }
h1 { font-size: 18px; margin: 0; font-weight: 600; }
h2 { font-size: 15px; margin: 12px 0 6px; font-weight: 600; }
nav button { border: 1px solid #bbb; background: #f3f3f3; padding: 5px 12px; margin-right: 4px; border-radius: 4px;
  cursor: pointer; font: inherit; }
nav button.active { background: #2b6cb0; border-color: #2b6cb0; color: #fff; }
#epoch-control { display: flex; align-items: center; gap: 8px; }
#epoch { width: 260px; }
#epoch-label { font-variant-numeric: tabular-nums; min-width: 70px; font-weight: 600; }
#play { border: 1px solid #bbb; background: #fff; border-radius: 4px; cursor: pointer; width: 30px; }
main { padding: 12px 18px; }
.controls { display: flex; flex-wrap: wrap; align-items: center; gap: 14px; margin-bottom: 6px; }
.hint { color: #666; font-size: 12.5px; }
.readout { font-size: 13px; color: #333; min-height: 20px; font-variant-numeric: tabular-nums; }
.toggle { display: inline-flex; align-items: center; gap: 3px; margin-right: 6px; cursor: pointer; user-select: none;
  padding: 2px 6px; border-radius: 4px; border: 1px solid #ccc; background: #fff; font-size: 12.5px; }
.toggle .swatch { width: 12px; height: 12px; border-radius: 2px; display: inline-block; }
.toggle.off { opacity: 0.35; }
#head-svg { background: #fff; border: 1px solid #e3e3e3; border-radius: 6px; }
#head-svg text { font: 13px ui-monospace, SFMono-Regular, Menlo, monospace; cursor: default; }
#head-svg line, #head-svg rect { pointer-events: none; }
#head-svg text.active { font-weight: 700; }
#head-svg text.caption { font: 12px system-ui, sans-serif; fill: #777; }
.model-row { display: flex; flex-wrap: wrap; gap: 28px; align-items: flex-start; }
#model-grid { display: grid; gap: 6px; align-items: center; justify-content: start; }
#model-detail h2 { margin-top: 0; }
#detail-frame { display: grid; grid-template-columns: auto auto; justify-content: start; }
#detail-frame .axis { font-size: 11px; color: #666; align-self: end; padding: 0 6px 4px 0; }
#detail-keys { display: flex; align-items: flex-end; padding-left: 2px; }
#detail-keys span { writing-mode: vertical-rl; transform: rotate(180deg); flex: none; text-align: left;
  font: 11px ui-monospace, Menlo, monospace; white-space: nowrap; overflow: hidden; max-height: 90px; padding-bottom: 3px; }
#detail-queries { display: flex; flex-direction: column; padding-top: 2px; }
#detail-queries span { flex: none; display: flex; align-items: center; justify-content: flex-end; padding-right: 5px;
  font: 11px ui-monospace, Menlo, monospace; white-space: nowrap; max-width: 110px; overflow: hidden; }
#model-grid .label { font-size: 12px; color: #444; text-align: right; padding-right: 4px; white-space: nowrap; }
#model-grid .collabel { font-size: 12px; color: #444; text-align: center; }
#model-grid canvas { cursor: pointer; border: 2px solid transparent; border-radius: 3px; image-rendering: pixelated; }
#model-grid canvas.selected { border-color: #2b6cb0; }
#model-detail canvas { image-rendering: pixelated; border: 1px solid #ddd; background: #fff; }
.image-row { display: flex; gap: 20px; align-items: flex-start; flex-wrap: wrap; }
figure { margin: 0; }
figcaption { font-size: 12.5px; color: #555; text-align: center; margin-top: 4px; }
.legend { display: flex; align-items: center; gap: 6px; font-size: 12px; color: #555; margin-top: 10px; }
#image-legend { display: inline-block; width: 160px; height: 12px; border-radius: 2px; }
#image-stack { position: relative; }
figure canvas { display: block; image-rendering: pixelated; }
#image-overlay { position: absolute; left: 0; top: 0; cursor: crosshair; }
#image-readout { max-width: 260px; }
button#image-cls { border: 1px solid #bbb; background: #fff; border-radius: 4px; padding: 3px 10px; cursor: pointer; }
"""

_SCRIPT = r"""
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("explorer-data").textContent);
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#843c39", "#7b4173", "#3182bd"];
  const VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
                   [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];
  const INFERNO = [[0, 0, 4], [40, 11, 84], [101, 21, 110], [159, 42, 99], [212, 72, 66], [245, 125, 21],
                   [250, 193, 39], [252, 255, 164]];

  function decode(text) {
    const raw = atob(text), bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes;
  }
  const maps = D.maps.map((snapshot) => snapshot.map(decode)); // [epoch][layer] -> uint8 (heads, q, k)
  const state = { epoch: D.epochs.length - 1, view: D.views[0], headLayer: D.start.headLayer, active: [], hover: null,
                  detail: null, imageLayer: D.start.imageLayer, imageHead: "mean", query: null };

  function weight(epoch, layer, head, q, k) {
    const L = D.layers[layer];
    return maps[epoch][layer][(head * L.queries.length + q) * L.keys.length + k] / D.levels;
  }
  function row(epoch, layer, head, q) { // one head's weights of query q over the keys (head "mean": all heads)
    const L = D.layers[layer], out = new Float64Array(L.keys.length);
    const heads = head === "mean" ? [...Array(L.heads).keys()] : [head];
    for (const h of heads) for (let k = 0; k < out.length; k++) out[k] += weight(epoch, layer, h, q, k) / heads.length;
    return out;
  }
  function color(stops, t) {
    t = Math.min(1, Math.max(0, t)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(t)), f = t - i, a = stops[i], b = stops[i + 1];
    return [0, 1, 2].map((c) => Math.round(a[c] + f * (b[c] - a[c])));
  }
  const fmt = (w) => w.toFixed(3);
  function el(tag, attrs, parent, ns) {
    const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }

  // ---- tabs and epoch slider --------------------------------------------------------------------------------
  const NAMES = { head: "head view", model: "model view", image: "image view" };
  for (const view of D.views) {
    const button = el("button", { id: "tab-" + view, type: "button" }, $("tabs"));
    button.textContent = NAMES[view];
    button.addEventListener("click", () => { state.view = view; render(); });
  }
  if (D.epochs.length > 1) {
    $("epoch-control").hidden = false;
    $("epoch").max = D.epochs.length - 1;
    $("epoch").value = state.epoch;
    $("epoch").addEventListener("input", () => { state.epoch = Number($("epoch").value); render(); });
    let timer = null;
    $("play").addEventListener("click", () => {
      if (timer) { clearInterval(timer); timer = null; $("play").innerHTML = "&#9654;"; return; }
      if (state.epoch === D.epochs.length - 1) state.epoch = 0;
      $("play").innerHTML = "&#10074;&#10074;";
      timer = setInterval(() => {
        $("epoch").value = state.epoch; render();
        if (state.epoch >= D.epochs.length - 1) { clearInterval(timer); timer = null; $("play").innerHTML = "&#9654;"; }
        else state.epoch += 1;
      }, 600);
    });
  }

  // ---- head view ----------------------------------------------------------------------------------------------
  function setupHead() {
    D.layers.forEach((L, j) => { const o = el("option", { value: j }, $("head-layer")); o.textContent = L.name; });
    $("head-layer").value = String(state.headLayer);
    $("head-layer").addEventListener("change", () => { state.headLayer = Number($("head-layer").value); headToggles(); render(); });
    headToggles();
  }
  function headToggles() {
    const L = D.layers[state.headLayer], box = $("head-toggles");
    box.textContent = "";
    state.active = [...Array(L.heads).keys()];
    for (let h = 0; h < L.heads; h++) {
      const t = el("span", { class: "toggle", "data-head": h, title: "click: on/off, double-click: only this head" }, box);
      el("span", { class: "swatch", style: "background:" + PALETTE[h % PALETTE.length] }, t);
      t.appendChild(document.createTextNode("head " + h));
      t.addEventListener("click", () => {
        state.active = state.active.includes(h) ? state.active.filter((x) => x !== h) : [...state.active, h].sort((a, b) => a - b);
        render();
      });
      t.addEventListener("dblclick", () => { state.active = [h]; render(); });
    }
  }
  let builtLayer = -1; // tokens are drawn once per layer: redrawing them under the pointer would re-fire hovers
  function buildHead() {
    const L = D.layers[state.headLayer], svg = $("head-svg"), Q = L.queries.length, K = L.keys.length;
    svg.textContent = "";
    svg.setAttribute("width", HEAD.right + 170);
    svg.setAttribute("height", HEAD.top + HEAD.step * Math.max(Q, K) + 8);
    el("text", { x: HEAD.left, y: 16, "text-anchor": "end", class: "caption" }, svg, SVG).textContent = "queries";
    el("text", { x: HEAD.right, y: 16, class: "caption" }, svg, SVG).textContent = "keys";
    el("g", { id: "head-shades" }, svg, SVG);
    el("g", { id: "head-lines" }, svg, SVG);
    const tokens = (labels, side, x, anchor) => labels.forEach((label, i) => {
      const t = el("text", { x: x, y: HEAD.top + i * HEAD.step + 4, "text-anchor": anchor,
                             class: "token " + side + "-token", "data-index": i }, svg, SVG);
      t.textContent = label;
      t.addEventListener("mouseenter", () => { state.hover = { side: side, index: i }; render(); });
      t.addEventListener("mouseleave", () => { state.hover = null; render(); });
    });
    tokens(L.queries, "query", HEAD.left, "end");
    tokens(L.keys, "key", HEAD.right, "start");
    builtLayer = state.headLayer;
  }
  const HEAD = { step: 20, top: 40, left: 170, right: 430 };
  function renderHead() {
    if (builtLayer !== state.headLayer) buildHead();
    const L = D.layers[state.headLayer], e = state.epoch, Q = L.queries.length, K = L.keys.length, hover = state.hover;
    for (const t of $("head-toggles").children) t.classList.toggle("off", !state.active.includes(Number(t.dataset.head)));
    const lines = $("head-lines"), shades = $("head-shades");
    lines.textContent = ""; shades.textContent = "";
    for (const h of state.active) {
      for (let q = 0; q < Q; q++) {
        if (hover && hover.side === "query" && hover.index !== q) continue;
        for (let k = 0; k < K; k++) {
          if (hover && hover.side === "key" && hover.index !== k) continue;
          const w = weight(e, state.headLayer, h, q, k);
          if (!hover && w < 0.02) continue; // the full view skips invisible lines; a hovered row shows them all
          const shift = (h - (L.heads - 1) / 2) * 2; // heads side by side, not drawn over each other
          el("line", { x1: HEAD.left + 6, y1: HEAD.top + q * HEAD.step + shift, x2: HEAD.right - 6,
                       y2: HEAD.top + k * HEAD.step + shift,
                       stroke: PALETTE[h % PALETTE.length], "stroke-width": 2, "stroke-opacity": Math.max(w, 0.03),
                       "data-head": h, "data-query": q, "data-key": k, "data-weight": w.toFixed(4),
                       class: "attention-line" }, lines, SVG);
        }
      }
    }
    for (const t of $("head-svg").querySelectorAll("text.token")) {
      t.classList.toggle("active", !!hover && t.classList.contains(hover.side + "-token") && Number(t.dataset.index) === hover.index);
    }
    if (!hover || !state.active.length) {
      $("head-readout").textContent = L.name + ": " + Q + " queries × " + K + " keys, " + state.active.length + " of "
        + L.heads + " heads shown";
      return;
    }
    const other = hover.side === "query" ? K : Q, shade = new Float64Array(other); // mean of the shown heads
    for (const h of state.active) for (let i = 0; i < other; i++) {
      shade[i] += (hover.side === "query" ? weight(e, state.headLayer, h, hover.index, i)
                                          : weight(e, state.headLayer, h, i, hover.index)) / state.active.length;
    }
    for (let i = 0; i < other; i++) {
      el("rect", { x: hover.side === "query" ? HEAD.right - 2 : HEAD.left - 150, y: HEAD.top + i * HEAD.step - 9, width: 152,
                   height: 18, rx: 3, fill: "rgba(43,108,176," + (0.85 * shade[i]).toFixed(3) + ")" }, shades, SVG);
    }
    const labels = hover.side === "query" ? L.keys : L.queries, who = (hover.side === "query" ? L.queries : L.keys)[hover.index];
    const order = [...shade.keys()].sort((a, b) => shade[b] - shade[a]).slice(0, 3);
    $("head-readout").textContent = "“" + who + "” " + (hover.side === "query" ? "looks most at: " : "is looked at most by: ")
      + order.map((i) => "“" + labels[i] + "” " + fmt(shade[i])).join(", ") + "  (mean of the shown heads)";
  }

  // ---- model view ---------------------------------------------------------------------------------------------
  function paint(canvas, layer, head, size) { // one head's (q, k) map, colours scaled to its largest weight
    const L = D.layers[layer], Q = L.queries.length, K = L.keys.length, e = state.epoch;
    let top = 1e-9;
    for (let q = 0; q < Q; q++) for (let k = 0; k < K; k++) top = Math.max(top, weight(e, layer, head, q, k));
    const small = document.createElement("canvas");
    small.width = K; small.height = Q;
    const ctx = small.getContext("2d"), image = ctx.createImageData(K, Q);
    for (let q = 0; q < Q; q++) for (let k = 0; k < K; k++) {
      const c = color(VIRIDIS, weight(e, layer, head, q, k) / top), p = 4 * (q * K + k);
      image.data[p] = c[0]; image.data[p + 1] = c[1]; image.data[p + 2] = c[2]; image.data[p + 3] = 255;
    }
    ctx.putImageData(image, 0, 0);
    const scale = size / Math.max(Q, K);
    canvas.width = Math.round(K * scale); canvas.height = Math.round(Q * scale);
    const out = canvas.getContext("2d");
    out.imageSmoothingEnabled = false;
    out.drawImage(small, 0, 0, canvas.width, canvas.height);
  }
  function setupModel() {
    const heads = Math.max(...D.layers.map((L) => L.heads)), grid = $("model-grid");
    grid.style.gridTemplateColumns = "auto repeat(" + heads + ", 88px)";
    el("span", {}, grid);
    for (let h = 0; h < heads; h++) el("span", { class: "collabel" }, grid).textContent = "head " + h;
    D.layers.forEach((L, j) => {
      el("span", { class: "label" }, grid).textContent = L.name;
      for (let h = 0; h < heads; h++) {
        if (h >= L.heads) { el("span", {}, grid); continue; }
        const c = el("canvas", { class: "thumb", "data-layer": j, "data-head": h, title: L.name + ", head " + h }, grid);
        c.addEventListener("click", () => { state.detail = { layer: j, head: h }; render(); });
      }
    });
    $("detail-canvas").addEventListener("mousemove", (event) => {
      if (!state.detail) return;
      const L = D.layers[state.detail.layer], c = $("detail-canvas"), box = c.getBoundingClientRect();
      const k = Math.floor((event.clientX - box.left) / box.width * L.keys.length);
      const q = Math.floor((event.clientY - box.top) / box.height * L.queries.length);
      if (q < 0 || k < 0 || q >= L.queries.length || k >= L.keys.length) return;
      $("detail-readout").textContent = "query “" + L.queries[q] + "” (" + q + ") → key “" + L.keys[k] + "” (" + k + "): "
        + fmt(weight(state.epoch, state.detail.layer, state.detail.head, q, k));
    });
  }
  function renderModel() {
    for (const c of document.querySelectorAll("#model-grid canvas.thumb")) {
      const j = Number(c.dataset.layer), h = Number(c.dataset.head);
      paint(c, j, h, 80);
      c.classList.toggle("selected", !!state.detail && state.detail.layer === j && state.detail.head === h);
    }
    $("model-detail").hidden = !state.detail;
    if (state.detail) {
      const L = D.layers[state.detail.layer];
      $("detail-title").textContent = L.name + ", head " + state.detail.head + " (epoch " + D.epochs[state.epoch] + ")";
      const canvas = $("detail-canvas");
      paint(canvas, state.detail.layer, state.detail.head, 420);
      const cellWidth = canvas.width / L.keys.length, cellHeight = canvas.height / L.queries.length;
      const keys = $("detail-keys"), queries = $("detail-queries");
      keys.textContent = ""; queries.textContent = "";
      if (Math.min(cellWidth, cellHeight) >= 11) { // labels only where they fit
        for (const label of L.keys) { const s = el("span", { style: "width:" + cellWidth + "px" }, keys); s.textContent = label; }
        for (const label of L.queries) { const s = el("span", { style: "height:" + cellHeight + "px" }, queries); s.textContent = label; }
      }
    }
  }

  // ---- image view ---------------------------------------------------------------------------------------------
  const rollouts = {};
  function rollout(epoch) { // Abnar & Zuidema: R = Â_L ··· Â_1 with Â = rows-normalised (mean of heads + I) / 2
    if (rollouts[epoch]) return rollouts[epoch];
    const n = D.layers.find((L) => L.queries.length === L.keys.length).keys.length;
    let R = Array.from({ length: n }, (_, i) => Float64Array.from({ length: n }, (_, j) => (i === j ? 1 : 0)));
    D.layers.forEach((L, j) => {
      if (L.queries.length !== n || L.keys.length !== n) return;
      const A = [];
      for (let q = 0; q < n; q++) {
        const r = row(epoch, j, "mean", q);
        r[q] += 1;
        let s = 0; for (let k = 0; k < n; k++) s += r[k];
        for (let k = 0; k < n; k++) r[k] /= s;
        A.push(r);
      }
      R = A.map((a) => { const out = new Float64Array(n); for (let m = 0; m < n; m++) if (a[m]) for (let k = 0; k < n; k++) out[k] += a[m] * R[m][k]; return out; });
    });
    return (rollouts[epoch] = R);
  }
  let baseImage = null;
  function setupImage() {
    const I = D.image, layer = $("image-layer"), head = $("image-head");
    el("option", { value: "rollout" }, layer).textContent = "rollout (all layers)";
    D.layers.forEach((L, j) => {
      if (L.queries.length === L.keys.length) el("option", { value: j }, layer).textContent = L.name;
    });
    const heads = Math.max(...D.layers.map((L) => L.heads));
    el("option", { value: "mean" }, head).textContent = "mean of heads";
    for (let h = 0; h < heads; h++) el("option", { value: h }, head).textContent = "head " + h;
    layer.value = state.imageLayer;
    layer.addEventListener("change", () => { state.imageLayer = layer.value; render(); });
    head.addEventListener("change", () => { state.imageHead = head.value === "mean" ? "mean" : Number(head.value); render(); });
    $("image-alpha").addEventListener("input", render);
    state.query = I.prefix ? 0 : null; // the [CLS] token, or (no [CLS]) the mean over all patches as queries
    $("image-cls").textContent = I.prefix ? "query: [CLS]" : "query: all patches (mean)";
    $("image-cls").addEventListener("click", () => { state.query = I.prefix ? 0 : null; render(); });
    const scale = Math.max(1, Math.floor(320 / Math.max(I.width, I.height)));
    for (const c of [$("image-plain"), $("image-base"), $("image-overlay")]) { c.width = I.width * scale; c.height = I.height * scale; }
    $("image-legend").style.background = "linear-gradient(to right, " + INFERNO.map((c) => "rgb(" + c.join(",") + ")").join(", ") + ")";
    baseImage = new Image();
    baseImage.onload = render;
    baseImage.src = "data:image/png;base64," + I.png;
    $("image-overlay").addEventListener("click", (event) => {
      const box = $("image-overlay").getBoundingClientRect();
      const r = Math.floor((event.clientY - box.top) / box.height * I.rows);
      const c = Math.floor((event.clientX - box.left) / box.width * I.columns);
      if (r >= 0 && c >= 0 && r < I.rows && c < I.columns) { state.query = I.prefix + r * I.columns + c; render(); }
    });
  }
  function imageWeights() { // the shown weights: the query's attention over the patches (prefix keys left out)
    const I = D.image, e = state.epoch, patches = I.rows * I.columns;
    let full;
    if (state.imageLayer === "rollout") {
      const R = rollout(e);
      full = state.query === null ? R.slice(I.prefix).reduce((s, r) => s.map((v, k) => v + r[k] / patches), new Float64Array(R.length)) : R[state.query];
    } else {
      const j = Number(state.imageLayer);
      full = state.query === null
        ? [...Array(patches).keys()].map((p) => row(e, j, state.imageHead, I.prefix + p))
            .reduce((s, r) => s.map((v, k) => v + r[k] / patches), new Float64Array(D.layers[j].keys.length))
        : row(e, j, state.imageHead, state.query);
    }
    return Array.from(full).slice(I.prefix);
  }
  function renderImage() {
    const I = D.image, base = $("image-base"), overlay = $("image-overlay");
    $("image-head").disabled = state.imageLayer === "rollout";
    if (!baseImage || !baseImage.complete) return;
    for (const canvas of [base, $("image-plain")]) {
      const b = canvas.getContext("2d");
      b.imageSmoothingEnabled = false;
      b.drawImage(baseImage, 0, 0, canvas.width, canvas.height);
    }
    const w = imageWeights(), low = Math.min(...w), high = Math.max(...w), alpha = Number($("image-alpha").value) / 100;
    const o = overlay.getContext("2d"), cw = overlay.width / I.columns, ch = overlay.height / I.rows;
    o.clearRect(0, 0, overlay.width, overlay.height);
    for (let p = 0; p < w.length; p++) {
      const c = color(INFERNO, (w[p] - low) / Math.max(high - low, 1e-9));
      o.fillStyle = "rgba(" + c[0] + "," + c[1] + "," + c[2] + "," + alpha + ")";
      o.fillRect((p % I.columns) * cw, Math.floor(p / I.columns) * ch, Math.ceil(cw), Math.ceil(ch));
    }
    if (state.query !== null && state.query >= I.prefix) {
      const p = state.query - I.prefix;
      o.strokeStyle = "#00e5ff"; o.lineWidth = 3;
      o.strokeRect((p % I.columns) * cw + 1.5, Math.floor(p / I.columns) * ch + 1.5, cw - 3, ch - 3);
    }
    overlay.dataset.weights = JSON.stringify(w.map((v) => Number(v.toFixed(4))));
    const what = state.imageLayer === "rollout" ? "rollout over all layers"
      : D.layers[Number(state.imageLayer)].name + ", " + (state.imageHead === "mean" ? "mean of heads" : "head " + state.imageHead);
    const query = state.query === null ? "all patches (mean)" : state.query < I.prefix ? "[CLS]" : "patch " + (state.query - I.prefix)
      + " (row " + Math.floor((state.query - I.prefix) / I.columns) + ", column " + ((state.query - I.prefix) % I.columns) + ")";
    $("image-readout").textContent = "query: " + query + ". " + what + ", epoch " + D.epochs[state.epoch]
      + ". Patch weights from " + fmt(low) + " (dark) to " + fmt(high) + " (bright); " + I.rows + "×" + I.columns + " patches.";
  }

  // ---- all together ---------------------------------------------------------------------------------------------
  function render() {
    for (const view of ["head", "model", "image"]) {
      $("view-" + view).hidden = state.view !== view;
      const tab = $("tab-" + view);
      if (tab) tab.classList.toggle("active", state.view === view);
    }
    $("epoch-label").textContent = "epoch " + D.epochs[state.epoch];
    if (state.view === "head") renderHead();
    if (state.view === "model") renderModel();
    if (state.view === "image") renderImage();
  }
  if (D.views.includes("head")) setupHead();
  setupModel();
  if (D.views.includes("image")) setupImage();
  render();
  window.explorer = { data: D, state: state, render: render };
})();
"""
