"""TransformerLM: causal language modelling, saving, attention maps and generation over padded prompts."""

import keras
import numpy as np
import pytest

from keras_tfm import attention_maps
from keras_tfm.models import LANGUAGE_MODEL_PRESETS, TransformerLM
from tests.helpers import greedy_without_cache, to_numpy

VOCAB = 17


def small_model(**kwargs):
    """A small random model with a wide-spread token table, so that its greedy choices are clear-cut."""
    keras.utils.set_random_seed(7)
    sizes = dict(vocab_size=VOCAB, dim=32, depth=2, num_heads=4, mlp_dim=64, max_length=24)
    model = TransformerLM(**{**sizes, **kwargs})
    embedding = model.get_layer("embedding").embeddings
    embedding.assign(np.random.default_rng(0).normal(size=embedding.shape).astype("float32"))
    return model


def random_ids(rows, length, seed=0):
    return np.random.default_rng(seed).integers(1, VOCAB, size=(rows, length)).astype("int32")


def test_position_t_depends_on_tokens_up_to_t_only():
    model = small_model()
    ids = random_ids(2, 12)
    changed = ids.copy()
    changed[:, 7:] = random_ids(2, 5, seed=1)
    before, after = to_numpy(model(ids)), to_numpy(model(changed))
    np.testing.assert_allclose(before[:, :7], after[:, :7], atol=1e-5)
    assert np.abs(before[:, 7:] - after[:, 7:]).max() > 1e-3


@pytest.mark.parametrize("tie_embeddings, position", [(True, "learned"), (False, "sinusoidal")])
def test_config_and_keras_file_round_trip(tmp_path, tie_embeddings, position):
    model = small_model(tie_embeddings=tie_embeddings, position=position)
    config = model.get_config()
    assert TransformerLM.from_config(config).get_config() == config
    ids = random_ids(3, 10)
    path = str(tmp_path / "lm.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, TransformerLM) and loaded.get_config() == config
    np.testing.assert_allclose(to_numpy(loaded(ids)), to_numpy(model(ids)), atol=1e-5)
    np.testing.assert_array_equal(loaded.generate(ids[:, :4], 6), model.generate(ids[:, :4], 6))
    assert ("output_projection" in [layer.name for layer in model.layers]) != tie_embeddings


def test_training_lowers_the_loss_and_skips_weight_decay_on_norms_and_biases():
    model = small_model(vocab_size=8)
    ids = np.tile(np.arange(1, 8, dtype="int32"), (16, 3))[:, :17]  # a repeating pattern, easy to learn
    model.compile_for_training()
    history = model.fit(ids[:, :-1], ids[:, 1:], epochs=30, batch_size=16, verbose=0).history["loss"]
    assert history[-1] < 0.3 * history[0]
    assert model.no_weight_decay() == ()  # the position table decays, as in GPT-2 and nanoGPT
    assert {v.name for v in model.weight_decay_exempt_variables()} == {"beta", "bias", "gamma"}


def test_attention_maps_are_causal():
    model = small_model()
    maps = attention_maps(model, random_ids(2, 9))
    assert list(maps) == ["block_0/self_attention", "block_1/self_attention"]
    weights = maps["block_1/self_attention"]
    assert weights.shape == (2, 4, 9, 9)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(np.ones((9, 9)), k=1)[None, None] * weights == 0)


def test_padded_prompts_in_one_batch_continue_as_each_prompt_alone():
    model = small_model()
    prompts = [[3, 5, 7, 9, 11], [4], [8, 2, 6]]
    batch = np.zeros((3, 5), "int32")
    for row, prompt in enumerate(prompts):
        batch[row, : len(prompt)] = prompt
    new = 8
    together = model.generate(batch, new)
    uncached = model.generate(batch, new, use_cache=False)
    np.testing.assert_array_equal(uncached, together)
    assert together.shape == (3, 5 + new)
    for row, prompt in enumerate(prompts):
        alone = model.generate(np.asarray([prompt], "int32"), new)[0]
        np.testing.assert_array_equal(together[row, : len(prompt) + new], alone)
        assert np.all(together[row, len(prompt) + new :] == 0)  # exactly `new` tokens for every row
        np.testing.assert_array_equal(alone, greedy_without_cache(model, prompt, new))


