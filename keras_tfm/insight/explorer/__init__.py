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
`attention.html` at every drawn epoch, with its data beside it in `attention.json` (what `resume` reads back
when a run is started again).

Weights are stored as 8 bits (`round(w * 255)`, so each shown weight is within 1/510 of the model's) in base64:
one byte per weight and epoch, plus a third for base64. A 6-layer, 8-head, 65-token model over 10 epochs is
about 2.7 MB (and `save`'s `.json` beside the page holds the same data again).

The page's markup, styles and script are package data beside this file (`page.html`, `explorer.css`, one `.js`
file per concern), put together by `_page.py`; the maps come as `AttentionMap` records (`attention_maps`' result),
whose kinds say which labels each map's queries and keys get.
"""

import base64
import io
import json
import numbers
import os

import numpy as np
import PIL.Image

from keras_tfm.files import write_text
from keras_tfm.insight.attention_probe import AttentionMap, AttentionMaps, as_records, is_token_pair, query_key_tokens
from keras_tfm.insight.explorer._page import build_frame, build_page
from keras_tfm.insight.patch_grid import infer_grid

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
    buffer = io.BytesIO()
    PIL.Image.fromarray(np.ascontiguousarray(pixels)).save(buffer, format="PNG")  # RGB or RGBA, 8 bits a channel
    return buffer.getvalue()


def data_path(path):
    """Where `AttentionHistory.save(path)` keeps the page's data for `resume`: beside the page, as `.json`
    (`runs/x/attention.html` -> `runs/x/attention.json`)."""
    return os.path.splitext(os.fspath(path))[0] + ".json"


class AttentionHistory:
    """The attention of one sample at several moments of training, and the explorer page that shows them.

    Each `add` stores the maps of one epoch quantised to 8 bits; `html()` builds the page (with an epoch slider
    once there are two snapshots) and `save(path)` writes it, with its data beside it for `resume`. The layers
    and their shapes are fixed by the first snapshot.

    Args:
        tokens: labels of the tokens: one list (the same for queries and keys), or a `(source, target)` pair of
            lists for a seq2seq model (then the maps must be `attention_maps`' result or `AttentionMap` records,
            whose kinds say which labels go where: encoder maps the source, decoder self-attention the target,
            cross-attention target queries over source keys; see `attention_probe.query_key_tokens`). Map rows
            and columns past the end of the labels (padding) are left out. Without labels, positions are
            numbered, and the masked padding at the end (keys no query attends to; for self-attention the same
            positions as queries) is left out too. Where a map's record has a prepended [CLS] and the labels are
            that much shorter than the map, "[CLS]" is put in front.
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
        self.layers = None  # [{"name", "kind", "heads", "queries", "keys"}], fixed by the first snapshot
        self.epochs = []  # when each snapshot was taken, in epochs (0: before training), for ordering and resume
        self.labels = []  # what each snapshot is, as the page shows it ("before fine-tuning", "epoch 0.25")
        self.snapshots = []  # per snapshot: [uint8 (heads, q, k) per layer]
        self.relevance = []  # per snapshot: the image's patch shares (rows * columns floats, row-major), or None
        self._image_info = None
        if self.image is not None:
            self._image_png = base64.b64encode(_png(self.image)).decode("ascii")

    def _records(self, maps):
        """The `AttentionMap` records of `maps`; a `(source, target)` pair of labels needs records with kinds."""
        records = as_records(maps)
        with_kinds = isinstance(maps, AttentionMaps) or (
            isinstance(maps, (list, tuple)) and all(isinstance(m, AttentionMap) for m in maps))
        if is_token_pair(self.tokens) and not with_kinds:
            raise ValueError(
                "`tokens` is a (source, target) pair, so each map must say whether it is encoder, decoder self- or "
                "cross-attention: pass what `keras_tfm.attention_maps` returns (or a list of AttentionMap records). "
                f"Received: maps of type {type(maps).__name__}, which has no kinds."
            )
        return records

    def _labels(self, record, keys):
        """`(query_labels, key_labels)` of a `(heads, queries, keys)` map, or `(None, None)` without tokens."""
        if self.tokens is None:
            return None, None
        prefix = record.prefix_tokens
        # "[CLS]" goes in front only where the labels are exactly the map's tokens after the prefix: labels that
        # already count it (or that stop before padding) are the user's own and stay as they are.
        fits = prefix and not is_token_pair(self.tokens) and len(self.tokens) + prefix == keys
        return query_key_tokens(record.kind, self.tokens, prefix if fits else 0)

    def _image_layout(self, num_tokens):
        """(prefix tokens, rows, columns) of the patch grid of the image for square maps over `num_tokens` tokens."""
        prefixes = (1, 0) if self.num_prefix_tokens is None else (self.num_prefix_tokens,)
        for prefix in prefixes:
            if num_tokens - prefix < 1:
                continue
            try:
                rows, columns = infer_grid(num_tokens - prefix, self.image.shape)
            except ValueError:
                continue  # not a grid with this many prefix tokens: try the next
            return prefix, rows, columns
        raise ValueError(
            f"Cannot lay the {num_tokens} tokens of the maps out as a patch grid of an image of shape "
            f"{tuple(self.image.shape)} (tried {list(prefixes)} prefix tokens); pass `num_prefix_tokens`."
        )

    def _layout(self, layers):
        """Fixes each layer's shape and labels from the first snapshot."""
        described = []
        for record, m in layers:
            heads, queries, keys = m.shape
            query_labels, key_labels = self._labels(record, keys)
            for labels, size, what in ((query_labels, queries, "query"), (key_labels, keys, "key")):
                if labels is not None and len(labels) > size:
                    raise ValueError(
                        f"`tokens` has {len(labels)} {what} labels for layer '{record.name}', which has only {size} "
                        f"{what} positions. Pass the labels of the tokens the maps were computed on."
                    )
            # Fewer key labels than keys is padding left out, but only if the keys past them get no attention
            # (masked); keys that are attended to are tokens without a label.
            if key_labels is not None and len(key_labels) < keys and np.max(m[:, :, len(key_labels):]) > 1e-6:
                raise ValueError(
                    f"`tokens` has {len(key_labels)} key labels for layer '{record.name}', which has {keys} key "
                    "positions, and the ones past the labels are attended to (they are not masked padding). Pass "
                    "one label per token the maps were computed on."
                )
            if key_labels is None:
                # No labels: the keys no query attends to in any head, at the end, are masked padding; for
                # self-attention the same positions are padding queries too. Both are left out, as with labels.
                attended = np.flatnonzero(m.max(axis=(0, 1)) > 1e-6)
                real = int(attended[-1]) + 1 if len(attended) else keys
                key_labels = [str(i) for i in range(real)]
                if query_labels is None and queries == keys and record.kind in ("encoder", "self"):
                    query_labels = [str(i) for i in range(real)]
            query_labels = query_labels or [str(i) for i in range(queries)]
            described.append({"name": record.name, "kind": record.kind, "heads": heads, "queries": query_labels,
                              "keys": key_labels})
        if self.image is not None:
            square = [m.shape[-1] for _, m in layers if m.shape[-1] == m.shape[-2]]
            if not square:
                raise ValueError("The image view needs self-attention (square) maps; `maps` has none.")
            prefix, rows, columns = self._image_layout(square[0])
            self._image_info = {"png": self._image_png, "prefix": prefix, "rows": rows, "columns": columns,
                                "height": int(self.image.shape[0]), "width": int(self.image.shape[1])}
        return described

    def add(self, maps, epoch=None, label=None, relevance=None):
        """Stores one snapshot (quantised) of `maps`: what `attention_maps` returns (`(batch, heads, q, k)` or
        `(heads, q, k)` weights), a list of `AttentionMap` records, a `{name: array}` dict, a list of arrays, or
        one array. `epoch` says when it was taken, in epochs (default: 1, 2, ...; 0 = before training, 0.25 =
        a quarter into the first epoch); `label` what the page calls it (default: "epoch {epoch}"). With an
        image, `relevance` `(rows, columns)` is where the prediction comes from at that time, one value per patch
        (`keras_tfm.insight.attribution.occlusion_map`'s score drops: the image view shows them as shares of the total,
        and opens on them for a model without a [CLS] token, whose rollout mostly shows a position prior).
        Returns the history."""
        layers = []
        for record in self._records(maps):
            name, m = record.name, np.asarray(record.weights, dtype="float32")
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
            layers.append((record, m))
        if self.layers is None:
            self.layers = self._layout(layers)
        expected = [(layer["name"], layer["heads"]) for layer in self.layers]
        if [(record.name, m.shape[0]) for record, m in layers] != expected:
            raise ValueError(f"Every snapshot must have the layers and heads of the first: {expected}. Received: "
                             f"{[(record.name, m.shape[0]) for record, m in layers]}")
        if relevance is not None:
            relevance = self._relevance_shares(relevance)
        snapshot = []
        for layer, (_, m) in zip(self.layers, layers):
            queries, keys = len(layer["queries"]), len(layer["keys"])
            snapshot.append(_quantize(m[:, :queries, :keys]))  # (heads, q, k); padding rows and columns cut
        self.snapshots.append(snapshot)
        self.relevance.append(relevance)
        self.epochs.append(len(self.epochs) + 1 if epoch is None else epoch)
        if label is None:
            label = f"epoch {self.epochs[-1]:g}" if isinstance(self.epochs[-1], numbers.Real) else str(self.epochs[-1])
        self.labels.append(str(label))
        return self

    def _relevance_shares(self, relevance):
        """`relevance` as a list of rows * columns shares (the positive part, summing to 1), rounded to 4 digits."""
        if self._image_info is None:
            raise ValueError("`relevance` needs the image view: make the history with `image=`.")
        grid = (self._image_info["rows"], self._image_info["columns"])
        values = np.asarray(relevance, dtype="float64")
        if values.shape != grid:
            raise ValueError(f"`relevance` must have the patch grid's shape {grid} (rows, columns). Received: shape "
                             f"{values.shape}")
        if not np.all(np.isfinite(values)):
            raise ValueError("`relevance` has non-finite values.")
        values = np.maximum(values, 0.0)
        total = values.sum()
        return [round(float(v), 4) for v in (values / total if total > 0 else values).ravel()]

    @property
    def nbytes(self):
        """Bytes of stored weights (one per weight and snapshot; the page holds them in base64, 4/3 as many)."""
        return sum(m.nbytes for snapshot in self.snapshots for m in snapshot)

    def data(self):
        """What the page's script reads: layers, labels, epochs, base64 weights and the image."""
        if not self.snapshots:
            raise ValueError("No snapshot yet: call `add(maps)` first.")
        views = ["image", "model"] if self._image_info else ["head", "model"]
        if len(self.snapshots) > 1:
            views.append("change")  # how far each head moved from the first snapshot
        return {
            "title": self.title or "attention",
            "levels": LEVELS,
            "views": views,
            "start": self._start(),
            "epochs": [str(e) for e in self.epochs],
            "labels": self.labels,
            "layers": self.layers,
            "maps": [[base64.b64encode(m.tobytes()).decode("ascii") for m in snapshot] for snapshot in self.snapshots],
            "image": self._image_info,
            "relevance": self.relevance if any(r is not None for r in self.relevance) else None,
        }

    def _start(self):
        """The layers the page opens on, the most telling ones: a seq2seq model's last cross-attention (where the
        alignment is), else the last layer (the one the head reads: [CLS] or the pooled tokens); in the image
        view, the last self-attention layer, for the [CLS] token; without a [CLS] token, the relevance when the
        history has it."""
        cross = [j for j, layer in enumerate(self.layers) if layer["kind"] == "cross"]
        square = [j for j, layer in enumerate(self.layers) if len(layer["queries"]) == len(layer["keys"])]
        pooled = self._image_info is not None and self._image_info["prefix"] == 0
        image_layer = str(square[-1]) if square else "rollout"
        if pooled and any(r is not None for r in self.relevance):
            image_layer = "relevance"
        return {"headLayer": cross[-1] if cross else len(self.layers) - 1, "imageLayer": image_layer}

    def html(self):
        """The page, as a string."""
        return build_page(self.data(), self.title or "attention")

    def resume(self, path):
        """Puts back the earlier epochs of the page saved at `path` (a run interrupted and started again), from the
        data `save` wrote beside it (`data_path(path)`), when that page shows the same layers, labels and image as
        this history's first snapshot; epochs from this history's first one on are left out (they are drawn
        again). Returns how many snapshots were taken."""
        if not self.snapshots or not os.path.exists(data_path(path)):
            return 0
        try:
            with open(data_path(path), encoding="utf-8") as file:
                old = json.load(file)
        except (OSError, ValueError):
            return 0  # unreadable: start afresh
        if not isinstance(old, dict) or old.get("layers") != self.layers or old.get("image") != self._image_info:
            return 0  # another model, sample or image: start afresh
        earlier = [i for i, epoch in enumerate(old["epochs"]) if _before(epoch, self.epochs[0])]
        shapes = [(layer["heads"], len(layer["queries"]), len(layer["keys"])) for layer in self.layers]
        snapshots = [[np.frombuffer(base64.b64decode(m), dtype="uint8").reshape(shape)
                      for m, shape in zip(old["maps"][i], shapes)] for i in earlier]
        self.snapshots[:0] = snapshots
        old_relevance = old.get("relevance") or [None] * len(old["epochs"])
        self.relevance[:0] = [old_relevance[i] for i in earlier]
        self.epochs[:0] = [_number(old["epochs"][i]) for i in earlier]
        self.labels[:0] = [old.get("labels", [f"epoch {e}" for e in old["epochs"]])[i] for i in earlier]
        return len(earlier)

    def save(self, path):
        """Writes the page to `path` (UTF-8) and its data beside it, to `data_path(path)` (`.json`), for `resume`.
        Returns the page's path."""
        data = self.data()  # encoded once, for both files
        write_text(data_path(path), json.dumps(data, separators=(",", ":")))
        write_text(os.fspath(path), build_page(data, self.title or "attention"))
        return path


def _number(label):
    try:
        return float(label) if "." in str(label) else int(label)
    except (TypeError, ValueError):
        return label


def _before(label, epoch):
    """Whether the stored epoch label comes before `epoch` (labels that are not numbers never do)."""
    try:
        return float(label) < float(epoch)
    except (TypeError, ValueError):
        return False


def attention_html(maps, tokens=None, image=None, title=None, *, epochs=None, sample=0, num_prefix_tokens=None):
    """One self-contained HTML page (inline JavaScript and CSS, opens offline) to explore attention maps.

    Text and seq2seq maps get a head view and a model view; with `image`, a ViT's maps get an image view and a
    model view. See the module docstring for what each view shows.

    Args:
        maps: what `keras_tfm.attention_maps` returns ({name: `(batch, heads, q, k)` array} with its
            `AttentionMap` records), a list of records, or a plain dict, list of arrays or one array (taken as
            encoder self-attention). With `epochs`, a list of such snapshots, one per epoch.
        tokens: token labels: one list, or a `(source, target)` pair for a seq2seq model (its maps as
            `attention_maps` returns them: their kinds say which labels go where); padding past the labels is
            left out.
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
            length = len(maps) if hasattr(maps, "__len__") else "?"
            raise ValueError(f"With `epochs` ({len(epochs)} labels), `maps` must be a list of as many snapshots. "
                             f"Received: {type(maps).__name__} of length {length}")
        for snapshot, epoch in zip(maps, epochs):
            history.add(snapshot, epoch=epoch)
    return history.html()


def save_attention_html(path, maps, **kwargs):
    """Writes `attention_html(maps, **kwargs)` to `path` and returns the path; open it in any browser.

    Example:

    >>> save_attention_html("attention.html", keras_tfm.attention_maps(model, ids[:1]), tokens=words)  # doctest: +SKIP
    """
    write_text(os.fspath(path), attention_html(maps, **kwargs))
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
    display(HTML(build_frame(page, height)))
