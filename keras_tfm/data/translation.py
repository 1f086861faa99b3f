"""Parallel corpora for translation: sentence pairs from local text files or from tensorflow-datasets.

Local files hold one sentence per line (UTF-8, optionally `.gz`); line i of the source file translates line i of
the target file. That is how Multi30k (Elliott et al., 2016: image captions, English -> German, 29,000 training
pairs) is distributed, as `train.en.gz`, `val.en.gz`, `test_2016_flickr.en.gz` and the `.de` twins in
https://github.com/multi30k/dataset (folder `data/task1/raw`). `multi30k_files(folder, "en", "de")` finds them.

`load_tfds(name)` reads a tensorflow-datasets translation set (e.g. `ted_hrlr_translate/pt_to_en`, `wmt14_translate/de-en`)
as pairs in the direction of its supervised keys.

Every loader returns a `Corpus`: `{split: (source_sentences, target_sentences)}` with lists of str. When the data
cannot be found it raises `keras_tfm.data.DataUnavailable` saying what it tried and how to provide it.
`make_dataset` turns token-id arrays into batches for `Seq2SeqTransformer.fit`.
"""

import gzip
import os

import numpy as np

from keras_tfm.data import DataUnavailable, download_tfds, first_line, quiet_tfds_lookup

SPLITS = ("train", "validation", "test")
MULTI30K_URL = "https://github.com/multi30k/dataset/tree/master/data/task1/raw"
MULTI30K_NAMES = {"train": "train", "validation": "val", "test": "test_2016_flickr"}

HOW_TO_PROVIDE = (
    "To provide the data, either pass local files with one sentence per line (plain or .gz): "
    "`--train-src/--train-tgt`, `--valid-src/--valid-tgt`, `--test-src/--test-tgt`; or a folder laid out like "
    f"Multi30k ({MULTI30K_URL}: train.en.gz, val.en.gz, test_2016_flickr.en.gz and the .de files) with "
    "`--data-dir FOLDER --source-lang en --target-lang de`; or a tensorflow-datasets translation set with "
    "`--tfds NAME` (prepare it with `tfds.load(NAME, data_dir=FOLDER)` on a machine with network access, copy "
    "FOLDER here and add `--tfds-dir FOLDER`)."
)


def read_lines(path):
    """The lines of a UTF-8 text file (`.gz` is decompressed), without their line breaks."""
    if not os.path.isfile(path):
        raise DataUnavailable(f"Translation data: the file {path!r} does not exist. " + HOW_TO_PROVIDE)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        return [line.rstrip("\r\n") for line in file]


def load_pair(source_path, target_path):
    """`(source_sentences, target_sentences)` from two line-aligned files; their line counts must match."""
    source, target = read_lines(source_path), read_lines(target_path)
    if len(source) != len(target):
        raise ValueError(
            f"Parallel files must have the same number of lines: {source_path!r} has {len(source)}, "
            f"{target_path!r} has {len(target)}."
        )
    return source, target


def load_files(paths):
    """A corpus from `{split: (source_path, target_path)}` (splits: train, validation, test; missing ones are
    left out)."""
    return {split: load_pair(*pair) for split, pair in paths.items() if pair is not None}


def multi30k_files(folder, source_lang="en", target_lang="de"):
    """`{split: (source_path, target_path)}` for a folder in the Multi30k layout (`.gz` or plain files)."""
    paths = {}
    for split, stem in MULTI30K_NAMES.items():
        pair = []
        for lang in (source_lang, target_lang):
            candidates = [os.path.join(folder, f"{stem}.{lang}{suffix}") for suffix in (".gz", "")]
            found = [path for path in candidates if os.path.isfile(path)]
            if not found:
                raise DataUnavailable(
                    f"Translation data: no {split} file for language {lang!r} in {folder!r} (looked for "
                    f"{' and '.join(os.path.basename(c) for c in candidates)}). " + HOW_TO_PROVIDE
                )
            pair.append(found[0])
        paths[split] = tuple(pair)
    return paths


