"""TextEncoder, the backbone of the text models: inputs, masks, configuration, saving, mixed precision, XLA."""

import keras
import numpy as np
import pytest

from keras_tfm.models import TextClassifier, TextEncoder
from tests.helpers import padded_ids, to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the same keras.ops code on every backend: the model contract (tests/models/test_model_contract.py) "
    "and the recipes' quick runs train and save it on JAX and PyTorch"))

SMALL = dict(vocab_size=30, max_length=16, dim=16, depth=2, num_heads=2, mlp_dim=32)
BERT_LIKE = dict(SMALL, position="learned", scale_embeddings=False, num_segments=2, embedding_norm=True,
                 norm_first=False, layer_norm_epsilon=1e-12, pooler=True, mlp_activation="gelu_tanh")


def test_states_per_token_with_their_padding_mask():
    encoder = TextEncoder(**SMALL)
    ids = padded_ids([5, 3], 7)
    states = encoder(ids)
    assert tuple(states.shape) == (2, 7, 16)
    np.testing.assert_array_equal(to_numpy(encoder.compute_mask(ids)), ids != 0)


def test_padding_changes_nothing_at_real_tokens_and_the_mask_reaches_a_users_pooling():
    encoder = TextEncoder(**SMALL, dropout=0.0)
    ids = keras.Input((None,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(encoder(ids))  # a user's own functional model
    model = keras.Model(ids, pooled)
    short, long = padded_ids([5, 3], 6), np.pad(padded_ids([5, 3], 6), ((0, 0), (0, 4)))
    np.testing.assert_allclose(to_numpy(model(long)), to_numpy(model(short)), atol=1e-6)
    states = to_numpy(encoder(short))
    np.testing.assert_allclose(to_numpy(model(short))[1], states[1, :3].mean(0), atol=1e-6)  # the real tokens' mean


def test_the_dict_input_of_keras_hub_and_a_padding_id_other_than_zero():
    encoder = TextEncoder(**BERT_LIKE, padding_id=1)
    ids = np.array([[5, 7, 9, 1, 1], [4, 6, 1, 1, 1]])
    mask = (ids != 1).astype("int32")
    by_ids = encoder(ids)
    by_dict = encoder({"token_ids": ids, "padding_mask": mask, "segment_ids": np.zeros_like(ids)})
    np.testing.assert_array_equal(to_numpy(by_ids["sequence_output"]), to_numpy(by_dict["sequence_output"]))
    assert tuple(by_dict["pooled_output"].shape) == (2, 16)
    other_segment = encoder({"token_ids": ids, "segment_ids": np.ones_like(ids)})
    assert np.abs(to_numpy(other_segment["sequence_output"]) - to_numpy(by_ids["sequence_output"])).max() > 1e-3


def test_a_learned_class_token_is_prepended_and_unmasked():
    encoder = TextEncoder(**SMALL, class_token=True)
    ids = padded_ids([4, 2], 5)
    assert tuple(encoder(ids).shape) == (2, 6, 16)
    np.testing.assert_array_equal(to_numpy(encoder.compute_mask(ids)),
                                  np.concatenate([np.ones((2, 1), bool), ids != 0], axis=1))


def test_learned_positions_start_at_the_offset():
    encoder = TextEncoder(**{**SMALL, "position": "learned"}, position_offset=2, padding_id=1)
    table = encoder.get_layer("token_embedding").position_embeddings
    assert tuple(table.shape) == (18, 16)  # max_length + offset rows, as RoBERTa's 514 = 512 + 2


def test_bad_inputs_and_arguments_are_named():
    encoder = TextEncoder(**SMALL)
    with pytest.raises(ValueError, match=r"Received keys: \['ids'\]"):
        encoder({"ids": np.array([[1, 2]])})
    with pytest.raises(ValueError, match="no segment table"):
        encoder({"token_ids": np.array([[1, 2]]), "segment_ids": np.array([[0, 1]])})
    with pytest.raises(ValueError, match=r"vocab_size\) = \[0, 30\). Received: an id of 30"):
        encoder(np.array([[1, 30]]))
    with pytest.raises(ValueError, match="num_segments.*Received: num_segments=-1"):
        TextEncoder(**SMALL, num_segments=-1)
    with pytest.raises(TypeError, match="`pooler` must be True or False. Received: pooler='yes'"):
        TextEncoder(**SMALL, pooler="yes")
    with pytest.raises(TypeError, match="Did you mean `num_segments`"):
        TextEncoder(**SMALL, num_segment=2)
    with pytest.raises(ValueError, match=r"padding_id.*Received: padding_id=30"):
        TextEncoder(**SMALL, padding_id=30)


@pytest.mark.parametrize("arguments", [SMALL, BERT_LIKE], ids=["paper", "bert"])
def test_config_round_trip_and_keras_file_exactly(arguments, tmp_path):
    encoder = TextEncoder(**arguments)
    config = encoder.get_config()
    assert TextEncoder.from_config(config).get_config() == config
    assert keras.saving.get_registered_object("keras_tfm>TextEncoder") is TextEncoder
    ids = padded_ids([5, 3], 6)
    encoder.save(tmp_path / "encoder.keras")
    loaded = keras.saving.load_model(tmp_path / "encoder.keras")
    expected, got = encoder(ids), loaded(ids)
    if arguments.get("pooler"):
        expected, got = expected["sequence_output"], got["sequence_output"]
    np.testing.assert_array_equal(to_numpy(got), to_numpy(expected))


def test_a_classifier_around_an_encoder_shares_it_and_round_trips(tmp_path):
    encoder = TextEncoder(**BERT_LIKE, name="encoder")
    classifier = TextClassifier(encoder=encoder, num_classes=3, pool="pooler")
    assert classifier.encoder is encoder and classifier.vocab_size == 30 and classifier.max_length == 16
    ids = padded_ids([5, 3], 6)
    classifier.save(tmp_path / "classifier.keras")
    loaded = keras.saving.load_model(tmp_path / "classifier.keras")
    np.testing.assert_array_equal(to_numpy(loaded(ids)), to_numpy(classifier(ids)))
    assert loaded.get_config() == classifier.get_config()
    with pytest.raises(TypeError, match=r"from_preset builds the encoder: .*TextClassifier\(encoder, \.\.\.\)"):
        TextClassifier.from_preset("tiny", vocab_size=30, max_length=16, encoder=encoder)
    with pytest.raises(ValueError, match='pool="pooler" needs an encoder with a pooler'):
        TextClassifier(encoder=TextEncoder(**SMALL), pool="pooler")


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_training_gives_finite_losses(policy):
    if keras.backend.backend() == "jax" and policy == "mixed_float16":
        pytest.skip("XLA:CPU has no float16 dot_general with float32 accumulation (JAX's fused attention)")
    keras.config.set_dtype_policy(policy)
    classifier = TextClassifier(encoder=TextEncoder(**BERT_LIKE), pool="pooler")
    assert keras.backend.standardize_dtype(classifier.encoder(padded_ids([3], 4))["sequence_output"].dtype) == (
        policy.removeprefix("mixed_"))
    classifier.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = classifier.fit(padded_ids([5, 3, 6, 2], 6), np.array([0, 1, 1, 0]), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


@pytest.mark.jit
def test_jit_compiled_training_of_a_classifier_on_the_encoder():
    classifier = TextClassifier(encoder=TextEncoder(**{**BERT_LIKE, "pooler": False}), pool="cls")
    classifier.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    history = classifier.fit(padded_ids([5, 3, 6, 2], 6), np.array([0, 1, 1, 0]), epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"])) and history.history["loss"][-1] < history.history["loss"][0]
