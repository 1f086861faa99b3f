"""MaskedLanguageModel: shapes, the loss on masked positions only, pre-training, and fine-tuning from it."""

import keras
import numpy as np
import pytest

from keras_tfm.metrics import MaskedSparseCategoricalCrossentropy
from keras_tfm.models import MaskedLanguageModel, TextClassifier
from keras_tfm.models.masked_lm import GatherPositions
from tests.helpers import to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the same keras.ops code on every backend: the model contract (tests/models/test_model_contract.py) "
    "and the recipes' quick runs train and save it on JAX and PyTorch"))

VOCAB = 40


def tiny(**kwargs):
    return MaskedLanguageModel.from_preset("tiny", vocab_size=VOCAB, max_length=16, dim=16, depth=2, num_heads=2,
                                           mlp_dim=32, **kwargs)


def inputs(rows=4, length=12, predictions=3, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, VOCAB, size=(rows, length)).astype("int32")
    ids[:, length - 3:] = 0
    positions = np.stack([rng.choice(length - 3, predictions, replace=False) for _ in range(rows)]).astype("int32")
    return {"token_ids": ids, "mask_positions": positions}


def test_logits_at_the_masked_positions_only():
    model = tiny(dropout=0.0)
    x = inputs()
    output = model(x)
    assert keras.backend.standardize_dtype(output.dtype) == "float32"
    logits = to_numpy(output)
    assert logits.shape == (4, 3, VOCAB)
    # The logits of slot j are the encoder's reading of position mask_positions[:, j]: moving a position moves them.
    swapped = dict(x, mask_positions=x["mask_positions"][:, ::-1])
    np.testing.assert_allclose(to_numpy(model(swapped)), logits[:, ::-1], atol=1e-5)
    # The output is tied to the token table: no separate vocabulary projection.
    assert [w.path for w in model.weights if VOCAB in w.shape] == ["token_embedding/token_embedding/embeddings"]


def test_gather_positions_picks_each_rows_states_and_ends_the_mask():
    states = np.arange(2 * 5 * 3, dtype="float32").reshape(2, 5, 3)
    positions = np.array([[4, 0], [1, 1]], "int32")
    gathered = to_numpy(GatherPositions()([states, positions]))
    np.testing.assert_array_equal(gathered, [[states[0, 4], states[0, 0]], [states[1, 1], states[1, 1]]])
    # Symbolically (any backend): the shape is known without running it, and the padding mask stops here.
    symbolic_states, symbolic_positions = keras.Input((None, 3)), keras.Input((2,), dtype="int32")
    gather = GatherPositions()
    output = gather([keras.layers.Masking()(symbolic_states), symbolic_positions])
    assert tuple(output.shape) == (None, 2, 3)
    assert gather.compute_mask([symbolic_states, symbolic_positions], [np.ones((2, 5), bool), None]) is None
    assert GatherPositions.from_config(GatherPositions(name="g").get_config()).name == "g"


