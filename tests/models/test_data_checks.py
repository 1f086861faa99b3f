"""Bad token ids and labels inside `fit`, `evaluate` and `predict`, on every backend and in every form the data
comes in: the same clear error as the eager call, never a graph traceback, never a NaN loss, and the model keeps
its weights."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.models import Seq2SeqTransformer, TextClassifier, ViT
from tests.helpers import to_numpy

pytestmark = pytest.mark.every_backend

VOCAB, CLASSES, LENGTH = 20, 3, 8


def _classifier():
    model = TextClassifier.from_preset("tiny", vocab_size=VOCAB, max_length=LENGTH, num_classes=CLASSES, dropout=0.0)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _data(bad=None):
    rng = np.random.default_rng(0)
    x, y = rng.integers(1, VOCAB, (32, LENGTH)).astype("int32"), rng.integers(0, CLASSES, 32)
    if bad == "id":
        x[13, 2] = VOCAB + 5  # in the second batch of 8: one good step runs first
    elif bad == "label":
        y[13] = CLASSES
    elif bad == "float":
        x = x.astype("float32")
        x[13, 2] = 2.5
    return x, y


def _as(form, x, y=None):
    """The data in one of the forms `fit` takes, in batches of 8."""
    if form == "tf.data":
        return tf.data.Dataset.from_tensor_slices((x, y) if y is not None else x).batch(8)
    if form == "generator":
        return (((x[i:i + 8], y[i:i + 8]) if y is not None else (x[i:i + 8],)) for i in range(0, len(x), 8))

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return len(x) // 8

        def __getitem__(self, i):
            return (x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]) if y is not None else (x[i * 8:(i + 1) * 8],)

    return Batches()


@pytest.fixture(scope="module")
def trained():
    """One classifier for the module's pipelines, trained once (on JAX that leaves Keras' state from a fit)."""
    keras.utils.set_random_seed(0)
    model = _classifier()
    model.fit(*_data(), batch_size=8, epochs=1, verbose=0)
    return model


def _eager_error(model, bad):
    """What the eager call (or the host check of arrays) says about the same bad value."""
    x, y = _data(bad)
    with pytest.raises((TypeError, ValueError)) as error:
        model.fit(x, y, batch_size=8, verbose=0) if bad == "label" else model(x)
    return error.type, str(error.value)


@pytest.mark.parametrize("form", ["tf.data", "generator", "PyDataset"])
@pytest.mark.parametrize("bad", ["id", "label", "float"])
def test_fit_on_a_pipeline_raises_the_eager_calls_error_and_keeps_the_weights(trained, form, bad):
    model = trained
    expected_type, expected = _eager_error(model, bad)
    assert ("an id of 25" in expected) if bad == "id" else ("a label of 3" in expected) if bad == "label" else (
        "non-integer value" in expected)
    before = [to_numpy(w) for w in model.weights]
    with pytest.raises(expected_type) as error:
        model.fit(_as(form, *_data(bad)), epochs=1, verbose=0)
    assert str(error.value) == expected
    assert error.value.__cause__ is None and error.value.__suppress_context__  # no backend traceback behind it
    weights = [to_numpy(w) for w in model.weights]  # the one good step before the bad batch may have run
    assert all(w.shape == b.shape and np.all(np.isfinite(w)) for w, b in zip(weights, before))
    history = model.fit(*_data(), batch_size=8, epochs=1, verbose=0)  # and the model trains on
    assert np.isfinite(history.history["loss"][0])
    assert not np.array_equal(to_numpy(model.weights[0]), weights[0])


@pytest.mark.parametrize("form", ["tf.data", "generator"])
def test_evaluate_and_predict_on_a_pipeline_check_too(trained, form):
    model = trained
    x, y = _data("id")
    with pytest.raises(ValueError, match=r"Token ids in `x` must lie in \[0, vocab_size\) = \[0, 20\)\. Received: an id of 25"):
        model.evaluate(_as(form, x, y), verbose=0)
    with pytest.raises(ValueError, match="an id of 25"):
        model.predict(_as(form, x), verbose=0)
    x, y = _data("label")
    with pytest.raises(ValueError, match=r"Labels in `y` must lie in \[0, num_classes\) = \[0, 3\)\. Received: a label of 3"):
        model.evaluate(_as(form, x, y), verbose=0)
    assert model.predict(_as(form, x), verbose=0).shape == (32, CLASSES)  # predict has no labels to check


def test_arrays_are_checked_before_training_labels_included():
    model = _classifier()
    x, y = _data("label")
    with pytest.raises(ValueError, match="a label of 3"):
        model.fit(x, y, batch_size=8, verbose=0)
    with pytest.raises(ValueError, match="a label of 3"):
        model.fit(*_data(), validation_data=(x, y), batch_size=8, verbose=0)
    with pytest.raises(ValueError, match="a label of -1"):
        model.evaluate(x, np.full_like(y, -1), verbose=0)


def test_one_hot_and_soft_labels_are_not_mistaken_for_class_ids(trained):
    x, y = _data()
    soft = keras.ops.convert_to_numpy(keras.ops.one_hot(y, CLASSES)) * 0.9 + 0.1 / CLASSES  # smoothed, in the data
    checks = trained.data_checks
    assert [entry[0] for entry in checks.entries(x, soft)] == ["x"]  # the ids only
    assert [entry[0] for entry in checks.entries(x, y)] == ["x", "y"]
    assert [entry[0] for entry in checks.entries(x, y[:, None])] == ["x", "y"]  # (batch, 1) is sparse


def test_seq2seq_target_ids_and_vit_labels_are_checked():
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=12, target_vocab_size=12, max_length=6)
    model.compile_for_training()
    ids = np.ones((8, 6), "int32")
    targets = ids.copy()
    targets[3, 4] = 12
    with pytest.raises(ValueError, match=r"Token ids in `y` must lie in \[0, vocab_size\) = \[0, 12\)\. Received: an id of 12"):
        model.fit((ids, ids), targets, verbose=0)
    vit = ViT.from_preset("tiny", num_classes=4, image_size=8, patch_size=4)
    vit.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(ValueError, match="a label of 4"):
        vit.fit(np.zeros((8, 8, 8, 3), "float32"), np.arange(8) % 5, verbose=0)
    backbone = ViT.from_preset("tiny", include_top=False, image_size=8, patch_size=4)
    assert backbone.data_checks.entries(y=np.arange(8)) == []
