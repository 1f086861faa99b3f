"""The decoding loops of keras_tfm.models.generation, on toy step functions whose answers can be enumerated."""

import itertools

import keras
import numpy as np
import pytest
from keras import ops

from keras_tfm.models import TransformerLM, generation
from tests.helpers import greedy_without_cache

VOCAB, NEW, START, END = 5, 4, 1, 4  # 5 tokens, 4 new ones after the start token; token 4 ends a sequence


def toy_step(table):
    """A step function whose logits depend on the whole prefix, read from the cache (not from `token_ids`):
    `cache["code"]` is the prefix written in base VOCAB, so a beam that carried the wrong cache would score
    the wrong prefix. `table[index, code]` are the logits of the token after position `index`."""
    table = ops.convert_to_tensor(table.astype("float32"))

    def step(token_ids, index, cache):
        code = cache["code"] * VOCAB + ops.take(token_ids, index, axis=1)  # (rows,)
        return ops.take(ops.take(table, index, axis=0), code, axis=0), {"code": code}

    return step


def start_buffer(rows):
    token_ids = np.zeros((rows, NEW + 1), "int32")
    token_ids[:, 0] = START
    return ops.convert_to_tensor(token_ids), {"code": ops.zeros((rows,), "int32")}


def log_softmax(x):
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def score(table, tokens, length_penalty, end_id=END):
    """(normalised score, produced length) of one sequence under the toy table, as beam search ranks it."""
    code, total, length = START, 0.0, 0
    for index, token in enumerate(tokens):
        if length and tokens[length - 1] == end_id:
            break
        total += log_softmax(table[index, code])[token]
        length += 1
        code = code * VOCAB + token
    return total / max(length, 1) ** length_penalty, length


def brute_force(table, length_penalty):
    """The best sequence of all VOCAB ** NEW, padded with 0 after its end token."""
    best = max(itertools.product(range(VOCAB), repeat=NEW), key=lambda seq: score(table, seq, length_penalty)[0])
    normalised, length = score(table, best, length_penalty)
    return list(best[:length]) + [0] * (NEW - length), normalised


def reference_beam_search(table, beams, length_penalty):
    """Beam search written plainly, one hypothesis at a time: [tokens, log-probability, length, finished]."""

    def rank(hypothesis):
        return hypothesis[1] / max(hypothesis[2], 1) ** length_penalty

    hypotheses = [([], 0.0, 0, False)]
    for index in range(NEW):
        candidates = []
        for tokens, total, length, finished in hypotheses:
            if finished:  # padding, free
                candidates.append((tokens + [0], total, length, True))
                continue
            code = START
            for token in tokens:
                code = code * VOCAB + token
            log_probs = log_softmax(table[index, code])
            candidates.extend((tokens + [v], total + log_probs[v], length + 1, v == END) for v in range(VOCAB))
        hypotheses = sorted(candidates, key=rank, reverse=True)[:beams]
    best = max(hypotheses, key=rank)
    return best[0], rank(best)


def run_beam_search(table, beams, length_penalty):
    token_ids, cache = start_buffer(2)  # two identical rows: the batch axis is handled too
    tokens, scores = generation.beam_search(toy_step(table), token_ids, cache, 0, beams, end_id=END,
                                            length_penalty=length_penalty)
    tokens, scores = ops.convert_to_numpy(tokens), ops.convert_to_numpy(scores)
    np.testing.assert_array_equal(tokens[0], tokens[1])
    assert tokens[0, 0] == START
    return tokens[0, 1:].tolist(), float(scores[0])


def random_table(seed):
    return np.random.default_rng(seed).normal(scale=2.0, size=(NEW, VOCAB**NEW, VOCAB))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_search_with_room_for_every_prefix_is_exhaustive_search(seed, length_penalty):
    # 125 beams hold every prefix of 3 tokens, so nothing is pruned and beam search must find the best of all
    # 625 sequences.
    table = random_table(seed)
    tokens, found = run_beam_search(table, VOCAB ** (NEW - 1), length_penalty)
    expected, best = brute_force(table, length_penalty)
    assert tokens == expected
    assert found == pytest.approx(best, rel=1e-4)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("length_penalty", [0.0, 0.6, 1.0])
