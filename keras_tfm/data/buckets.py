"""Batches of similar length: padded to their own longest text, not to the longest text of the data set.

Attention costs grow with the square of the length, the feed-forward layers with the length: a batch of
60-piece reviews padded to 256 pieces does four times the work it needs. `LengthBuckets` sorts texts into a few
buckets by length and pads each batch only to its bucket's length. A few fixed lengths (not one per batch) keep a
compiled step (XLA, `jit_compile=True`) from being traced anew for every shape.

    x = tokenizer(reviews)                                     # {"token_ids", "padding_mask", ...} (n, 256)
    train = LengthBuckets(x, labels, batch_size=32, passes=3)  # 3 epochs of batches, reshuffled each pass
    model.fit(train, epochs=3)
    probabilities = LengthBuckets(x_test, batch_size=64, shuffle=False).predict(model)  # in the texts' order

The arrays must be padded on the right (real tokens first), as every tokenizer of keras_tfm pads.
"""

import math

import keras
import numpy as np


def _as_dict(x):
    return (dict(x), True) if isinstance(x, dict) else ({"x": x}, False)


def text_lengths(x, padding_id=0):
    """Real tokens per row: `padding_mask.sum(1)` for a tokenizer's dict, else the position after the last
    non-padding id of each row of an id array `(n, length)`."""
    if isinstance(x, dict):
        if "padding_mask" in x:
            return np.asarray(x["padding_mask"]).astype(bool).sum(1)
        x = x["token_ids"]
    real = np.asarray(x) != padding_id
    return np.where(real.any(1), real.shape[1] - np.argmax(real[:, ::-1], axis=1), 0)


def bucket_lengths_for(lengths, num_buckets=4, multiple=8, max_length=None):
    """`num_buckets` padded lengths that share the texts out evenly: the quantiles 1/k, 2/k, ..., 1 of `lengths`,
    rounded up to a `multiple` (and to at most `max_length`). Fewer where quantiles coincide."""
    lengths = np.asarray(lengths)
    top = int(lengths.max()) if max_length is None else max_length
    quantiles = np.quantile(lengths, np.arange(1, num_buckets + 1) / num_buckets)
    rounded = np.minimum(np.ceil(np.maximum(quantiles, 1) / multiple) * multiple, top).astype(int)
    rounded[-1] = max(rounded[-1], int(lengths.max()))
    return tuple(sorted(set(rounded.tolist())))


