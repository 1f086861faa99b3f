"""Callbacks for `model.fit`: pictures of what the attention is doing while it trains, and training helpers
(stop on NaN without waiting for every step, a time budget, checkpoint averaging)."""

import json
import numbers
import os
import re
import time

import keras
import numpy as np

from keras_tfm import visualize
from keras_tfm.attention_probe import attention_maps, query_key_tokens
from keras_tfm.attribution import occlusion_map
from keras_tfm.explorer import AttentionHistory, data_path
from keras_tfm.layers import PatchEmbedding, TokenEmbedding
from keras_tfm.layers.walk import iter_layers

KINDS = ("auto", "image", "text", "seq2seq")
SPECIAL_TOKEN = re.compile(r"\[[A-Z]+\]|</?s>")  # [CLS], [SEP], <s>, </s>: drawn grey, off the colour scale


def _figure_pixels(figure):
    """RGB pixels `(height, width, 3)` uint8 of a matplotlib figure (for TensorBoard)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def _token_strings(ids, vocabulary, padding_id=0):
    """Token strings of the non-padding ids of one sequence."""
    ids = [int(i) for i in np.asarray(ids) if int(i) != padding_id]
    if vocabulary is None:
        return [str(i) for i in ids]
    return [str(vocabulary[i]) if i < len(vocabulary) else f"<{i}>" for i in ids]


class AttentionMapCallback(keras.callbacks.Callback):
    """Draws the attention of a fixed sample before training and at the end of chosen epochs.

    Before `fit` trains (frame 0: the model as it was, a pretrained checkpoint or its random start) and at the end
    of every `every_n_epochs`-th epoch it runs `keras_tfm.attention_maps` on `inputs` (the explicit
    attention path, for that call only; no weight changes, no random numbers drawn: training results are
    unchanged) and writes, into `output_dir`, PNGs named `epoch_{NNN}_...png` (`epoch_000`: before training):

    * images (ViT): `rollout_{i}` — attention rollout of the [CLS] token over each image; for a pooled ViT (no
      [CLS] token) `occlusion_{i}` instead — how far the predicted class's score falls when each patch is
      hidden (`keras_tfm.attribution`), since the rollout of every token is mostly a position prior;
    * text (classifier): `tokens_{i}` — each review as a heat map of the [CLS] token's (or, with mean pooling,
      the average) attention in the last block;
    * seq2seq: `alignment_{i}` — the last decoder block's cross-attention, target tokens over source tokens;
    * always: `{last layer}_heads` — every head of the last attention layer for the first sample, its real
      tokens only (labelled with `tokens`, else with their ids; numbered positions for images), with a colour bar.

    Optionally it writes the same pictures to TensorBoard (`log_dir`) and the raw maps to
    `epoch_{NNN}_attention.npz`, one `(1, heads, q, k)` array per layer for the first sample, the layout BertViz'
    `head_view`/`model_view` take: keys `layer_{j}` (images, text), or `encoder_{j}`, `decoder_{j}`, `cross_{j}`
    (seq2seq), plus `names` (the layer names in order), e.g.
    `attention = [data[f"layer_{j}"] for j in range(len(data["names"]))]`.

    Args:
        inputs: the fixed sample: images `(n, H, W, C)`, token ids `(n, length)`, or `(source_ids, target_ids)`.
        output_dir: folder for the PNGs (created).
        every_n_epochs: draw every this many epochs.
        kind: `"image"`, `"text"`, `"seq2seq"`, or `"auto"` (from the shape of `inputs`).
        tokens: vocabulary for labels (a list, index = token id); for seq2seq a `(source, target)` pair of
            lists or one shared list. Without it ids are shown.
        class_names: for images and text, titles show the predicted class name and its probability.
        labels: the true class of each sample (optional): titles show it beside the prediction.
        log_dir: if given, also write TensorBoard image summaries there.
        save_arrays: also save the maps as `.npz`.
        max_samples: at most this many samples get their own picture.
        html: also keep one `attention.html` (the attention explorer, see `keras_tfm.explorer`) for the first
            sample, rewritten at each drawn epoch with an epoch slider over every epoch drawn so far (a run
            resumed into the same folder keeps the earlier epochs of the page).
        padding_id: the id of padding in text `inputs`, left out of the pictures (RoBERTa's checkpoints use 1).
        draw_before: also draw the model before training, at the start of `fit` (not when `output_dir` already
            holds a run's pictures: a resumed run keeps its first frame).
        before_label: what the page and titles call that frame.
        epoch_label: a function from the (Keras) epoch number to what the page calls it, e.g.
            `lambda e: f"epoch {e / 4:g}"` when every Keras epoch is a quarter of a pass over the data.

    Example:

    >>> callback = AttentionMapCallback(x_test[:4], output_dir="runs/vit/attention", class_names=CLASSES)
    >>> model.fit(x_train, y_train, epochs=10, callbacks=[callback])  # doctest: +SKIP
    """

    def __init__(
        self,
        inputs,
        output_dir="attention_maps",
        every_n_epochs=1,
        kind="auto",
        tokens=None,
        class_names=None,
        log_dir=None,
        save_arrays=False,
        max_samples=4,
        html=False,
        padding_id=0,
        labels=None,
        draw_before=True,
        before_label="before training",
        epoch_label=None,
    ):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"`kind` must be one of {list(KINDS)}. Received: kind={kind!r}")
        if isinstance(every_n_epochs, bool) or not isinstance(every_n_epochs, int) or every_n_epochs < 1:
            raise ValueError(f"`every_n_epochs` must be a positive integer. Received: every_n_epochs={every_n_epochs!r}")
        self.inputs = self._sample_arrays(inputs)
        self.output_dir = output_dir
        self.every_n_epochs = every_n_epochs
        self.kind = self._infer_kind(self.inputs) if kind == "auto" else kind
        self.tokens = tokens
        self.padding_id = padding_id
        self.class_names = class_names
        self.log_dir = log_dir
        self.save_arrays = save_arrays
        self.max_samples = max_samples
        self.html = html
        self.labels = None if labels is None else np.asarray(labels).reshape(-1)
        self.draw_before = draw_before
        self.before_label = before_label
        self.epoch_label = epoch_label or (lambda epoch: f"epoch {epoch}")
        self.html_path = os.path.join(output_dir, "attention.html") if html else None
        self._history = None  # the quantised maps of every drawn epoch, for the explorer page
        self.written = []  # every file written, in order
        self._writer = None
        self._last_epoch = self._last_drawn = None  # the last epoch trained and the last drawn

    @staticmethod
    def _sample_arrays(inputs):
        """`inputs` as an array, or a tuple of arrays for seq2seq; checked now rather than at the first epoch's end."""
        if inputs is None:
            raise ValueError(
                "`inputs` must be the fixed sample to draw: images (n, H, W, C), token ids (n, length) or "
                "(source_ids, target_ids). Received: inputs=None"
            )
        arrays = tuple(np.asarray(x) for x in inputs) if isinstance(inputs, (tuple, list)) else (np.asarray(inputs),)
        for array in arrays:
            if array.ndim == 0 or len(array) == 0:
                raise ValueError(
                    "`inputs` must hold at least one sample (a batch along the first axis). Received: inputs of "
                    f"shape {[a.shape for a in arrays] if len(arrays) > 1 else array.shape}"
                )
        return arrays if isinstance(inputs, (tuple, list)) else arrays[0]

    @staticmethod
    def _infer_kind(inputs):
        if isinstance(inputs, tuple):
            if len(inputs) != 2:
                raise ValueError("A tuple of inputs is read as (source_ids, target_ids): it must have 2 elements.")
            return "seq2seq"
        if inputs.ndim == 4:
            return "image"
        if inputs.ndim == 2 and np.issubdtype(inputs.dtype, np.integer):
            return "text"
        raise ValueError(
            "Cannot tell the kind of model from `inputs` of shape "
            f"{inputs.shape} and dtype {inputs.dtype}; pass kind='image', 'text' or 'seq2seq'."
        )

    def on_train_begin(self, logs=None):
        folder = self.output_dir
        started = os.path.isdir(folder) and any(name.startswith("epoch_") for name in os.listdir(folder))
        if self.draw_before and not started:  # a resumed run's folder holds its first frame already
            self.draw(0)

    def on_epoch_end(self, epoch, logs=None):
        self._last_epoch = epoch + 1
        if (epoch + 1) % self.every_n_epochs == 0:
            self.draw(epoch + 1)

    def label(self, epoch):
        """What frame `epoch` is called (0: `before_label`)."""
        return self.before_label if epoch == 0 else self.epoch_label(epoch)

    def on_train_end(self, logs=None):
        if self._last_epoch is not None and self._last_epoch != self._last_drawn:
            self.draw(self._last_epoch)  # a run stopped early (a time budget) still ends with its pictures
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def draw(self, epoch):
        """Reads the maps now and writes the pictures for `epoch` (also usable outside `fit`)."""
        os.makedirs(self.output_dir, exist_ok=True)
        self._last_drawn = epoch
        maps = attention_maps(self.model, self.inputs)
        predicted = self._predicted_names() if self.kind in ("image", "text") else None
        names = list(maps)
        prefix = f"epoch_{epoch:03d}"
        figures = getattr(self, f"_{self.kind}_figures")(maps, predicted)
        if epoch == 0:
            self._keep_before(maps)
        else:
            figures.extend(self._change_figures(maps, epoch))
        last = maps.records[-1]
        query_tokens, key_tokens = self._head_tokens(last)  # sample 0's real tokens: no padding drawn
        rows = visualize.DECODER_ROWS if last.kind in ("self", "cross") else "query (attending)"
        if self.kind == "text" and query_tokens is not None and len(query_tokens) > self.LONG_TEXT:
            # Every head's full map of a long review is a wall of unreadable labels: what each head's first
            # token ([CLS], what the head of a classifier reads) attends to, one row per head, reads at 100%.
            heads = last.weights.shape[1]
            figures.append((f"{last.name.replace('/', '-')}_first_token_by_head", visualize.plot_alignment(
                key_tokens, [f"head {h}" for h in range(heads)], last.weights[0, :, 0, :len(key_tokens)],
                title=f"{last.name}, {self.label(epoch)}, sample 0: what {query_tokens[0]} attends to, per head",
                xlabel="key (attended to)", ylabel="head")))
        else:
            figures.append((f"{last.name.replace('/', '-')}_heads", visualize.plot_attention_heads(
                last.weights, query_tokens, key_tokens, title=f"{last.name}, {self.label(epoch)}, sample 0",
                query_label=rows)))
        for name, figure in figures:
            path = os.path.join(self.output_dir, f"{prefix}_{name}.png")
            self.written.append(visualize.save_figure(figure, path))
            if self.log_dir is not None:
                self._log_image(name, figure, epoch)
        if self.save_arrays:
            path = os.path.join(self.output_dir, f"{prefix}_attention.npz")
            np.savez(path, names=np.array(names), **self._bertviz_arrays(maps))
            self.written.append(path)
        if self.html:
            self._write_html(maps, epoch)

    LONG_TEXT = 32  # tokens past which the last layer is drawn as its first token's row per head, not a head grid
    BEFORE_FILE = "before_attention.npz"  # frame 0's maps, every sample: what the change pictures compare with

    def _keep_before(self, maps):
        path = os.path.join(self.output_dir, self.BEFORE_FILE)
        np.savez(path, names=np.array([r.name for r in maps.records]),
                 **{f"map_{j}": r.weights for j, r in enumerate(maps.records)})
        self.written.append(path)

    def _before(self):
        """Frame 0's maps as `{name: weights}` (saved in `output_dir`, so that a resumed run has them), or None."""
        path = os.path.join(self.output_dir, self.BEFORE_FILE)
        if not os.path.exists(path):
            return None
        with np.load(path) as data:
            return {str(name): data[f"map_{j}"] for j, name in enumerate(data["names"])}

    def _change_figures(self, maps, epoch):
        """`change`: how far each head moved since frame 0 (`visualize.attention_change`); for text, also
        `change_row`: the most-changed head's first query ([CLS]) row over sample 0's tokens, then and now."""
        before = self._before()
        names = [r.name for r in maps.records]
        if before is None or list(before) != names or any(
                before[n].shape != r.weights.shape for n, r in zip(names, maps.records)):
            return []  # no frame 0 (drawn without fit), or another sample
        mask = np.asarray(self.inputs) != self.padding_id if self.kind == "text" else None  # real queries
        names, change = visualize.attention_change(before, maps, query_mask=mask)
        span = f"{self.before_label} → {self.label(epoch)}"
        figures = [("change", visualize.plot_attention_change(names, change, title=f"how far each head moved, {span}"))]
        if self.kind == "text":
            layer, head = np.unravel_index(np.argmax(change), change.shape)
            record = maps.records[layer]
            tokens, keys = self._head_tokens(record)
            if tokens is not None:
                special = [j for j, word in enumerate(keys) if SPECIAL_TOKEN.fullmatch(word)]
                figures.append(("change_row", visualize.plot_row_before_after(
                    keys, before[record.name][0, head, 0], record.weights[0, head, 0],
                    title=f"{record.name}, head {head} (moved most): what {keys[0]} reads in sample 0",
                    labels=(self.before_label, self.label(epoch)), scale_without=special)))
        return figures

    def _write_html(self, maps, epoch):
        first = self._history is None
        if first:
            image = self.inputs[0] if self.kind == "image" else None
            prefix = None if image is None else maps.records[-1].prefix_tokens
            self._history = AttentionHistory(tokens=self._explorer_tokens(maps), title=f"{self.model.name}: attention",
                                             image=image, num_prefix_tokens=prefix)
            self.written.extend([self.html_path, data_path(self.html_path)])  # the page, and its data for resume
        self._history.add(maps, epoch=epoch, label=self.label(epoch))
        if first:  # a run started again in the same folder: the page keeps the epochs drawn before
            self._history.resume(self.html_path)
        self._history.save(self.html_path)

    def _explorer_tokens(self, maps):
        """The first sample's token labels as the page wants them (None for images: positions are numbered)."""
        if self.kind == "text":  # one sequence: "[CLS]" first where the model prepends one
            return query_key_tokens("encoder", self._sample_tokens(), maps.records[0].prefix_tokens)[0]
        return self._sample_tokens()

    def _sample_tokens(self):
        """The first sample's real tokens: a list (text), a `(source, target)` pair (seq2seq), None (images)."""
        if self.kind == "seq2seq":
            source, target = self._seq2seq_vocabularies()
            return _token_strings(self.inputs[0][0], source), _token_strings(self.inputs[1][0], target)
        if self.kind == "text":
            return _token_strings(self.inputs[0], self.tokens, self.padding_id)
        return None

    def _head_tokens(self, record):
        """`(query_tokens, key_tokens)` of the first sample in the `AttentionMap` `record`: its real tokens (with
        "[CLS]" where the model prepends one). `(None, None)` (the whole map, numbered) for images, which have
        neither words nor padding, and wherever the tokens do not fit the map."""
        if self.kind == "image":
            return None, None
        query_tokens, key_tokens = query_key_tokens(record.kind, self._sample_tokens(), record.prefix_tokens)
        weights = record.weights
        if not 1 <= len(query_tokens) <= weights.shape[-2] or not 1 <= len(key_tokens) <= weights.shape[-1]:
            return None, None  # an all-padding sample, or a model whose maps are not over these tokens
        return query_tokens, key_tokens

    def _seq2seq_vocabularies(self):
        if isinstance(self.tokens, tuple) and len(self.tokens) == 2:
            return self.tokens
        return self.tokens, self.tokens

    def _predicted_names(self):
        """Each sample's title: "true: A, predicted: B (p = 0.93)" (without `labels`: "predicted: ...")."""
        if self.class_names is None:
            return None
        outputs = np.asarray(keras.ops.convert_to_numpy(self.model(self.inputs, training=False)), dtype="float64")
        if outputs.ndim != 2:
            return None
        if np.any(outputs < 0) or not np.allclose(outputs.sum(-1), 1.0, atol=1e-3):  # logits
            outputs = np.exp(outputs - outputs.max(-1, keepdims=True))
            outputs /= outputs.sum(-1, keepdims=True)
        name = lambda i: self.class_names[int(i)] if int(i) < len(self.class_names) else str(int(i))  # noqa: E731
        titles = []
        for i, row in enumerate(outputs):
            title = f"predicted: {name(row.argmax())} (p = {row.max():.2f})"
            if self.labels is not None and i < len(self.labels):
                title = f"true: {name(self.labels[i])}, {title}"
            titles.append(title)
        return titles

    def _image_figures(self, maps, predicted):
        count = min(len(self.inputs), self.max_samples)
        titles = [None if predicted is None else predicted[i] for i in range(count)]
        prefix = maps.records[-1].prefix_tokens  # 1 with a [CLS] token, 0 for a pooled ViT
        if prefix == 0 and any(isinstance(layer, PatchEmbedding) for layer in iter_layers(self.model)):
            # A pooled ViT reads every token: its rollout's mean row is mostly a position prior, the same on
            # every image (see keras_tfm.attribution). Occlusion shows the evidence for its prediction instead.
            drops = occlusion_map(self.model, self.inputs[:count])
            return [(f"occlusion_{i}", visualize.plot_occlusion(self.inputs[i], drops[i], title=titles[i]))
                    for i in range(count)]
        rollout = visualize.attention_rollout(maps)
        return [(f"rollout_{i}", visualize.plot_image_attention(self.inputs[i], rollout[i], num_prefix_tokens=prefix,
                                                                title=titles[i]))
                for i in range(count)]

    def _text_figures(self, maps, predicted):
        record = maps.of_kind("encoder")[-1]
        last = record.weights  # (batch, heads, prefix + tokens, prefix + tokens)
        has_class_token = record.prefix_tokens == 1 and last.shape[-1] == self.inputs.shape[1] + 1
        figures = []
        for i in range(min(len(self.inputs), self.max_samples)):
            words = _token_strings(self.inputs[i], self.tokens, self.padding_id)
            real = np.asarray(self.inputs[i]) != self.padding_id
            if not real.any():  # an all-padding sample: no words to colour
                continue
            if has_class_token:  # what [CLS] reads from each token
                weights = last[i, :, 0, 1:].mean(0)
            else:  # how much attention each token receives from the real tokens, on average
                weights = last[i][:, real].mean(axis=(0, 1))
            title = None if predicted is None else predicted[i]
            special = [j for j, word in enumerate(words) if SPECIAL_TOKEN.fullmatch(word)]
            note = ("weight: the attention [CLS] gives each token in the last layer, mean of its heads"
                    if has_class_token or special[:1] == [0] else
                    "weight: the attention each token receives in the last layer, mean over queries and heads")
            if not has_class_token and special[:1] == [0]:  # a [CLS] in the ids (pretrained BERTs): its row
                weights = last[i, :, 0, :].mean(0)
            figures.append((f"tokens_{i}", visualize.plot_token_attention(words, weights[real], title=title,
                                                                          scale_without=special, note=note)))
        return figures

    def _seq2seq_figures(self, maps, predicted):
        cross = maps.of_kind("cross")
        if not cross:
            raise ValueError("kind='seq2seq' needs a model with DecoderBlock cross-attention.")
        weights = cross[-1].weights  # (batch, heads, target_len, source_len)
        source_vocabulary, target_vocabulary = self._seq2seq_vocabularies()
        source_ids, target_ids = self.inputs
        figures = []
        for i in range(min(len(source_ids), self.max_samples)):
            source = _token_strings(source_ids[i], source_vocabulary)
            target = _token_strings(target_ids[i], target_vocabulary)
            # The rows are the decoder's inputs (start token first): row t predicts token t + 1.
            figure = visualize.plot_alignment(source, target, weights[i].mean(0), title=cross[-1].name,
                                              ylabel=visualize.DECODER_ROWS)
            figures.append((f"alignment_{i}", figure))
        return figures

    def _bertviz_arrays(self, maps):
        if self.kind != "seq2seq":
            return {f"layer_{j}": m[:1] for j, m in enumerate(maps.values())}
        groups = {"encoder": [], "decoder": [], "cross": []}  # BertViz' names for our kinds encoder, self, cross
        for record in maps.records:
            group = {"encoder": "encoder", "self": "decoder", "cross": "cross"}[record.kind]
            groups[group].append(record.weights[:1])
        return {f"{group}_{j}": m for group, arrays in groups.items() for j, m in enumerate(arrays)}

    def _log_image(self, name, figure, epoch):
        import tensorflow as tf  # TensorBoard summaries are written with TensorFlow, whatever the Keras backend

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        with self._writer.as_default():
            tf.summary.image(f"attention/{name}", _figure_pixels(figure)[None], step=epoch)
        self._writer.flush()


class PositionEncodingPlot(keras.callbacks.Callback):
    """Plots a learned position table (of a `TokenEmbedding` or `PatchEmbedding` with `position="learned"`) and
    its cosine-similarity matrix every `every_n_epochs` epochs, to watch positions organise themselves.

    For the fixed sinusoidal encodings no callback is needed:
    `visualize.plot_position_encoding(sinusoidal_position_encoding(64, 128))`.

    Args:
        layer_name: name of the embedding layer in the model.
        output_dir: folder for `epoch_{NNN}_positions.png`.
        every_n_epochs: plot every this many epochs.
    """

    def __init__(self, layer_name, output_dir="position_encoding", every_n_epochs=1):
        super().__init__()
        self.layer_name = layer_name
        self.output_dir = output_dir
        self.every_n_epochs = every_n_epochs
        self.written = []

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_n_epochs:
            return
        layer = self.model.get_layer(self.layer_name)
        if not isinstance(layer, (TokenEmbedding, PatchEmbedding)) or layer.position != "learned":
            raise ValueError(
                f"Layer '{self.layer_name}' has no learned position table (it needs to be a TokenEmbedding or "
                "PatchEmbedding with position='learned')."
            )
        table = np.asarray(keras.ops.convert_to_numpy(layer.position_embeddings))
        if isinstance(layer, PatchEmbedding) and layer.class_token:
            table = table[1:]  # the patch rows only
        os.makedirs(self.output_dir, exist_ok=True)
        path = os.path.join(self.output_dir, f"epoch_{epoch + 1:03d}_positions.png")
        figure = visualize.plot_position_encoding(table, title=f"{self.layer_name}, epoch {epoch + 1}")
        self.written.append(visualize.save_figure(figure, path))


def _in_group(path, prefix):
    """Whether a weight's path holds `prefix` at its start or right after a "/" (`model/block_3/...`)."""
    return path.startswith(prefix) or f"/{prefix}" in path


class GradientNormCallback(keras.callbacks.Callback):
    """Puts the global gradient norm into the training logs: `gradient_norm` (the mean over the epoch's steps) and
    `gradient_norm_max` (its largest step), so `History`, `CSVLogger` (a recipe's `history.csv`) and TensorBoard
    record it. The first thing to print when training does not converge: a norm that climbs by orders of
    magnitude is an exploding gradient (try a smaller learning rate, warm-up, `clipnorm`, or pre-norm blocks).

    The norm is sqrt(Σ g²) over every trainable weight's gradient, taken before the optimizer clips it (so the
    reading shows what clipping is up against). It is measured inside the optimizer's `apply` with `keras.ops`,
    so it works on every backend (tested on TensorFlow and JAX): while training, the optimizer gets three extra
    variables (a running sum, the largest norm and a step count), removed again when `fit` ends so saved models
    are unchanged.

    With `groups`, it also logs the norm of each group's gradients, `gradient_norm_{name}` (the mean over the
    epoch's steps): a group is the trainable weights whose path (`variable.path`, e.g.
    `model/block_3/attention/...`) holds its prefix at the start or right after a `/`. One group per block shows
    where in a deep stack the gradient fades.

    List it *before* a `CSVLogger` (callbacks run in order; `History` always comes last), e.g.
    `model.fit(..., callbacks=[GradientNormCallback(), keras.callbacks.CSVLogger("history.csv")])`.
    Not for distribution strategies (the sum would be per replica).

    Args:
        groups: None, or `{name: path prefix}`, e.g. `{f"block_{i}": f"block_{i}/" for i in range(depth)}`.

    Example:

    >>> norms = GradientNormCallback(groups={"embedding": "token_embedding/", "block_0": "block_0/"})
    >>> model.fit(x, y, callbacks=[norms]).history["gradient_norm_block_0"]  # doctest: +SKIP
    """

    def __init__(self, groups=None):
        super().__init__()
        if groups is not None and (not isinstance(groups, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in groups.items())):
            raise TypeError("`groups` must be None or a dict {name: path prefix}, both non-empty strings. "
                            f"Received: groups={groups!r}")
        self.groups = dict(groups or {})

    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        # Under mixed precision the inner optimizer receives the unscaled gradients.
        self._optimizer = getattr(optimizer, "inner_optimizer", optimizer)
        self._norm_sum, self._norm_max, self._steps = (
            self._optimizer.add_variable((), initializer="zeros", dtype="float32", name=f"gradient_norm_{name}")
            for name in ("sum", "max", "steps")
        )
        self._group_sums = {name: self._optimizer.add_variable((), initializer="zeros", dtype="float32",
                                                               name=f"gradient_norm_group_{i}")
                            for i, name in enumerate(self.groups)}
        paths = [variable.path for variable in self.model.trainable_variables]
        unmatched = [name for name, prefix in self.groups.items() if not any(_in_group(p, prefix) for p in paths)]
        if unmatched:
            raise ValueError(f"`groups` {unmatched} match no trainable weight of the model; its weights' paths "
                             f"begin with {sorted({p.split('/')[0] + '/' for p in paths})}")
        apply = self._optimizer.apply

        def apply_and_measure(grads, trainable_variables=None):
            variables = self._optimizer._trainable_variables if trainable_variables is None else trainable_variables
            squares = [(v.path, keras.ops.sum(keras.ops.square(keras.ops.cast(g, "float32"))))
                       for g, v in zip(grads, variables) if g is not None]
            norm = keras.ops.sqrt(keras.ops.sum(keras.ops.stack([s for _, s in squares]))) if squares \
                else keras.ops.zeros(())
            self._norm_sum.assign_add(norm)
            self._norm_max.assign(keras.ops.maximum(self._norm_max, norm))
            self._steps.assign_add(1.0)
            for name, prefix in self.groups.items():
                group = [s for path, s in squares if _in_group(path, prefix)]
                if group:
                    self._group_sums[name].assign_add(keras.ops.sqrt(keras.ops.sum(keras.ops.stack(group))))
            return apply(grads, trainable_variables)

        self._optimizer.apply = apply_and_measure  # an instance attribute: the class is untouched

    def on_epoch_begin(self, epoch, logs=None):
        for variable in (self._norm_sum, self._norm_max, self._steps, *self._group_sums.values()):
            variable.assign(keras.ops.zeros(()))

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        steps = float(keras.ops.convert_to_numpy(self._steps))
        total = float(keras.ops.convert_to_numpy(self._norm_sum))
        logs["gradient_norm"] = total / steps if steps else float("nan")
        logs["gradient_norm_max"] = float(keras.ops.convert_to_numpy(self._norm_max)) if steps else float("nan")
        for name, total in self._group_sums.items():
            logs[f"gradient_norm_{name}"] = float(keras.ops.convert_to_numpy(total)) / steps if steps else float("nan")

    def on_train_end(self, logs=None):
        del self._optimizer.apply  # back to the class's method
        added = {id(v) for v in (self._norm_sum, self._norm_max, self._steps, *self._group_sums.values())}
        variables = self._optimizer._variables  # in place: the optimizer's variable tracker holds this very list
        for index in reversed([i for i, v in enumerate(variables) if id(v) in added]):
            del variables[index]  # by position: `==` on variables compares values


class TerminateOnNaN(keras.callbacks.Callback):
    """Stops training when the loss turns NaN or infinite, without waiting for every step to finish.

    `keras.callbacks.TerminateOnNaN` reads the loss after every batch. Reading a value means waiting for the step
    that computes it (on a GPU a device-to-host copy and a sync), and because that callback overrides
    `on_train_batch_end`, Keras also turns off its asynchronous dispatch of callbacks (JAX, PyTorch), so the
    host can no longer prepare batch `n + 1` while the device computes batch `n`. By default this one reads the
    loss at the end of every epoch only, and declares itself `async_safe`, so the training loop never waits for
    it. With `every=N` it also reads the batch logs every N steps; Keras then calls it synchronously after every
    step (and converts the logs to Python numbers each time: reading them later, from another thread, could meet
    a JAX buffer already donated to the next step), so that is for debugging a divergence, not the default.

    Args:
        every: None (the default) to check at epoch ends only, or a positive number of steps.

    Example:

    >>> stop = TerminateOnNaN()
    >>> stop.every is None and stop.async_safe
    True
    """

    def __init__(self, every=None):
        super().__init__()
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ValueError(f"`every` must be None or a positive integer (steps). Received: every={every!r}")
        self.every = every
        self.async_safe = every is None  # its batch hook then returns at once, reading nothing
        self.stopped_at = None  # (epoch, step) where a NaN was seen, or None

    def on_train_begin(self, logs=None):
        self.stopped_at = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._last_batch = epoch, -1

    def on_train_batch_end(self, batch, logs=None):
        if self.every is None:
            return
        # With steps_per_execution = k, Keras calls this every k steps with the last step's index: check when
        # the steps since the last call cross a multiple of `every`.
        previous, self._last_batch = self._last_batch, batch
        if batch // self.every != previous // self.every:
            self._check(logs, step=batch)

    def on_epoch_end(self, epoch, logs=None):
        self._check(logs, step=None)

    def _check(self, logs, step):
        loss = (logs or {}).get("loss")
        if self.stopped_at is not None or loss is None or np.isfinite(float(loss)):
            return
        where = f"epoch {self._epoch + 1}" + ("" if step is None else f", step {step + 1}")
        print(f"TerminateOnNaN: the loss is {float(loss)} at {where}; training stopped.")
        self.stopped_at = (self._epoch, step)
        self.model.stop_training = True


# A time budget: train as many epochs as fit, with a learning-rate schedule planned for exactly those epochs, so
# that a one-hour run is a proper short schedule, not the first hour of a long one (the recipes' --time-budget).


class TimeBudget(keras.callbacks.Callback):
    """Trains for the whole epochs that fit in `minutes`, and plans `schedule` for them.

    After the first epoch (of this `fit`), the epochs that still fit in the budget are estimated from its
    duration; training is planned to end after them (at most `fit`'s `epochs`), and `schedule.plan` gets that
    many steps, so the learning rate reaches 0 at the planned end. The budget counts `fit` from its start:
    training and validation, not data loading or model building. The first training step, which traces and
    compiles the step function, is left out of the estimate (its time is replaced by that of an average step);
    validation's own tracing is not, so the estimate is on the safe side.

    After every later epoch the estimate is made again from the mean duration of the epochs so far, each timed
    from the end of the one before (so what other callbacks do between epochs, a checkpoint, counts). When the
    planned end no longer fits (the machine got slower, or another process shares it), the plan is shortened to
    the epochs that do and the schedule re-planned, so the decay still ends inside the budget; the learning rate
    then steps down to where the shorter cosine is. A plan is never lengthened: faster epochs end the run early
    with the decay complete, rather than raising the learning rate again. If an epoch still passes the budget,
    training stops at its end. The first epoch itself runs on the schedule made before (`--epochs` long), which
    only makes its warm-up slower. A resumed run gets the whole budget again. `plans` lists `(epochs done,
    epochs planned)` for the first plan and every shortening. A jitted JAX step is traced and compiled again for
    each plan (it reads the planned length as a constant); the other backends read it from a variable.

    Args:
        minutes: the budget, a positive number of minutes.
        schedule: a `keras_tfm.schedules.PlannedWarmupCosine` (or anything with `plan(total_steps)`), or None to
            only stop.
        clock: a function returning seconds (tests pass a fake one).
        verbose: whether to print the plan.

    Example:

    >>> schedule = keras_tfm.schedules.PlannedWarmupCosine(1e-3, total_steps=100 * steps_per_epoch)  # doctest: +SKIP
    >>> model.compile(optimizer=keras.optimizers.AdamW(schedule), loss="mse")  # doctest: +SKIP
    >>> model.fit(x, y, epochs=100, callbacks=[TimeBudget(60, schedule)])  # doctest: +SKIP
    """

    def __init__(self, minutes, schedule=None, clock=time.monotonic, verbose=True):
        super().__init__()
        if isinstance(minutes, bool) or not isinstance(minutes, numbers.Real) or not minutes > 0:
            raise ValueError(f"`minutes` must be a positive number. Received: minutes={minutes!r}")
        if schedule is not None and not callable(getattr(schedule, "plan", None)):
            raise TypeError("`schedule` must have a `plan(total_steps)` method (a PlannedWarmupCosine) or be None. "
                            f"Received: schedule={schedule!r}")
        self.minutes = minutes
        self.schedule = schedule
        self.clock = clock
        self.verbose = verbose
        self.planned_epochs = None

    async_safe = True  # it reads the clock only: Keras may run it on a helper thread, the step never waits

    def on_train_begin(self, logs=None):
        self.started = self.clock()
        self.planned_epochs = None
        self.plans = []
        self.durations = []  # seconds of each epoch of this fit, end to end (the first without its tracing step)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_started = self.clock()
        self.first = self.last = None  # (step index, time) of the first and the last finished step seen

    def on_train_batch_end(self, batch, logs=None):
        # With steps_per_execution = k this comes every k steps, with the last step's index; on a helper thread
        # the calls may arrive out of order, hence min and max.
        if self.planned_epochs is None:
            seen = (batch, self.clock())
            self.first = seen if self.first is None or batch < self.first[0] else self.first
            self.last = seen if self.last is None or batch > self.last[0] else self.last

    def on_epoch_end(self, epoch, logs=None):
        now = self.clock()
        elapsed, budget = now - self.started, 60.0 * self.minutes
        first = self.planned_epochs is None  # the first epoch of this fit: plan from it
        # From the end of the epoch before: what the other callbacks do between epochs (checkpoints, pictures)
        # takes the budget's time too.
        seconds = now - (self.epoch_started if first else self.previous_end)
        self.previous_end = now
        if first:
            # Keras' step count where it knows one: with steps_per_execution = k the last call's index is that of
            # the k-th step of the last execution even when the epoch ends before it.
            known = self.params.get("steps") if self.params else None
            self.steps = known or (self.last[0] + 1 if self.last else 1)
            if self.last and self.last[0] > self.first[0]:
                # The first execution, with tracing and compilation, counted as an average one.
                average_step = (self.last[1] - self.first[1]) / (self.last[0] - self.first[0])
                seconds -= (self.first[1] - self.epoch_started) - average_step * (self.first[0] + 1)
        self.durations.append(max(seconds, 1e-9))
        pace = sum(self.durations) / len(self.durations)
        fitting = epoch + 1 + max(int((budget - elapsed) // pace), 0)  # this many epochs end inside the budget
        most = self.params.get("epochs") if self.params else None
        fitting = min(fitting, most) if most else fitting
        if first or fitting < self.planned_epochs:
            self.planned_epochs = fitting
            self.plans.append((epoch + 1, fitting))
            if self.schedule is not None:
                self.schedule.plan(fitting * self.steps)
                if keras.backend.backend() == "jax" and getattr(self.model, "jit_compile", False):
                    # A jitted JAX step receives only the model's, optimizer's and metrics' variables; it read
                    # the schedule's planned length as a constant when it was traced. Trace it again.
                    self.model.make_train_function(force=True)
            if self.verbose and first:
                print(f"time budget {self.minutes:g} min: {elapsed:.0f} s used by the first epoch, about "
                      f"{pace:.0f} s per epoch from now on, so training is planned for {fitting} "
                      f"epochs of {self.steps} steps")
            elif self.verbose:
                print(f"time budget {self.minutes:g} min: epochs take {pace:.0f} s on average, so the plan is "
                      f"shortened to {fitting} epochs ({elapsed:.0f} s used)")
        if elapsed >= budget or epoch + 1 >= self.planned_epochs:
            self.model.stop_training = True


# Checkpoint averaging: the mean of the weights of the last few epochs (or of the best few) is often a better
# model than any one of them (Vaswani et al. 2017, §6.1, average the last 5 or 20 checkpoints; fairseq's
# average_checkpoints). It needs nothing but the snapshots: no more training, no change to the optimizer.


def _is_float(array):
    return np.issubdtype(array.dtype, np.floating) or array.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def average_weights(snapshots):
    """The element-wise mean of several snapshots of one model's weights.

    Args:
        snapshots: a list of snapshots, each a list of arrays in the order of `model.weights` (what
            `model.get_weights()` returns). Floating-point arrays are averaged (in float64, then cast back to
            their dtype); any other array (an integer counter, a seed) is taken from the last snapshot.

    Returns:
        one list of arrays, the average, ready for `model.set_weights`.

    Example:

    >>> average_weights([[np.array([0.0, 2.0])], [np.array([1.0, 4.0])]])[0].tolist()
    [0.5, 3.0]
    """
    snapshots = [list(snapshot) for snapshot in snapshots]
    if not snapshots:
        raise ValueError("`snapshots` must hold at least one snapshot of the weights. Received: an empty list")
    count = len(snapshots[0])
    for number, snapshot in enumerate(snapshots):
        if len(snapshot) != count:
            raise ValueError(f"`snapshots` must all hold the same weights: snapshot 0 has {count} arrays, snapshot "
                             f"{number} has {len(snapshot)}.")
    averaged = []
    for index, arrays in enumerate(zip(*snapshots)):
        arrays = [np.asarray(array) for array in arrays]
        shapes = {array.shape for array in arrays}
        if len(shapes) > 1:
            raise ValueError(f"`snapshots` disagree on the shape of weight {index}: {sorted(shapes)}.")
        last = arrays[-1]
        if _is_float(last):
            total = np.zeros(last.shape, np.float64)
            for array in arrays:
                total += array.astype(np.float64)
            averaged.append((total / len(arrays)).astype(last.dtype))
        else:
            averaged.append(last)
    return averaged


class CheckpointAverage(keras.callbacks.Callback):
    """Averages the weights of the last `count` epochs (or of the `count` best by `monitor`) when training ends.

    At every epoch end it takes a snapshot of the model's weights (all of `model.weights`; the optimizer's state
    is not part of the model) and keeps those of the `count` epochs it will average; when `fit` ends it sets the
    model's weights to their element-wise mean (`average_weights`). Averaging the last checkpoints is how the 2017
    paper evaluated its translation models (§6.1): the average sits nearer the middle of the valley the last
    epochs wander around in than any one of them.

    With `monitor` (e.g. `"val_loss"`, or `"val_bleu"` from `keras_tfm.text.ValidationBLEU` placed before this
    callback), it keeps the `count` epochs best by that value instead (a tie goes to the later epoch); epochs whose
    logs lack it, or hold a NaN, are not kept.
    `count=1` with `monitor` keeps the best epoch (like `EarlyStopping(restore_best_weights=True)`, without the
    stopping).

    With `directory`, the snapshots are `.npz` files there (plus `snapshots.json`, the epochs and their values),
    so a run resumed by `keras.callbacks.BackupAndRestore` still averages the epochs it trained before the
    interruption; a snapshot of an epoch trained again replaces the old one. Without it they live in memory
    (`count` copies of the weights).

    Args:
        count: how many epochs to average, a positive integer.
        monitor: None to keep the last `count` epochs, or the name of a value in the epoch logs.
        mode: `"max"`, `"min"`, or `"auto"`: max for names with "acc", "bleu", "auc", "f1", "precision" or
            "recall" in them, else min.
        directory: a folder for the snapshots (created), or None to keep them in memory.
        apply: whether to set the model's weights to the average when training ends (otherwise call
            `apply_average()` or `average()` yourself).
        verbose: whether to print which epochs were averaged.

    Attributes:
        kept: `[(epoch, value), ...]` of the snapshots kept, epochs counted from 0 (value None without
            `monitor`).
        averaged_epochs: the epochs the model's weights were last averaged from, or None.

    Example:

    >>> average = CheckpointAverage(count=5)
    >>> model.fit(x, y, epochs=30, callbacks=[average])  # doctest: +SKIP
    >>> average.averaged_epochs  # the model now holds the mean of epochs 25..29  # doctest: +SKIP
    [25, 26, 27, 28, 29]
    """

    _MAX_WORDS = ("acc", "bleu", "auc", "f1", "precision", "recall")

    def __init__(self, count=5, monitor=None, mode="auto", directory=None, apply=True, verbose=True):
        super().__init__()
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"`count` must be a positive integer (epochs to average). Received: count={count!r}")
        if monitor is not None and not isinstance(monitor, str):
            raise TypeError(f"`monitor` must be None or the name of a logged value. Received: monitor={monitor!r}")
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"`mode` must be 'auto', 'min' or 'max'. Received: mode={mode!r}")
        if mode == "auto":
            mode = "max" if monitor and any(word in monitor.lower() for word in self._MAX_WORDS) else "min"
        self.count, self.monitor, self.mode = count, monitor, mode
        self.directory, self.apply, self.verbose = directory, apply, verbose
        self.kept = []
        self.averaged_epochs = None
        self._snapshots = {}  # epoch -> list of arrays (in memory only)
        self._first_epoch_seen = False

    # -- bookkeeping --------------------------------------------------------------------------------------------

    def _path(self, epoch):
        return os.path.join(self.directory, f"epoch_{epoch + 1:03d}.npz")

    def _index_path(self):
        return os.path.join(self.directory, "snapshots.json")

    def _write_index(self):
        with open(self._index_path() + ".tmp", "w") as file:
            json.dump({"monitor": self.monitor, "mode": self.mode,
                       "kept": [{"epoch": e, "value": v} for e, v in self.kept]}, file, indent=1)
        os.replace(self._index_path() + ".tmp", self._index_path())

    def _read_index(self):
        if self.directory is None or not os.path.exists(self._index_path()):
            return []
        with open(self._index_path()) as file:
            index = json.load(file)
        if index.get("monitor") != self.monitor:
            raise ValueError(f"`directory` {self.directory!r} holds snapshots kept by monitor={index.get('monitor')!r}, "
                             f"not {self.monitor!r}: give another directory or the same monitor.")
        return [(entry["epoch"], entry["value"]) for entry in index["kept"] if os.path.exists(self._path(entry["epoch"]))]

    def _chosen(self, candidates):
        """The `count` snapshots to keep out of `candidates`, in epoch order."""
        if self.monitor is None:
            chosen = sorted(candidates)[-self.count :]
        else:
            ranked = sorted(candidates, key=lambda kept: (-kept[1] if self.mode == "max" else kept[1], -kept[0]))
            chosen = ranked[: self.count]
        return sorted(chosen)

    def _store(self, epoch, arrays):
        if self.directory is None:
            self._snapshots[epoch] = arrays
            return
        os.makedirs(self.directory, exist_ok=True)
        # Float weights are stored as float32 (exact for float16 and bfloat16, which NumPy files cannot name).
        stored = {f"w{i}": (a.astype(np.float32) if _is_float(a) and a.dtype.itemsize < 4 else a)
                  for i, a in enumerate(arrays)}
        np.savez(self._path(epoch) + ".tmp.npz", **stored)
        os.replace(self._path(epoch) + ".tmp.npz", self._path(epoch))

    def _load(self, epoch):
        if self.directory is None:
            return self._snapshots[epoch]
        with np.load(self._path(epoch)) as data:
            return [data[f"w{i}"] for i in range(len(data.files))]

    def _forget(self, epoch):
        if self.directory is None:
            self._snapshots.pop(epoch, None)
        elif os.path.exists(self._path(epoch)):
            os.remove(self._path(epoch))

    # -- callback hooks -----------------------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        self.kept = self._read_index() if self.directory is not None else list(self.kept)
        self._first_epoch_seen = False

    def on_epoch_begin(self, epoch, logs=None):
        if not self._first_epoch_seen:
            # Snapshots of this epoch or later were taken by a run that stopped after them: they are redone now.
            self._first_epoch_seen = True
            for stale, _ in [kept for kept in self.kept if kept[0] >= epoch]:
                self._forget(stale)
            self.kept = [kept for kept in self.kept if kept[0] < epoch]

    def on_epoch_end(self, epoch, logs=None):
        value = None
        if self.monitor is not None:
            value = (logs or {}).get(self.monitor)
            if value is None:
                return
            value = float(value)
            if not np.isfinite(value):
                return
        candidates = [kept for kept in self.kept if kept[0] != epoch] + [(epoch, value)]
        chosen = self._chosen(candidates)
        if (epoch, value) in chosen:
            self._store(epoch, [keras.ops.convert_to_numpy(w) for w in self.model.weights])
        for dropped in set(candidates) - set(chosen):
            self._forget(dropped[0])
        self.kept = chosen
        if self.directory is not None:
            self._write_index()

    def on_train_end(self, logs=None):
        if self.apply and self.kept:
            self.apply_average()

    # -- results ------------------------------------------------------------------------------------------------

    def average(self, epochs=None):
        """The mean of the kept snapshots (or of those of `epochs`, a subset of them) as a list of arrays."""
        epochs = [e for e, _ in self.kept] if epochs is None else list(epochs)
        missing = sorted(set(epochs) - {e for e, _ in self.kept})
        if not epochs or missing:
            raise ValueError(f"`epochs` must name kept snapshots {[e for e, _ in self.kept]}. Received: {epochs!r}")
        return average_weights([self._load(epoch) for epoch in sorted(epochs)])

    def apply_average(self, epochs=None):
        """Sets the model's weights to `average(epochs)`; returns the epochs averaged."""
        epochs = sorted(e for e, _ in self.kept) if epochs is None else sorted(epochs)
        averaged = self.average(epochs)
        for variable, array in zip(self.model.weights, averaged):
            variable.assign(keras.ops.cast(array, variable.dtype))
        self.averaged_epochs = epochs
        if self.verbose:
            what = "last" if self.monitor is None else f"best by {self.monitor} of the"
            print(f"CheckpointAverage: the model now holds the average of the {what} {len(epochs)} epochs "
                  f"({', '.join(str(e + 1) for e in epochs)})")
        return epochs
