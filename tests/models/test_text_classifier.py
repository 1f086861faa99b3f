import keras
import numpy as np
import pytest

from keras_tfm.models import TextClassifier
from tests.helpers import padded_ids, to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the same keras.ops code on every backend: the model contract (tests/models/test_model_contract.py) "
    "and the recipes' quick runs train and save it on JAX and PyTorch"))

SMALL = dict(vocab_size=50, max_length=256, num_classes=2, dim=32, depth=2, num_heads=2, mlp_dim=64, dropout=0.0)


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_prediction_does_not_depend_on_padding_length(pool):
    model = TextClassifier(pool=pool, **SMALL)
    review = padded_ids([37], 37, vocab_size=50)
    short = np.pad(review, ((0, 0), (0, 64 - 37)))
    long = np.pad(review, ((0, 0), (0, 256 - 37)))
    np.testing.assert_allclose(to_numpy(model(short)), to_numpy(model(long)), atol=1e-5)
    np.testing.assert_allclose(to_numpy(model(review)), to_numpy(model(long)), atol=1e-5)


@pytest.mark.parametrize("pool,norm_first", [("cls", True), ("mean", False)])
def test_overfits_a_tiny_batch_and_every_weight_gets_a_gradient(pool, norm_first):
    model = TextClassifier(pool=pool, norm_first=norm_first, **SMALL)
    x = np.tile(padded_ids([5, 9, 3, 12, 7, 4], 12, vocab_size=50), (10, 1))
    y = np.tile(np.array([0, 1, 1, 0, 1, 0]), 10)
    before = [to_numpy(w) for w in model.trainable_weights]
    model.compile(optimizer=keras.optimizers.Adam(2e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=6, epochs=6, shuffle=False, verbose=0)
    assert history.history["loss"][-1] < 0.05
    unchanged = [w.path for w, old in zip(model.trainable_weights, before) if np.array_equal(to_numpy(w), old)]
    assert not unchanged


def test_keras_file_round_trip(tmp_path):
    model = TextClassifier(**{**SMALL, "dropout": 0.1, "position": "learned"})
    model.save(tmp_path / "classifier.keras")
    loaded = keras.saving.load_model(tmp_path / "classifier.keras")
    assert isinstance(loaded, TextClassifier) and loaded.get_config() == model.get_config()
    x = padded_ids([5, 20], 20, vocab_size=50)
    np.testing.assert_array_equal(to_numpy(loaded.predict(x, verbose=0)), to_numpy(model.predict(x, verbose=0)))


def test_presets_and_errors():
    model = TextClassifier.from_preset("tiny", vocab_size=100, max_length=32)
    assert model.dim == 64 and model.num_classes == 2
    with pytest.raises(ValueError, match=r"longer than `max_length` \(32\)"):
        model(np.ones((1, 40), "int32"))
    with pytest.raises(ValueError, match=r"`pool` must be one of \['cls', 'mean', 'pooler'\]"):
        TextClassifier(pool="max", **{k: v for k, v in SMALL.items()})
    with pytest.raises(ValueError, match=r"Unknown TextClassifier preset"):
        TextClassifier.from_preset("xl", vocab_size=10, max_length=8)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a SavedModel export is written with TensorFlow")
def test_exports_for_serving_taking_the_tokenizers_ids(tmp_path):
    """`model.export(path)` writes a SavedModel whose `serve` takes the dict a PretrainedTokenizer gives (token ids,
    padding mask, segment ids) and returns the logits `predict` returns."""
    import tensorflow as tf

    from keras_tfm.models import TextEncoder

    encoder = TextEncoder(vocab_size=30, max_length=12, dim=16, depth=1, num_heads=2, mlp_dim=32, num_segments=2)
    model = TextClassifier(encoder=encoder, num_classes=2, pool="cls")
    ids = padded_ids([5, 9, 3], 12, 30)
    inputs = {"token_ids": ids, "padding_mask": (ids != 0).astype("int32"), "segment_ids": np.zeros_like(ids)}
    expected = model.predict(inputs, verbose=0)
    model.export(str(tmp_path / "served"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "served"))
    outputs = served.serve({name: tf.constant(value) for name, value in inputs.items()})
    np.testing.assert_allclose(outputs.numpy(), expected, atol=1e-5)