def test_three_beams_follow_the_plain_beam_search(seed, length_penalty):
    table = random_table(10 + seed)
    tokens, found = run_beam_search(table, 3, length_penalty)
    expected, best = reference_beam_search(table, 3, length_penalty)
    assert tokens == expected
    assert found == pytest.approx(best, rel=1e-4)


def path_table(paths):
    """A table with given next-token probabilities after given prefixes (uniform elsewhere)."""
    table = np.zeros((NEW, VOCAB**NEW, VOCAB))
    for prefix, probabilities in paths.items():
        code = START
        for token in prefix:
            code = code * VOCAB + token
        table[len(prefix), code] = np.log(probabilities)
    return table


def test_three_beams_find_the_best_sequence_that_greedy_misses():
    # Greedy takes token 3 first (0.5), after which everything is uniform; the best sequence starts with the
    # less likely token 1 (0.4) and then is almost certain: 1, 2, 4 (end).
    table = path_table({
        (): [0.02, 0.4, 0.04, 0.5, 0.04],
        (1,): [0.01, 0.01, 0.96, 0.01, 0.01],
        (1, 2): [0.01, 0.01, 0.01, 0.01, 0.96],
    })
    expected, best = brute_force(table, 1.0)
    assert expected == [1, 2, 4, 0]
    assert run_beam_search(table, 3, 1.0) == (expected, pytest.approx(best, rel=1e-4))
    token_ids, cache = start_buffer(1)
    greedy, _ = generation.sample(toy_step(table), token_ids, cache, 0, "greedy", end_id=END)
    assert ops.convert_to_numpy(greedy)[0, 1] == 3


def test_length_penalty_changes_the_winner():
    # Ending at once costs log 0.6; the long sequence 1, 2, 2, end costs log 0.3 + 3 log 0.96 in total but
    # less per token: without a length penalty the short one wins, normalised by length the long one does.
    table = path_table({
        (): [0.025, 0.3, 0.025, 0.05, 0.6],
        (1,): [0.01, 0.01, 0.96, 0.01, 0.01],
        (1, 2): [0.01, 0.01, 0.96, 0.01, 0.01],
        (1, 2, 2): [0.01, 0.01, 0.01, 0.01, 0.96],
    })
    short, _ = run_beam_search(table, 3, 0.0)
    long, _ = run_beam_search(table, 3, 1.0)
    assert short == [4, 0, 0, 0] == brute_force(table, 0.0)[0]
    assert long == [1, 2, 2, 4] == brute_force(table, 1.0)[0]


def fixed_logits_step(probabilities):
    logits = ops.convert_to_tensor(np.log(probabilities).astype("float32"))

    def step(token_ids, index, cache):
        return ops.broadcast_to(logits[None, :], (ops.shape(token_ids)[0], len(probabilities))), cache

    return step


def draw(strategy, probabilities, seeds=5, rows=2000, **kwargs):
    """Tokens drawn by `sample` from a fixed distribution: `seeds` x `rows` draws."""
    drawn = []
    for seed in range(seeds):
        token_ids = ops.zeros((rows, 2), "int32")
        uniform = keras.random.uniform((1, rows), seed=seed)
        out, _ = generation.sample(fixed_logits_step(probabilities), token_ids, (), 0, strategy, uniform=uniform,
                                   **kwargs)
        drawn.append(ops.convert_to_numpy(out)[:, 1])
    return np.concatenate(drawn)


PROBABILITIES = np.array([0.05, 0.3, 0.02, 0.25, 0.15, 0.1, 0.08, 0.05])


def test_top_k_samples_never_leave_the_top_k_and_follow_their_probabilities():
    drawn = draw("top_k", PROBABILITIES, k=3)
    top = {1, 3, 4}
    assert set(drawn.tolist()) == top  # every one of the top 3 is drawn, nothing else
    expected = PROBABILITIES[[1, 3, 4]] / PROBABILITIES[[1, 3, 4]].sum()
    observed = np.array([np.mean(drawn == t) for t in (1, 3, 4)])
    np.testing.assert_allclose(observed, expected, atol=0.02)  # 10,000 draws: the standard error is < 0.005