def load_tfds(name, data_dir=None, download=None):
    """A corpus from a tensorflow-datasets translation set, e.g. `"ted_hrlr_translate/pt_to_en"`.

    Uses the set's supervised keys as (source, target). A prepared copy in `data_dir` (default: the
    tensorflow-datasets folder) is used as is. Without one, and when downloading (by default only without a
    `data_dir`), the set's homepage host is checked first (one connection attempt, `keras_tfm.data.CONNECT_TIMEOUT`
    seconds), so an offline machine gets `DataUnavailable` at once and no half-written folder. The "validation"
    split falls back to "dev", and is left out if the set has neither (as is "test").
    """
    import tensorflow_datasets as tfds

    download = data_dir is None if download is None else download

    def read(split):
        pairs = tfds.load(name, split=split, as_supervised=True, data_dir=data_dir, download=False,
                          shuffle_files=False)
        source, target = [], []
        for source_text, target_text in tfds.as_numpy(pairs):
            source.append(source_text.decode("utf-8"))
            target.append(target_text.decode("utf-8"))
        return source, target

    def unavailable(what):
        return DataUnavailable(
            f"Translation data: could not load tensorflow-datasets {name!r}: {what}. " + HOW_TO_PROVIDE
        )

    try:
        with quiet_tfds_lookup():
            corpus = {"train": read("train")}
    except Exception as error:  # tfds reports an unknown name or a missing copy with many exception types
        missing = f"{type(error).__name__}: {first_line(error)}"
        if not download or isinstance(error, tfds.core.registered.DatasetNotFoundError):
            where = f" (nothing is downloaded into --tfds-dir {data_dir!r})" if data_dir else ""
            raise unavailable(missing + where) from error
        # tfds knows no download address before it starts; the homepage's host tells whether there is a network.
        with quiet_tfds_lookup():
            url = tfds.builder(name, data_dir=data_dir).info.homepage or "https://www.tensorflow.org/datasets"
        problem = download_tfds(name, data_dir, url)
        if problem is not None:
            raise unavailable(f"no prepared copy, and downloading it failed ({problem})") from error
        corpus = {"train": read("train")}
    for split, candidates in (("validation", ("validation", "dev")), ("test", ("test",))):
        for candidate in candidates:
            try:
                corpus[split] = read(candidate)
                break
            except ValueError:  # tfds: unknown split
                continue
    return corpus