def test_the_loss_ignores_unused_slots_hand_computed():
    logits = np.log(np.array([[[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], [[0.3, 0.3, 0.4], [0.5, 0.25, 0.25]]], "float32"))
    labels = np.array([[1, 2], [0, 0]])  # row 1: no prediction at all; label 0 = unused slot
    loss = float(MaskedSparseCategoricalCrossentropy(from_logits=True)(labels, logits))
    expected = -(np.log(0.2) + np.log(0.8)) / 2  # the two used slots only
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_a_tiny_pretraining_lowers_the_masked_word_loss():
    from keras_tfm.data.mlm import masked_lm_dataset

    rng = np.random.default_rng(0)
    # Text whose hidden words can be read from their context: each sequence alternates two random words.
    pairs = rng.integers(3, VOCAB, size=(512, 2))
    ids = pairs[:, np.arange(16) % 2].astype("int32")
    keras.utils.set_random_seed(0)
    model = tiny(dropout=0.0)
    model.compile_for_training(optimizer=keras.optimizers.Adam(1e-2))
    dataset = masked_lm_dataset(ids, 32, mask_token_id=2, vocab_size=VOCAB, seed=0)
    history = model.fit(dataset, epochs=10, steps_per_epoch=16, verbose=0, shuffle=False).history
    assert history["loss"][-1] < 0.7 * history["loss"][0]
    assert history["accuracy"][-1] > 0.2  # from 1 in 37 (a guess)


def test_from_encoder_hands_over_the_encoder_itself_and_makes_a_new_head():
    encoder = tiny()
    classifier = TextClassifier.from_encoder(encoder, num_classes=3, dropout=0.3)
    assert classifier.encoder is encoder.encoder  # one backbone, not a copy kept in step by names
    backbone = classifier.encoder
    assert (classifier.vocab_size, classifier.max_length, backbone.dim, backbone.depth) == (VOCAB, 16, 16, 2)
    assert (classifier.num_classes, classifier.pool, classifier.dropout) == (3, "mean", 0.3)
    x = inputs()
    before = to_numpy(encoder(x))
    classifier.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    classifier.fit(x["token_ids"], np.arange(4) % 3, epochs=2, verbose=0)
    assert np.abs(to_numpy(encoder(x)) - before).max() > 1e-4  # fine-tuning moved the shared encoder's weights
    # The masked LM's output projection is tied to the encoder's token table, inside the same object.
    assert encoder.get_layer("encoder").get_layer("token_embedding") is classifier.encoder.get_layer("token_embedding")


def test_from_encoder_refuses_what_the_encoder_fixes_and_what_is_not_an_encoder():
    encoder = tiny()
    with pytest.raises(ValueError, match=r"\['dim'\] come from the pre-trained encoder"):
        TextClassifier.from_encoder(encoder, dim=32)
    with pytest.raises(TypeError, match="unexpected keyword argument `dropuot`"):
        TextClassifier.from_encoder(encoder, dropuot=0.1)
    with pytest.raises(ValueError, match='pool="cls" reads a \\[CLS\\] token'):
        TextClassifier.from_encoder(encoder, pool="cls")
    with pytest.raises(TypeError, match="must be a keras_tfm TextEncoder"):
        TextClassifier.from_encoder(keras.Sequential([keras.layers.Dense(2)]))


def test_save_and_load_round_trip_exactly(tmp_path):
    model = tiny()
    x = inputs()
    path = tmp_path / "mlm.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, MaskedLanguageModel) and loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))


def test_out_of_range_ids_are_a_clear_error_in_fit():
    model = tiny()
    model.compile_for_training()
    x = inputs()
    x["token_ids"][0, 0] = VOCAB
    with pytest.raises(ValueError, match=r"x\['token_ids'\]"):
        model.fit(x, np.ones((4, 3), "int32"), verbose=0)


def every_model():
    from keras_tfm.models import Seq2SeqTransformer, TransformerLM, ViT, ViTBackbone

    yield ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32, position="learned"),
              num_classes=3, pool="cls")
    yield TextClassifier.from_preset("tiny", vocab_size=20, max_length=8, dim=16, depth=1, num_heads=2, mlp_dim=32,
                                     pool="cls", position="learned")
    yield Seq2SeqTransformer(20, 20, dim=16, encoder_depth=1, decoder_depth=1, num_heads=2, mlp_dim=32,
                             max_length=8, position="learned")
    yield TransformerLM(vocab_size=20, dim=16, depth=1, num_heads=2, mlp_dim=32, max_length=8)
    yield tiny(position="learned")


@pytest.mark.parametrize("model", list(every_model()), ids=lambda m: type(m).__name__)
def test_weight_decay_skips_exactly_what_no_weight_decay_names(model):
    """One policy for every model: matrices and token tables decay; biases, norms, position tables and learned
    tokens don't (the LM decays its position table, as GPT-2 and nanoGPT do)."""
    optimizer = model.exclude_from_weight_decay(keras.optimizers.AdamW(learning_rate=1.0, weight_decay=0.5))
    variables = model.trainable_variables
    before = [to_numpy(v).copy() for v in variables]
    # Zero gradients: only the decay moves weights.
    optimizer.apply_gradients([(keras.ops.zeros(v.shape, v.dtype), v) for v in variables])
    exempt = {"bias", "gamma", "beta", "cls_token", "token"}
    if not isinstance(model, __import__("keras_tfm").TransformerLM):
        exempt.add("position_embeddings")
    for variable, old in zip(variables, before):
        decayed = not np.allclose(to_numpy(variable), old)
        assert decayed == (variable.name not in exempt), variable.path


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_gives_finite_float32_logits(policy):
    keras.config.set_dtype_policy(policy)
    output = tiny()(inputs())
    assert keras.backend.standardize_dtype(output.dtype) == "float32"
    assert np.all(np.isfinite(to_numpy(output)))


@pytest.mark.jit
def test_jit_compiled_training_step():
    model = tiny()
    model.compile_for_training(jit_compile=True)
    x = inputs()
    history = model.fit(x, x["token_ids"][np.arange(4)[:, None], x["mask_positions"]], epochs=2, batch_size=4,
                        verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
