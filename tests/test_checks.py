"""`keras_tfm.checks.DataChecks` on a model of the user's own: arrays checked at once, pipelines batch by batch,
the same clear errors as the ready models give, on every backend."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.checks import DataChecks

pytestmark = pytest.mark.every_backend

VOCAB, CLASSES = 20, 3
IDS_ERROR = (r"Token ids in `x` must lie in \[0, vocab_size\) = \[0, 20\)\. Received: an id of 25\. "
             r"Check the tokenizer's vocabulary size")


def _own_model():
    """A plain Keras model (no keras_tfm layer, so nothing checks inside its step)."""
    ids = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, 8)(ids)
    model = keras.Model(ids, keras.layers.Dense(CLASSES)(keras.layers.GlobalAveragePooling1D()(x)))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _data(bad_id=False, bad_label=False):
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, VOCAB, (16, 6)).astype("int32"), rng.integers(0, CLASSES, 16)
    if bad_id:
        x[9, 1] = VOCAB + 5
    if bad_label:
        y[9] = -1
    return x, y


def test_arrays_are_checked_at_once_and_returned_as_given():
    checks = DataChecks(inputs=VOCAB, labels=CLASSES)
    x, y = _data()
    got = checks(x, y)
    assert got[0] is x and got[1] is y and got[2] is None
    with pytest.raises(ValueError, match=IDS_ERROR):
        checks(*_data(bad_id=True))
    with pytest.raises(ValueError, match=r"Labels in `y` must lie in \[0, num_classes\) = \[0, 3\)\. Received: a label of -1"):
        checks(*_data(bad_label=True))
    floats = r"`x` must hold integer token ids\. Received dtype float32 with the non-integer value 2\.5"
    with pytest.raises(TypeError, match=floats):
        checks(np.array([[1.0, 2.5]], "float32"))
    checks(np.array([[1.0, 19.0]], "float32"))  # whole numbers in a float array are ids


def test_what_is_checked_follows_the_structure_of_x_and_y():
    checks = DataChecks(inputs={"source_ids": 10, "target_ids": 12}, target_ids=12)
    source, target = np.ones((2, 3), "int32"), np.full((2, 3), 11, "int32")
    assert [name for name, *_ in checks.entries((source, target), target)] == ["source_ids", "target_ids", "y"]
    assert [name for name, *_ in checks.entries({"target_ids": target})] == ["target_ids"]  # by key
    with pytest.raises(ValueError, match=r"`source_ids` must lie in \[0, vocab_size\) = \[0, 10\)\. Received: an id of 11"):
        checks((target, target))
    encoder = DataChecks(inputs=VOCAB)
    assert [name for name, *_ in encoder.entries({"token_ids": source, "padding_mask": source})] == ["x['token_ids']"]
    soft = np.full((4, CLASSES), 1 / CLASSES, "float32")  # soft labels: one column per class, nothing to check
    assert DataChecks(labels=CLASSES).entries(y=soft) == []
    with pytest.raises(ValueError, match="either class labels or token ids"):
        DataChecks(labels=3, target_ids=3)


@pytest.mark.parametrize("form", ["tf.data", "generator", "PyDataset"])
def test_a_pipeline_is_checked_batch_by_batch_and_fails_with_the_clear_error(form):
    keras.utils.set_random_seed(0)
    model, checks = _own_model(), DataChecks(inputs=VOCAB, labels=CLASSES)
    x, y = _data(bad_id=True)
    if form == "tf.data":
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    elif form == "generator":
        data = ((x[i:i + 4], y[i:i + 4]) for i in range(0, 16, 4))
    else:
        class Batches(keras.utils.PyDataset):
            def __len__(self):
                return 4

            def __getitem__(self, i):
                return x[i * 4:(i + 1) * 4], y[i * 4:(i + 1) * 4]

        data = Batches()
    with pytest.raises(ValueError, match=IDS_ERROR) as error:
        with checks:
            model.fit(checks.pipeline(data), epochs=1, verbose=0)
    assert error.value.__cause__ is None  # the eager error itself, not the backend's around it


def test_a_good_tf_data_pipeline_is_unchanged_and_outside_with_the_backend_error_still_says_why():
    checks = DataChecks(inputs=VOCAB, labels=CLASSES)
    x, y = _data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    batches = list(checks.pipeline(dataset).as_numpy_iterator())
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), x)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y)
    assert checks.pipeline(x) is x  # arrays: `checks(x, y)` is their check
    bad = checks.pipeline(tf.data.Dataset.from_tensor_slices(_data(bad_id=True)).batch(4))
    with pytest.raises(tf.errors.OpError, match="an id of 25"):
        list(bad.as_numpy_iterator())
