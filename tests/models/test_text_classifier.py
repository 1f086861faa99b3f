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
    model = TextClassifier.from_preset("tiny", pool=pool, **SMALL)
    review = padded_ids([37], 37, vocab_size=50)
    short = np.pad(review, ((0, 0), (0, 64 - 37)))
    long = np.pad(review, ((0, 0), (0, 256 - 37)))
    np.testing.assert_allclose(to_numpy(model(short)), to_numpy(model(long)), atol=1e-5)
    np.testing.assert_allclose(to_numpy(model(review)), to_numpy(model(long)), atol=1e-5)


@pytest.mark.parametrize("pool,norm_first", [("cls", True), ("mean", False)])
def test_overfits_a_tiny_batch_and_every_weight_gets_a_gradient(pool, norm_first):
    model = TextClassifier.from_preset("tiny", pool=pool, norm_first=norm_first, **SMALL)
    x = np.tile(padded_ids([5, 9, 3, 12, 7, 4], 12, vocab_size=50), (10, 1))
    y = np.tile(np.array([0, 1, 1, 0, 1, 0]), 10)
    before = [to_numpy(w) for w in model.trainable_weights]
    model.compile(optimizer=keras.optimizers.Adam(2e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=6, epochs=6, shuffle=False, verbose=0)
    assert history.history["loss"][-1] < 0.05
    unchanged = [w.path for w, old in zip(model.trainable_weights, before) if np.array_equal(to_numpy(w), old)]
    assert not unchanged


def test_keras_file_round_trip(tmp_path):
    model = TextClassifier.from_preset("tiny", **{**SMALL, "dropout": 0.1, "position": "learned"})
    model.save(tmp_path / "classifier.keras")
    loaded = keras.saving.load_model(tmp_path / "classifier.keras")
    assert isinstance(loaded, TextClassifier) and loaded.get_config() == model.get_config()
    x = padded_ids([5, 20], 20, vocab_size=50)
    np.testing.assert_array_equal(to_numpy(loaded.predict(x, verbose=0)), to_numpy(model.predict(x, verbose=0)))


def test_presets_and_errors():
    model = TextClassifier.from_preset("tiny", vocab_size=100, max_length=32)
    assert model.encoder.dim == 64 and model.num_classes == 2
    with pytest.raises(ValueError, match=r"longer than `max_length` \(32\)"):
        model(np.ones((1, 40), "int32"))
    with pytest.raises(ValueError, match=r"`pool` must be one of \['cls', 'mean', 'pooler'\]"):
        TextClassifier.from_preset("tiny", pool="max", **SMALL)
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


def test_a_task_on_the_encoder_it_is_given():
    """The classifier is a head on the `TextEncoder` it receives (that very object); `from_preset` builds the
    encoder first, giving it the encoder's arguments, the head its own, and `dropout` to both."""
    from keras_tfm.models import TextEncoder

    encoder = TextEncoder(vocab_size=30, max_length=12, dim=16, depth=1, num_heads=2, mlp_dim=32, name="mine")
    model = TextClassifier(encoder, num_classes=3, pool="mean")
    assert model.encoder is encoder and model.get_layer("mine") is encoder
    assert (model.vocab_size, model.max_length) == (30, 12)
    assert set(model.get_config()) == {"name", "trainable", "dtype", "encoder", "num_classes", "pool", "dropout",
                                       "head_activation"}
    preset = TextClassifier.from_preset("tiny", vocab_size=30, max_length=12, depth=2, dropout=0.2, pool="cls",
                                        num_classes=4)
    assert (preset.encoder.depth, preset.encoder.dim, preset.encoder.dropout, preset.dropout) == (2, 64, 0.2, 0.2)
    assert preset.encoder.class_token and preset.encoder.name == "encoder"  # "cls" pooling reads a learned [CLS]
    assert not TextClassifier.from_preset("tiny", vocab_size=30, max_length=12, pool="mean").encoder.class_token


def test_sizes_or_a_typo_are_a_type_error_that_says_what_to_write():
    from keras_tfm.models import TextEncoder

    for build in (lambda: TextClassifier(vocab_size=30, max_length=12), lambda: TextClassifier(30, max_length=12),
                  lambda: TextClassifier(TextEncoder(30, 12), dim=16)):
        with pytest.raises(TypeError, match=r"takes a TextEncoder \(keras_tfm 0.2.*TextClassifier\(TextEncoder\("):
            build()
    with pytest.raises(TypeError, match=r"`encoder` must be a keras_tfm TextEncoder. Received: Sequential"):
        TextClassifier(keras.Sequential([keras.layers.Dense(2)]))
    with pytest.raises(TypeError, match=r"TextClassifier got an unexpected keyword argument `dropuot`.*`dropout`"):
        TextClassifier.from_preset("tiny", vocab_size=30, max_length=12, dropuot=0.3)


@pytest.mark.parametrize("name", ["text_classifier", "text_classifier_on_encoder", "masked_lm"])
def test_keras_files_of_release_0_1_load_with_their_weights(name):
    """Files saved by keras_tfm 0.1.0 (sizes among the task's arguments; `tests/models/saved_by_0_1_0`, written
    before the change) load as tasks on an encoder and give the outputs recorded when they were saved."""
    import pathlib

    folder = pathlib.Path(__file__).parent / "saved_by_0_1_0"
    model = keras.saving.load_model(folder / f"{name}.keras")
    ids = np.array([[3, 4, 5, 6, 0, 0]], "int32")
    inputs = {"token_ids": ids, "mask_positions": np.array([[1, 2]], "int32")} if name == "masked_lm" else ids
    np.testing.assert_allclose(to_numpy(model(inputs)), np.load(folder / "outputs.npz")[name], atol=1e-6)
    assert "vocab_size" not in model.get_config() and model.encoder.vocab_size == 20


def test_the_default_pooling_is_what_the_encoder_has_never_the_first_word():
    """pool=None reads the pooler where the encoder has one, a learned [CLS] token where it prepends one, and
    otherwise the mean: an encoder without a [CLS] token of its own never has its first word read as the text."""
    from keras_tfm.models import TextEncoder

    sizes = dict(vocab_size=30, max_length=12, dim=16, depth=1, num_heads=2, mlp_dim=32)
    assert TextClassifier(TextEncoder(**sizes)).pool == "mean"
    assert TextClassifier(TextEncoder(**sizes, class_token=True)).pool == "cls"
    assert TextClassifier(TextEncoder(**sizes, pooler=True)).pool == "pooler"
    assert TextClassifier.from_preset("tiny", vocab_size=30, max_length=12).pool == "cls"  # with a learned [CLS]
    model = TextClassifier(TextEncoder(**sizes, dropout=0.0), dropout=0.0)
    rebuilt = TextClassifier.from_config(model.get_config())
    assert rebuilt.pool == "mean" and rebuilt.get_config() == model.get_config()