def test_sampling_and_beam_search_keep_the_prompt_and_stay_in_the_vocabulary():
    model = small_model()
    batch = np.array([[3, 5, 7], [4, 0, 0]], "int32")
    for kwargs in (dict(strategy="top_k", k=5, seed=1), dict(strategy="top_p", p=0.9, seed=2),
                   dict(strategy="beam", num_beams=3)):
        out = model.generate(batch, 6, **kwargs)
        np.testing.assert_array_equal(out[:, :1], batch[:, :1])
        np.testing.assert_array_equal(out[0, :3], [3, 5, 7])
        assert np.all(out[0, 3:9] > 0) and np.all(out[1, 1:7] > 0) and np.all(out[1, 7:] == 0)
    sampled = model.generate(batch, 6, strategy="top_k", k=5, seed=1, temperature=2.0)
    np.testing.assert_array_equal(model.generate(batch, 6, strategy="top_k", k=5, seed=1, temperature=2.0), sampled)
    np.testing.assert_array_equal(model.generate(batch, 6, strategy="beam", num_beams=1), model.generate(batch, 6))


def test_generation_stops_at_end_id():
    model = small_model()
    prompt = np.array([[3, 5, 7], [9, 1, 0]], "int32")
    free = model.generate(prompt, 10)
    end_id = int(free[0, 5])  # the third token the model produces for row 0
    stopped, scores = model.generate(prompt, 10, end_id=end_id, return_scores=True)
    first_end = 3 + int(np.argmax(free[0, 3:] == end_id))
    np.testing.assert_array_equal(stopped[0, : first_end + 1], free[0, : first_end + 1])
    assert np.all(stopped[0, first_end + 1 :] == 0)
    row_1_end = np.flatnonzero(free[1, 2:12] == end_id)
    if row_1_end.size:  # row 1 stops at its own end token, if it makes one
        assert np.all(stopped[1, 2 + row_1_end[0] + 1 :] == 0)
    assert scores.shape == (2,) and np.all(scores <= 0)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_gives_float32_logits_and_generates(policy):
    keras.config.set_dtype_policy(policy)
    model = TransformerLM(vocab_size=VOCAB, dim=32, depth=1, num_heads=4, mlp_dim=64, max_length=16)
    ids = random_ids(2, 8)
    logits = model(ids)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert np.all(np.isfinite(to_numpy(logits)))
    if keras.backend.backend() == "jax" and policy == "mixed_float16":
        pytest.skip("XLA:CPU has no float16 dot_general with float32 accumulation (JAX's fused attention)")
    out = model.generate(ids[:, :3], 5)
    assert out.shape == (2, 8) and np.all(out > 0)


@pytest.mark.jit
def test_jit_compiled_training():
    model = small_model()
    ids = random_ids(8, 13)
    model.compile_for_training(jit_compile=True)
    history = model.fit(ids[:, :-1], ids[:, 1:], epochs=2, batch_size=4, verbose=0).history["loss"]
    assert np.all(np.isfinite(history))


def test_presets_include_nanogpts_shakespeare_sizes():
    cpu = TransformerLM.from_preset("shakespeare_char_cpu", vocab_size=65)
    assert (cpu.depth, cpu.num_heads, cpu.dim, cpu.max_length) == (4, 4, 128, 64)
    assert LANGUAGE_MODEL_PRESETS["shakespeare_char"] == dict(
        dim=384, depth=6, num_heads=6, mlp_dim=1536, max_length=256, dropout=0.2)
    # nanoGPT's 4-layer model without biases has 0.80M parameters; ours has biases and LayerNorm offsets.
    assert 790_000 < cpu.count_params() < 820_000
    with pytest.raises(ValueError, match="Unknown TransformerLM preset 'gpt5'"):
        TransformerLM.from_preset("gpt5", vocab_size=65)


def test_bad_arguments():
    with pytest.raises(ValueError, match="`position` must be one of"):
        TransformerLM(vocab_size=10, position=None)
    with pytest.raises(ValueError, match="`depth` must be a positive integer. Received: depth=0"):
        TransformerLM(vocab_size=10, depth=0)
    model = small_model()
    with pytest.raises(ValueError, match="must fit in the model's context, max_length=24"):
        model.generate(random_ids(1, 20), 5)
    with pytest.raises(ValueError, match="right-padded"):
        model.generate(np.array([[0, 3, 4]], "int32"), 2)
    with pytest.raises(ValueError, match="at least one token"):
        model.generate(np.array([[3, 4], [0, 0]], "int32"), 2)
    with pytest.raises(ValueError, match="`prompt_ids` must be an int array"):
        model.generate(np.ones((2, 3), "float32"), 2)
    with pytest.raises(ValueError, match=r"`end_id` must be a token id in \[1, 17\)"):
        model.generate(random_ids(1, 3), 2, end_id=17)
    with pytest.raises(ValueError, match="`max_new_tokens` must be a positive integer"):
        model.generate(random_ids(1, 3), 0)
    with pytest.raises(ValueError, match="Beam search always uses the cache"):
        model.generate(random_ids(1, 3), 2, strategy="beam", use_cache=False)
