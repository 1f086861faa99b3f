"""BERT's masking (Devlin et al., 2019, §3.1), done in the `tf.data` pipeline.

For each sequence, 15% of its real tokens (never padding) are chosen to be predicted. Of the chosen tokens 80%
are replaced by [MASK], 10% by a random word and 10% are left as they are — so the model cannot learn that only
[MASK] positions matter, and must keep a good representation of every word. The model sees the changed
sequence and the chosen positions, and is scored on the original words there:

    inputs, labels = mask_tokens(ids, mask_token_id=2, vocab_size=20000, seed=(0, 7))
    # inputs["token_ids"]: ids with the chosen tokens replaced; inputs["mask_positions"]: where they were;
    # labels: the original ids there, 0 in unused slots (which the loss ignores).

`masked_lm_dataset` draws new masks every epoch, from a seed, so a run is reproducible.
"""

import math

import numpy as np
import tensorflow as tf

RATES = dict(rate=0.15, mask_rate=0.8, random_rate=0.1)  # BERT's


def max_predictions_for(length, rate=RATES["rate"]):
    """Prediction slots per sequence: enough for `rate` of a full sequence of `length` tokens."""
    return max(1, math.ceil(length * rate))


def mask_tokens(token_ids, *, mask_token_id, vocab_size, seed, rate=0.15, mask_rate=0.8, random_rate=0.1,
                max_predictions=None, first_random_id=None):
    """Hides tokens of a batch as BERT does, with stateless randomness (the same `seed` gives the same masks).

    Args:
        token_ids: `(batch, length)` int token ids, 0 = padding (never chosen).
        mask_token_id: the id of [MASK].
        vocab_size: number of ids; random replacements are drawn from `[first_random_id, vocab_size)`.
        seed: two integers (a `tf.random.stateless_*` seed), e.g. `(run_seed, batch_index)`.
        rate: fraction of each sequence's real tokens to predict (rounded, at least one per non-empty sequence).
        mask_rate: of those, the fraction replaced by [MASK].
        random_rate: of those, the fraction replaced by a random id (the rest stay unchanged).
        max_predictions: prediction slots per sequence (default: enough for `rate` of a full sequence).
        first_random_id: the smallest id a random replacement takes (default `mask_token_id + 1`, so padding,
            unknown and [MASK] — ids 0, 1, 2 in `keras_tfm.data.imdb`'s vocabularies — are never drawn).

    Returns:
        `(inputs, labels)`: `inputs = {"token_ids": (batch, length), "mask_positions": (batch, max_predictions)}`
        and `labels` `(batch, max_predictions)`, the original ids at the chosen positions and 0 in unused slots
        (position 0 there).
    """
    for name, value in (("rate", rate), ("mask_rate", mask_rate), ("random_rate", random_rate)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"`{name}` must be in [0, 1]. Received: {name}={value}")
    if mask_rate + random_rate > 1.0:
        raise ValueError(f"`mask_rate + random_rate` must be at most 1. Received: {mask_rate} + {random_rate}")
    first_random_id = mask_token_id + 1 if first_random_id is None else first_random_id
    if not 0 < mask_token_id < vocab_size or not 0 < first_random_id < vocab_size:
        raise ValueError(
            f"`mask_token_id` and `first_random_id` must be ids in [1, vocab_size={vocab_size}). "
            f"Received: mask_token_id={mask_token_id}, first_random_id={first_random_id}"
        )
    token_ids = tf.convert_to_tensor(token_ids)
    length = token_ids.shape[1]
    if max_predictions is None:
        if length is None:
            raise ValueError("`max_predictions` is required when the sequence length is not static.")
        max_predictions = max_predictions_for(length, rate)
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, "int64"), 3)
    real = token_ids != 0  # (batch, length)

    # Which tokens: a random order of the real tokens (padding sorts last), of which the first `count`.
    scores = tf.where(real, tf.random.stateless_uniform(tf.shape(token_ids), seeds[0]), -1.0)
    top_scores, positions = tf.math.top_k(scores, k=max_predictions)  # (batch, max_predictions)
    real_count = tf.reduce_sum(tf.cast(real, "float32"), axis=1, keepdims=True)  # (batch, 1)
    count = tf.where(real_count > 0, tf.maximum(1.0, tf.round(real_count * rate)), 0.0)
    used = (tf.range(max_predictions, dtype="float32")[None, :] < count) & (top_scores >= 0.0)
    positions = tf.where(used, positions, 0)
    labels = tf.where(used, tf.gather(token_ids, positions, batch_dims=1), 0)

    # What each chosen token becomes: [MASK], a random id, or itself.
    draw = tf.random.stateless_uniform(tf.shape(positions), seeds[1])
    random_ids = tf.random.stateless_uniform(
        tf.shape(positions), seeds[2], minval=first_random_id, maxval=vocab_size, dtype=token_ids.dtype
    )
    replacement = tf.where(draw < mask_rate, tf.cast(mask_token_id, token_ids.dtype),
                           tf.where(draw < mask_rate + random_rate, random_ids, labels))
    batch = tf.shape(token_ids)[0]
    rows = tf.broadcast_to(tf.range(batch)[:, None], tf.shape(positions))
    chosen = tf.boolean_mask(tf.stack([rows, positions], axis=-1), used)  # (chosen, 2) = (row, position)
    masked = tf.tensor_scatter_nd_update(token_ids, chosen, tf.boolean_mask(replacement, used))
    return {"token_ids": masked, "mask_positions": positions}, labels