def test_top_p_samples_never_leave_the_nucleus():
    # Sorted: 0.3, 0.25, 0.15, 0.1, ... The mass before the 4th token is 0.7 < 0.75, before the 5th 0.8: the
    # nucleus for p = 0.75 is the 4 most likely tokens.
    drawn = draw("top_p", PROBABILITIES, p=0.75)
    nucleus = [1, 3, 4, 5]
    assert set(drawn.tolist()) == set(nucleus)
    expected = PROBABILITIES[nucleus] / PROBABILITIES[nucleus].sum()
    np.testing.assert_allclose([np.mean(drawn == t) for t in nucleus], expected, atol=0.02)


def test_sampling_is_seeded_and_temperature_flattens():
    first = draw("top_k", PROBABILITIES, seeds=1, k=8)
    np.testing.assert_array_equal(draw("top_k", PROBABILITIES, seeds=1, k=8), first)
    hot = draw("top_k", PROBABILITIES, seeds=1, k=8, temperature=100.0)
    assert np.mean(hot == 2) > 0.08 > np.mean(first == 2)  # the rarest token (0.02) becomes nearly uniform (1/8)


def test_given_tokens_are_kept_and_not_scored():
    # Row 0's prompt is 3 tokens long: the loop, starting after the first, must feed in the two prompt tokens.
    token_ids = ops.convert_to_tensor(np.array([[1, 2, 3, 0, 0], [1, 0, 0, 0, 0]], "int32"))
    given = ops.convert_to_tensor(np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], "bool"))
    probabilities = np.full(VOCAB, 0.1)
    probabilities[2] = 0.6
    out, scores = generation.sample(fixed_logits_step(probabilities), token_ids, (), 0, "greedy", given=given)
    np.testing.assert_array_equal(ops.convert_to_numpy(out), [[1, 2, 3, 2, 2], [1, 2, 2, 2, 2]])
    np.testing.assert_allclose(ops.convert_to_numpy(scores), [2 * np.log(0.6), 4 * np.log(0.6)], rtol=1e-5)


def test_cached_greedy_equals_the_uncached_argmax_loop():
    keras.utils.set_random_seed(3)
    model = TransformerLM(vocab_size=13, dim=32, depth=2, num_heads=4, mlp_dim=64, max_length=16)
    embedding = model.get_layer("embedding").embeddings
    embedding.assign(np.random.default_rng(0).normal(size=embedding.shape).astype("float32"))  # peaky logits
    prompt = np.array([[5, 9, 2]], "int32")
    steps = 10
    token_ids = np.zeros((1, 3 + steps), "int32")
    token_ids[:, :3] = prompt
    cache = [model.get_layer(f"block_{i}").build_cache(1, 3 + steps) for i in range(2)]
    given = ops.convert_to_tensor(np.arange(3 + steps)[None, :] < 3)
    cached, _ = generation.sample(model.step, ops.convert_to_tensor(token_ids), cache, 0, "greedy", given=given)

    expected = greedy_without_cache(model, prompt[0], steps)  # the whole sequence at every step, no cache
    np.testing.assert_array_equal(ops.convert_to_numpy(cached)[0], expected)


def test_check_arguments_names_the_bad_argument():
    with pytest.raises(ValueError, match="`strategy` must be one of"):
        generation.check_arguments("sampling", 4, 10, 0.9, 1.0)
    with pytest.raises(ValueError, match=r"`p` must be a number in \(0, 1\]. Received: p=1.5"):
        generation.check_arguments("top_p", 4, 10, 1.5, 1.0)
    with pytest.raises(ValueError, match="`temperature` must be a positive number"):
        generation.check_arguments("greedy", 4, 10, 0.9, 0)
    with pytest.raises(ValueError, match="`num_beams` must be a positive integer"):
        generation.check_arguments("beam", 0, 10, 0.9, 1.0)