def fill_missing_splits(corpus, held_out=1000):
    """Makes sure the corpus has "validation" and "test" splits: a missing one is the other, and when both are
    missing the last `held_out` training pairs (at most a tenth) become both, and leave the training split."""
    corpus = dict(corpus)
    if "validation" not in corpus and "test" not in corpus:
        source, target = corpus["train"]
        count = max(1, min(held_out, len(source) // 10))
        corpus["train"] = (source[:-count], target[:-count])
        corpus["validation"] = corpus["test"] = (source[-count:], target[-count:])
    corpus.setdefault("test", corpus.get("validation"))
    corpus.setdefault("validation", corpus["test"])
    return corpus


def keep_fitting(source_ids, target_ids, max_length):
    """Drops the pairs whose source or target (start and end tokens included) is longer than `max_length`;
    returns `(source, target)` as `(n, max_length)` 0-padded int32 arrays and the number dropped."""
    keep = [i for i, (s, t) in enumerate(zip(source_ids, target_ids)) if len(s) <= max_length and len(t) <= max_length]
    source = np.zeros((len(keep), max_length), "int32")
    target = np.zeros((len(keep), max_length), "int32")
    for row, i in enumerate(keep):
        source[row, : len(source_ids[i])] = source_ids[i]
        target[row, : len(target_ids[i])] = target_ids[i]
    return source, target, len(source_ids) - len(keep)


def make_dataset(source, target, batch_size, shuffle=False, seed=0, multiple=8, tokens_per_batch=None):
    """A `tf.data` pipeline of `((source, target_in), target_out)` batches for teacher forcing.

    `target` rows are `start, tokens..., end, 0...`; the model reads `target[:, :-1]` and learns to predict
    `target[:, 1:]`. Each batch is cut to its longest row rounded up to a multiple of `multiple`, so short
    sentences do not pay for the longest one in the corpus, while a compiled (`jit_compile`) training step
    sees only a few distinct shapes.

    With `tokens_per_batch`, batches are counted in tokens, as the 2017 paper's were (§5.1: "approximately 25000
    source tokens and 25000 target tokens" per batch): pairs are grouped by length, the longer of the source
    and the target the model reads, rounded up to a multiple of `multiple`, and a group of length L is batched
    `tokens_per_batch // L` pairs at a time (at most `batch_size`). Short sentences then come in large batches
    and long ones in small batches, each holding about the same number of tokens, and hardly any padding.
    `batch_count` gives the number of batches an epoch has.

    Args:
        source: `(pairs, source_length)` int token ids, 0 = padding (`keep_fitting`'s output).
        target: `(pairs, target_length)` int token ids starting with the start id.
        batch_size: pairs per batch; with `tokens_per_batch`, the most pairs in one batch.
        shuffle: shuffle the pairs anew each epoch.
        seed: the shuffle's seed.
        multiple: batch widths are rounded up to a multiple of this.
        tokens_per_batch: None for batches of `batch_size` pairs; else the most padded tokens of the longer
            side in one batch.

    Returns:
        A `tf.data.Dataset` of `((source, target_in), target_out)`.
    """
    import tensorflow as tf

    width = source.shape[1]

    def longest(ids):
        return tf.reduce_max(tf.reduce_sum(tf.cast(ids > 0, "int32"), axis=1))

    def rounded(length):
        return tf.minimum((length + multiple - 1) // multiple * multiple, width)

    def cut_to_longest(source, target):
        source = source[:, : rounded(longest(source))]
        target = target[:, : rounded(longest(target) - 1) + 1]  # the model reads and predicts length - 1 tokens
        return (source, target[:, :-1]), target[:, 1:]

    dataset = tf.data.Dataset.from_tensor_slices((source, target))
    if shuffle:
        dataset = dataset.shuffle(len(source), seed=seed, reshuffle_each_iteration=True)
    if tokens_per_batch is None:
        dataset = dataset.batch(batch_size)
    else:
        sizes = _bucket_batch_sizes(source, target, batch_size, tokens_per_batch, multiple)

        def pair_length(source, target):
            return tf.maximum(tf.reduce_sum(tf.cast(source > 0, "int32")),
                              tf.reduce_sum(tf.cast(target > 0, "int32")) - 1)

        # Bucket b holds the lengths in (b * multiple, (b + 1) * multiple]; the last bucket every longer one.
        boundaries = [b * multiple + 1 for b in range(1, len(sizes))]
        dataset = dataset.bucket_by_sequence_length(pair_length, boundaries, sizes, no_padding=True)
    return dataset.map(cut_to_longest, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _pair_buckets(source, target, multiple):
    """Each pair's length bucket: b for a longer side (source, or the target the model reads) of length in
    (b * multiple, (b + 1) * multiple]."""
    lengths = np.maximum((np.asarray(source) > 0).sum(axis=1), (np.asarray(target) > 0).sum(axis=1) - 1)
    return np.maximum(lengths - 1, 0) // multiple


def _bucket_batch_sizes(source, target, batch_size, tokens_per_batch, multiple):
    """Pairs per batch in each length bucket: as many as fit in `tokens_per_batch`, from 1 to `batch_size`."""
    for name, value in (("batch_size", batch_size), ("tokens_per_batch", tokens_per_batch), ("multiple", multiple)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")
    longest = max(np.asarray(source).shape[1], np.asarray(target).shape[1] - 1)
    buckets = -(-longest // multiple)
    return [max(1, min(batch_size, tokens_per_batch // ((b + 1) * multiple))) for b in range(buckets)]


def batch_count(source, target, batch_size, tokens_per_batch=None, multiple=8):
    """The number of batches in one epoch of `make_dataset` with these arguments (a learning-rate schedule needs
    it before training; with `tokens_per_batch` it depends on the lengths).

    Example:

    >>> source = np.array([[5, 0, 0, 0]] * 10 + [[5, 6, 7, 8]] * 3)
    >>> target = np.array([[1, 5, 2, 0, 0]] * 10 + [[1, 5, 6, 7, 2]] * 3)  # the model reads 2 and 4 tokens
    >>> batch_count(source, target, batch_size=100, tokens_per_batch=8, multiple=2)  # 10 pairs 4 at a time, 3 by 2
    5
    """
    if tokens_per_batch is None:
        return -(-len(source) // batch_size)
    sizes = _bucket_batch_sizes(source, target, batch_size, tokens_per_batch, multiple)
    pairs = np.bincount(_pair_buckets(source, target, multiple), minlength=len(sizes))
    return int(sum(-(-count // size) for count, size in zip(pairs, sizes)))
