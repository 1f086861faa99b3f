"""`LengthBuckets`: batches of similar length, each cut to its bucket's length, every text once per pass, and
predictions given back in the texts' own order."""

import keras
import numpy as np
import pytest

from keras_tfm.data.buckets import LengthBuckets, bucket_lengths_for, text_lengths


def right_padded(lengths, width=16, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 50, (len(lengths), width)).astype("int32")
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
    return ids


def test_lengths_and_bucket_lengths():
    ids = right_padded([3, 16, 0, 9])
    assert text_lengths(ids).tolist() == [3, 16, 0, 9]
    assert text_lengths({"token_ids": ids, "padding_mask": (ids != 0).astype("int32")}).tolist() == [3, 16, 0, 9]
    # the quartiles 27.5, 70, 152.5 and 256, rounded up to multiples of 8
    assert bucket_lengths_for([10, 20, 30, 40, 100, 120, 250, 256], num_buckets=4) == (32, 72, 160, 256)
    assert bucket_lengths_for([5] * 10, num_buckets=4) == (5,)  # never past the longest text


def test_every_text_once_per_pass_cut_to_its_bucket_and_reshuffled_each_pass():
    lengths = np.random.default_rng(1).integers(1, 17, 100)
    ids = right_padded(lengths)
    labels = np.arange(100)
    batches = LengthBuckets({"token_ids": ids, "padding_mask": (ids != 0).astype("int32")}, labels, batch_size=8,
                            bucket_lengths=(4, 8, 16), passes=2, seed=3)
    assert len(batches) == 2 * batches.batches_per_pass
    seen = [[], []]
    for i in range(len(batches)):
        x, y = batches[i]
        width = x["token_ids"].shape[1]
        assert width in (4, 8, 16) and len(y) <= 8 and x["padding_mask"].shape == x["token_ids"].shape
        assert (lengths[y] <= width).all() and (width == 4 or (lengths[y] > {8: 4, 16: 8}[width]).all())
        np.testing.assert_array_equal(x["token_ids"], ids[y, :width])  # nothing but padding cut
        seen[i // batches.batches_per_pass].extend(y.tolist())
    assert sorted(seen[0]) == sorted(seen[1]) == list(range(100))
    assert seen[0] != seen[1]  # reshuffled for the second pass
    assert batches.padded_tokens() < 100 * 16


def test_predict_gives_the_outputs_in_the_texts_order():
    ids = right_padded(np.random.default_rng(2).integers(1, 17, 50))
    inputs = keras.Input((None,), dtype="int32")
    total = keras.layers.Lambda(lambda t: keras.ops.sum(keras.ops.cast(t, "float32"), axis=1, keepdims=True))(inputs)
    model = keras.Model(inputs, total)  # each row's own sum: any mix-up of rows shows
    batches = LengthBuckets(ids, batch_size=7, num_buckets=3, shuffle=False)
    np.testing.assert_allclose(batches.predict(model, verbose=0)[:, 0], ids.sum(1))
    assert batches[0].shape[1] != batches[1].shape[1]  # lets Keras' input signature take every length


def test_bad_arguments_are_named():
    ids = right_padded([3, 16])
    with pytest.raises(ValueError, match="end at or above the longest text \\(16 tokens\\)"):
        LengthBuckets(ids, bucket_lengths=(4, 8))
    with pytest.raises(ValueError, match="`bucket_lengths` must increase"):
        LengthBuckets(ids, bucket_lengths=(8, 4, 16))
    with pytest.raises(ValueError, match="one label per row"):
        LengthBuckets(ids, np.zeros(3))
    with pytest.raises(ValueError, match="batch_size.*Received: batch_size=0"):
        LengthBuckets(ids, batch_size=0)
