"""`AttentionMapCallback`: pictures of what the attention is doing while a model trains (attention maps,
rollout or occlusion over images, token heat maps, the change view) and the attention explorer page."""

import os
import re

import keras
import numpy as np

from keras_tfm.insight import visualize
from keras_tfm.insight.attention_probe import attention_maps, query_key_tokens
from keras_tfm.insight.attribution import occlusion_map
from keras_tfm.insight.explorer import AttentionHistory, data_path
from keras_tfm.layers import PatchEmbedding
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
      hidden (`keras_tfm.insight.attribution`), since the rollout of every token is mostly a position prior (the
      explorer page's image view opens on sample 0's occlusion map, one per frame);
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
        html: also keep one `attention.html` (the attention explorer, see `keras_tfm.insight.explorer`) for the first
            sample, rewritten at each drawn epoch with an epoch slider over every epoch drawn so far (a run
            resumed into the same folder keeps the earlier epochs of the page).
        padding_id: the id of padding in text `inputs`, left out of the pictures (RoBERTa's checkpoints use 1).
        draw_before: also draw the model before training, at the start of `fit` (not when `output_dir` already
            holds a run's pictures: a resumed run keeps its first frame).
        before_label: what the page and titles call that frame.
        epoch_label: a function from the (Keras) epoch number to what the page calls it, e.g.
            `lambda e: f"epoch {e / 4:g}"` when every Keras epoch is a quarter of a pass over the data.

    Attributes:
        written: every file written so far, in order.
        html_path: the explorer page's path (None without `html`).
        attention_history: the page's `AttentionHistory` (every drawn epoch's maps, 8 bits per weight; its
            `nbytes`), None until the first drawing.

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
        self.attention_history = None  # the explorer page's AttentionHistory: the quantised maps of every drawn epoch
        self._relevance = None  # a pooled ViT's occlusion map of sample 0 at the epoch being drawn, for the page
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
        first = self.attention_history is None
        if first:
            image = self.inputs[0] if self.kind == "image" else None
            prefix = None if image is None else maps.records[-1].prefix_tokens
            self.attention_history = AttentionHistory(
                tokens=self._explorer_tokens(maps), title=f"{self.model.name}: attention", image=image,
                num_prefix_tokens=prefix)
            self.written.extend([self.html_path, data_path(self.html_path)])  # the page, and its data for resume
        self.attention_history.add(maps, epoch=epoch, label=self.label(epoch), relevance=self._relevance)
        if first:  # a run started again in the same folder: the page keeps the epochs drawn before
            self.attention_history.resume(self.html_path)
        self.attention_history.save(self.html_path)

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
            # every image (see keras_tfm.insight.attribution). Occlusion shows the evidence for its prediction instead.
            drops = occlusion_map(self.model, self.inputs[:max(count, 1)])
            self._relevance = drops[0]  # the explorer's image view opens on it
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