def masked_lm_dataset(token_ids, batch_size, *, mask_token_id, vocab_size=None, seed=0, shuffle=True,
                      repeat=True, **masking):
    """A `tf.data` pipeline of `(inputs, labels)` batches for `MaskedLanguageModel.fit`, masked afresh every time
    a batch is drawn: batch `i` of the (repeated) stream is masked with seed `(seed, i)`, so every epoch hides
    different words and the same `seed` replays the same run.

    Args:
        token_ids: `(sequences, length)` int array, 0 = padding.
        batch_size: sequences per batch (the last, smaller batch of each pass is dropped).
        mask_token_id: the id of [MASK].
        vocab_size: number of ids (default: the largest id + 1).
        seed: the run's seed (shuffling and masking).
        shuffle: reshuffle the sequences every pass.
        repeat: repeat forever (pass `steps_per_epoch` to `fit`); `False` gives one pass, e.g. for validation.
        **masking: `mask_tokens` options (`rate`, `mask_rate`, `random_rate`, `max_predictions`, `first_random_id`).
    """
    token_ids = np.asarray(token_ids)
    if token_ids.ndim != 2:
        raise ValueError(f"`token_ids` must be 2D (sequences, length). Received shape {token_ids.shape}")
    if len(token_ids) < batch_size:
        raise ValueError(f"`batch_size` ({batch_size}) is larger than the {len(token_ids)} sequences given.")
    vocab_size = int(token_ids.max()) + 1 if vocab_size is None else vocab_size
    dataset = tf.data.Dataset.from_tensor_slices(token_ids.astype("int32"))
    if shuffle:
        dataset = dataset.shuffle(len(token_ids), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.enumerate().map(
        lambda index, ids: mask_tokens(ids, mask_token_id=mask_token_id, vocab_size=vocab_size,
                                       seed=tf.stack([tf.constant(seed, "int64"), index]), **masking),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True,
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


MASK_TOKEN = "[MASK]"  # standardised text never contains brackets, so no word can become this token


def vocabulary_with_mask(vocabulary, vocab_size=None):
    """`vocabulary` (a `TextVectorization` list: "", "[UNK]", words...) with [MASK] as id 2 and the rarest word
    dropped, so the size stays `vocab_size` (default: the list's size). Returns `(vocabulary, mask_token_id)`."""
    if list(vocabulary[:2]) != ["", "[UNK]"]:
        raise ValueError(f"`vocabulary` must start with the padding and unknown tokens '' and '[UNK]'. "
                         f"Received: {list(vocabulary[:2])}")
    vocab_size = len(vocabulary) if vocab_size is None else vocab_size
    words = [word for word in vocabulary[2:] if word != MASK_TOKEN]
    return ["", "[UNK]", MASK_TOKEN, *words][:vocab_size], 2