def test_compile_loop_compiles_on_tensorflow_and_jax_and_runs_eagerly_without_gradients_on_torch():
    """The README's backend table: XLA on TensorFlow, `jax.jit` on JAX (traced once, always reading the latest
    weights), an eager loop under `torch.no_grad()` on PyTorch."""
    backend = keras.backend.backend()
    # A float32 array, like a layer's weights: on JAX a Python float would be weakly typed, and the first
    # (strongly typed) assignment would retrace.
    scale = keras.Variable(np.array(2.0, "float32"))
    runs = []  # one entry per Python execution of the function: a compiled one runs once, to trace

    def scaled(x):
        if backend == "torch":
            import torch

            runs.append(torch.is_grad_enabled())
        else:
            runs.append(True)
        return x * scale

    compiled = generation.compile_loop(scaled, [scale])
    np.testing.assert_allclose(ops.convert_to_numpy(compiled(ops.ones((3,)))), [2.0] * 3)
    scale.assign(np.array(3.0, "float32"))
    np.testing.assert_allclose(ops.convert_to_numpy(compiled(ops.ones((3,)))), [3.0] * 3)  # the latest weights
    if backend == "torch":
        assert runs == [False, False]
    else:
        assert len(runs) == 1
    if backend == "tensorflow":  # only a jit_compile=True function has XLA compiler IR
        assert "HloModule" in compiled.experimental_get_compiler_ir(ops.ones((3,)))(stage="hlo")


@pytest.mark.parametrize("model_kind", ["language_model", "seq2seq"])
def test_another_temperature_p_or_length_penalty_reuses_the_compiled_loop_and_takes_effect(model_kind):
    """Temperature, p and the length penalty reach the compiled loop as run-time numbers: a new value compiles
    nothing (on TensorFlow each XLA compile took seconds), and the loop compiled for one value gives, for another,
    exactly what a loop compiled first for that other value gives."""
    from keras_tfm.models import Seq2SeqTransformer

    keras.utils.set_random_seed(4)
    if model_kind == "language_model":
        model = TransformerLM(vocab_size=13, dim=16, depth=1, num_heads=2, mlp_dim=32, max_length=12)
        ids = np.array([[5, 9, 2], [3, 0, 0]], "int32")

        def generate(**kwargs):
            return model.generate(ids, 5, seed=2, return_scores=True, **kwargs)
    else:
        model = Seq2SeqTransformer(13, 13, dim=16, encoder_depth=1, decoder_depth=1, num_heads=2, mlp_dim=32,
                                   max_length=8)
        ids = np.array([[5, 9, 2, 7], [3, 4, 0, 0]], "int32")

        def generate(**kwargs):
            return model.generate(ids, 6, start_id=1, end_id=12, seed=2, return_scores=True, **kwargs)

    traces = []
    decode = model._decode
    model._decode = lambda *args, **kwargs: traces.append(1) or decode(*args, **kwargs)  # counts Python runs
    settings = [dict(strategy="top_p", temperature=1.0, p=0.9), dict(strategy="top_p", temperature=2.5, p=0.5),
                dict(strategy="beam", num_beams=2, length_penalty=1.0),
                dict(strategy="beam", num_beams=2, length_penalty=0.0, temperature=0.5)]
    reused = [generate(**kwargs) for kwargs in settings]
    assert len(model._generate_functions) == 2  # one loop per strategy, not per number
    if keras.backend.backend() != "torch":  # PyTorch runs the loop eagerly: every call is a Python run
        assert len(traces) == 2, "a new temperature, p or length penalty traced and compiled the loop again"
    # The numbers take effect: the second setting of each strategy, run by the loop the first one compiled, gives
    # what a loop compiled first for it gives.
    for kwargs, (tokens, scores) in zip(settings[1::2], reused[1::2]):
        model._generate_functions.clear()
        fresh_tokens, fresh_scores = generate(**kwargs)
        np.testing.assert_array_equal(tokens, fresh_tokens, err_msg=str(kwargs))
        np.testing.assert_allclose(scores, fresh_scores, rtol=1e-6, err_msg=str(kwargs))
    assert not np.allclose(reused[0][1], reused[1][1])  # a hotter, narrower sampling scores differently
    assert not np.allclose(reused[2][1], reused[3][1])  # and so does the other length penalty