class LengthBuckets(keras.utils.PyDataset):
    """Batches of texts of similar length, each cut to its bucket's length, for `fit`, `evaluate` and `predict`.

    Args:
        x: token ids `(n, length)`, or a dict of such arrays (a tokenizer's output: `token_ids`, `padding_mask`,
            `segment_ids`), padded on the right.
        y: labels `(n, ...)` or None.
        batch_size: texts per batch (a bucket's last batch may be smaller).
        bucket_lengths: the padded lengths, increasing; the last must hold the longest text. None: the
            quantiles of the texts' lengths (`bucket_lengths_for(lengths, num_buckets)`).
        num_buckets: how many lengths when `bucket_lengths` is None.
        shuffle: shuffle the texts within each bucket and the order of the batches, anew for every pass; False
            keeps the texts' order inside each bucket and the buckets' order (for scoring), but for the second
            batch, which is always one of another length where there is one (Keras builds the TensorFlow backend's
            input signature from the first two batches: their lengths must differ for the length to vary).
        passes: passes over the data this sequence holds (`len` = passes x batches per pass), so that `fit` with
            `steps_per_epoch` smaller than a pass (parts of an epoch) runs on without restarting.
        seed: random seed of the shuffling (the same seed gives the same batches).
        padding_id: the padding id, used to find the lengths of a plain id array.
        **kwargs: `keras.utils.PyDataset`'s (`workers`, `use_multiprocessing`, `max_queue_size`).

    Each item is `x_batch` or `(x_batch, y_batch)`, with `x` cut to `(batch, bucket_length)`.

    Example:

    >>> ids = np.array([[5, 6, 0, 0], [7, 0, 0, 0], [1, 2, 3, 4]])
    >>> batches = LengthBuckets(ids, np.array([0, 1, 1]), batch_size=2, bucket_lengths=(2, 4), shuffle=False)
    >>> [batch[0].shape for batch in batches]
    [(2, 2), (1, 4)]
    """

    def __init__(self, x, y=None, batch_size=32, bucket_lengths=None, num_buckets=4, shuffle=True, passes=1, seed=0,
                 padding_id=0, **kwargs):
        super().__init__(**kwargs)
        self.x, self._is_dict = _as_dict(x)
        n = {len(v) for v in self.x.values()}
        if len(n) != 1:
            raise ValueError(f"`x` must hold arrays with the same number of rows. Received rows: {sorted(n)}")
        self.n = n.pop()
        width = min(np.shape(v)[1] for v in self.x.values())
        if y is not None and len(y) != self.n:
            raise ValueError(f"`y` must have one label per row of `x`: received {self.n} rows and {len(y)} labels.")
        for name, value in (("batch_size", batch_size), ("passes", passes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
        self.y = None if y is None else np.asarray(y)
        self.lengths = text_lengths(x, padding_id)
        if bucket_lengths is None:
            bucket_lengths = bucket_lengths_for(self.lengths, num_buckets, max_length=width)
        bucket_lengths = tuple(int(b) for b in bucket_lengths)
        if list(bucket_lengths) != sorted(set(bucket_lengths)) or bucket_lengths[0] < 1 or bucket_lengths[-1] > width:
            raise ValueError(f"`bucket_lengths` must increase, within 1..{width} (the arrays' length). "
                             f"Received: bucket_lengths={bucket_lengths}")
        if self.lengths.max(initial=0) > bucket_lengths[-1]:
            raise ValueError(f"`bucket_lengths` must end at or above the longest text ({self.lengths.max()} tokens). "
                             f"Received: bucket_lengths={bucket_lengths}")
        self.bucket_lengths = bucket_lengths
        self.bucket_of = np.searchsorted(np.array(bucket_lengths), self.lengths)  # the first bucket that holds it
        self.batch_size, self.shuffle, self.passes, self.seed = batch_size, shuffle, passes, seed
        self.batches_per_pass = sum(math.ceil(np.sum(self.bucket_of == b) / batch_size)
                                    for b in range(len(bucket_lengths)))
        self._plans = {}

    def _plan(self, pass_index):
        """`[(bucket, rows)]` of one pass: every text once."""
        if pass_index not in self._plans:
            rng = np.random.default_rng([self.seed, pass_index])
            batches = []
            for bucket in range(len(self.bucket_lengths)):
                rows = np.flatnonzero(self.bucket_of == bucket)
                if self.shuffle:
                    rows = rng.permutation(rows)
                batches += [(bucket, rows[i:i + self.batch_size]) for i in range(0, len(rows), self.batch_size)]
            if self.shuffle:
                batches = [batches[i] for i in rng.permutation(len(batches))]
            # Keras reads the shapes of a PyDataset's first two batches to build the TensorFlow backend's input
            # signature: unless they differ in length, the length is fixed there and a longer batch fails.
            other = next((i for i, (b, _) in enumerate(batches) if b != batches[0][0]), None)
            if other is not None and other != 1:
                batches.insert(1, batches.pop(other))
            self._plans = {pass_index: batches}  # one pass kept at a time
        return self._plans[pass_index]

    def __len__(self):
        return self.passes * self.batches_per_pass

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of a sequence of {len(self)}")
        bucket, rows = self._plan(index // self.batches_per_pass)[index % self.batches_per_pass]
        length = self.bucket_lengths[bucket]
        x = {name: np.asarray(values[rows][:, :length]) for name, values in self.x.items()}
        x = x if self._is_dict else x["x"]
        return x if self.y is None else (x, self.y[rows])

    def order(self, pass_index=0):
        """The row of every example in the order the batches of pass `pass_index` give them."""
        return np.concatenate([rows for _, rows in self._plan(pass_index)])

    def padded_tokens(self, pass_index=0):
        """Token positions computed in one pass (padding included), for comparing with one fixed length."""
        return sum(len(rows) * self.bucket_lengths[b] for b, rows in self._plan(pass_index))

    def predict(self, model, **kwargs):
        """`model.predict` over one pass, returned in the rows' own order (`kwargs` go to `predict`)."""
        if self.passes != 1:
            raise ValueError(f"predict reads one pass; this sequence holds passes={self.passes}.")
        outputs = model.predict(self, **kwargs)
        result = np.empty_like(outputs)
        result[self.order()] = outputs
        return result
