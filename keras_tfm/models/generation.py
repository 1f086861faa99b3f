"""Decoding, apart from the models: strategies as pure functions of logits, and loops over a step function.

A model that generates supplies `step(token_ids, index, cache) -> (logits, cache)` and an initial cache; the
loops here (`sample`, `beam_search`) know nothing else about it, so they are tested on toy step functions and
shared by `Seq2SeqTransformer` and `TransformerLM`. Every strategy turns one step's logits `(rows, vocab)` into
the next token per row:

* greedy: the most likely token;
* top_k: sample among the k most likely (Fan et al., 2018);
* top_p (nucleus): sample among the smallest set of tokens whose probability adds up to p
  (Holtzman et al., 2020);
* beam search keeps the `num_beams` best partial sequences, ranked by length-normalised log-probability
  (Wu et al., 2016, with `length ** alpha` as the penalty).

Sampling uses one uniform number per step and row, drawn up front from the seed, and inverts the cumulative
distribution: reproducible with a fixed seed, and cheap inside a compiled loop.
"""

import functools

import keras
import numpy as np
from keras import ops

from keras_tfm import checks
from keras_tfm.layers import _checks
from keras_tfm.models._checked_inputs import checked_loop

STRATEGIES = ("greedy", "beam", "top_k", "top_p")
_NEG = -1e9  # log-probability of impossible beam extensions (finite, so no inf - inf = NaN)


def sample_from_probabilities(probabilities, uniform):
    """Index `i` with `cdf[i-1] <= u < cdf[i]` for each row: a draw from each row's distribution.

    Args:
        probabilities: `(rows, n)` non-negative, each row summing to > 0 (renormalised here).
        uniform: `(rows,)` numbers in [0, 1).

    Returns:
        `(rows,)` int32 indices.
    """
    cdf = ops.cumsum(probabilities, axis=-1)  # (rows, n)
    threshold = uniform[:, None] * cdf[:, -1:]  # (rows, 1)
    index = ops.sum(ops.cast(ops.less_equal(cdf, threshold), "int32"), axis=-1)  # how many bins lie below u
    return ops.minimum(index, ops.shape(probabilities)[-1] - 1)


def select_greedy(logits):
    return ops.cast(ops.argmax(logits, axis=-1), "int32")


def select_top_k(logits, uniform, k):
    """Samples among the `k` largest logits (k=1 is greedy)."""
    k = min(k, logits.shape[-1])
    values, indices = ops.top_k(logits, k)  # (rows, k), sorted, largest first
    weights = ops.exp(values - values[:, :1])  # unnormalised softmax (sampling renormalises); fine for k=1
    choice = sample_from_probabilities(weights, uniform)  # (rows,)
    return ops.cast(ops.take_along_axis(indices, choice[:, None], axis=-1)[:, 0], "int32")


def select_top_p(logits, uniform, p):
    """Samples from the smallest set of most likely tokens whose probabilities reach `p`."""
    values, indices = ops.top_k(logits, logits.shape[-1])  # the whole vocabulary, sorted
    probabilities = ops.softmax(values, axis=-1)  # (rows, vocab)
    before = ops.cumsum(probabilities, axis=-1) - probabilities  # mass of the more likely tokens
    kept = ops.where(before < p, probabilities, 0.0)  # always keeps the most likely token
    choice = sample_from_probabilities(kept, uniform)
    return ops.cast(ops.take_along_axis(indices, choice[:, None], axis=-1)[:, 0], "int32")


def numbers(temperature, p, length_penalty):
    """`(3,)` float32: the settings a compiled decoding loop reads at run time instead of compiling them in, so that
    `generate` with another temperature, nucleus mass or length penalty reuses the loop it compiled (on
    TensorFlow an XLA compile takes seconds). Unpack them inside the loop as `numbers[0], numbers[1], numbers[2]`."""
    return ops.convert_to_tensor([float(temperature), float(p), float(length_penalty)], dtype="float32")


def compile_loop(function, variables):
    """Compiles `function` (which reads `variables` through Keras layers) for the current backend.

    TensorFlow: a `tf.function` compiled with XLA (the decoding `while_loop` runs as one compiled program).
    JAX: `jax.jit` of a stateless version, the variables' current values passed in at every call, so the
    compiled loop always sees the latest weights. PyTorch: not compiled; the loop runs eagerly in Python, one
    step per token, under `torch.no_grad()` (decoding needs no gradients, and without it every step would keep
    the autograd graph of the cache alive).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True, reduce_retracing=True)
    if backend == "jax":
        import jax

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return function(*args)

        jitted = jax.jit(stateless)
        return lambda *args: jitted([variable.value for variable in variables], *args)
    if backend == "torch":
        import torch

        return torch.no_grad()(function)
    return function


def check_arguments(strategy, num_beams, k, p, temperature):
    """ValueErrors for decoding arguments, shared by every model's `generate`."""
    _checks.one_of("strategy", strategy, STRATEGIES)
    _checks.positive_int("num_beams", num_beams)
    _checks.positive_int("k", k)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"`p` must be a number in (0, 1]. Received: p={p!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"`temperature` must be a positive number. Received: temperature={temperature!r}")


class GenerationMixin:
    """What every model's `generate` shares: the decoding arguments and the id batch checked, then one compiled
    loop per setting, kept in `self._generate_functions` (a dict the model makes in `__init__`).

    A model's `generate` checks what is its own (lengths, the prompt's padding), then calls `run_loop` with its
    `_decode(*arguments, settings=...)`, which builds its cache and calls `sample` or `beam_search`.
    """

    @staticmethod
    def check_decoding(strategy, num_beams, k, p, temperature, use_cache):
        """ValueErrors for the arguments every `generate` takes."""
        check_arguments(strategy, num_beams, k, p, temperature)
        if strategy == "beam" and not use_cache:
            raise ValueError("Beam search always uses the cache: use_cache=False is for greedy and sampling.")

    @staticmethod
    def id_batch(name, values, vocab_size):
        """`values` as a NumPy `(batch, length)` int array of ids in [0, vocab_size), or a ValueError naming it."""
        values = np.asarray(ops.convert_to_numpy(values))
        if values.ndim != 2 or not np.issubdtype(values.dtype, np.integer):
            raise ValueError(f"`{name}` must be an int array of shape (batch, length). "
                             f"Received: shape {values.shape}, dtype {values.dtype}")
        checks.token_ids(name, values, vocab_size)
        return values

    @staticmethod
    def check_token(name, token, vocab_size, optional=False):
        """A start or end token must be an id in [1, vocab_size) (0 is padding); None where `optional`."""
        if optional and token is None:
            return
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 < token < vocab_size:
            raise ValueError(f"`{name}` must be a token id in [1, {vocab_size}){' or None' if optional else ''}. "
                             f"Received: {name}={token!r}")

    def run_loop(self, settings, arguments, return_scores):
        """Runs the compiled loop of `settings` (compiling it on first use) on `arguments`.

        Args:
            settings: dict of what shapes the program (strategy, lengths, beams, k, tokens, cache); one loop is
                compiled per distinct value. Numbers the loop reads at run time (`numbers`) are in `arguments`.
            arguments: the tensors `self._decode` takes before `settings`.
            return_scores: also return the scores.

        Returns:
            `(batch, length)` int32 NumPy tokens; with `return_scores`, `(tokens, scores)`.
        """
        key = tuple(settings.values())
        if key not in self._generate_functions:
            self._generate_functions[key] = compile_loop(functools.partial(self._decode, settings=settings),
                                                         self.variables)
        with checked_loop(self):  # the ids were checked above: no check compiled into each step
            tokens, scores = self._generate_functions[key](*arguments)
        tokens = np.asarray(ops.convert_to_numpy(tokens)).astype("int32")
        return (tokens, np.asarray(ops.convert_to_numpy(scores))) if return_scores else tokens


# ----------------------------------------------------------------------------------------------------------
# The decoding loops. A model supplies `step(token_ids, index, cache) -> (logits, cache)`: given the token
# buffer `(rows, length)`, whose positions 0..index are filled, it returns the logits `(rows, vocab)` of the
# token at position `index + 1` and its updated cache. The cache is any nest (dicts, lists, tuples) of tensors
# whose first axis is the row; the loops never look inside it, they only repeat and reorder its rows.


def sample(step, token_ids, cache, start, strategy="greedy", uniform=None, given=None, end_id=None, k=10, p=0.9,
           temperature=1.0):
    """Greedy, top-k or top-p decoding in one `while_loop`: fills `token_ids[:, start + 1:]`.

    Args:
        step: the model's step function (see above).
        token_ids: `(rows, length)` int32 buffer; positions `0..start` must be filled.
        cache: the model's initial cache nest, holding positions `0..start - 1` (or nothing, at start 0).
        start: int or scalar int tensor, the first position `step` reads.
        strategy: `"greedy"`, `"top_k"` or `"top_p"`.
        uniform: `(length - 1, rows)` numbers in [0, 1), one draw per position and row (sampling only).
        given: optional `(rows, length)` bool, True where `token_ids` already holds a token the loop must keep
            (a prompt longer than `start + 1`): the loop feeds it in instead of its own choice, and scores it not.
        end_id: a row stops after producing it (given tokens do not count); its later positions become 0.
        k, p: the top-k size and the nucleus mass.
        temperature: the logits are divided by it.

    Returns:
        `(token_ids, scores)`: the filled `(rows, length)` buffer and `(rows,)` summed log-probabilities of the
        produced tokens (after temperature).
    """
    _checks.one_of("strategy", strategy, ("greedy", "top_k", "top_p"))
    rows, length = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
    given = ops.zeros_like(token_ids, dtype="bool") if given is None else given

    def select(logits, index):
        if strategy == "greedy":
            return select_greedy(logits)
        if strategy == "top_k":
            return select_top_k(logits, uniform[index], k)
        return select_top_p(logits, uniform[index], p)

    def body(index, token_ids, finished, scores, cache):
        logits, cache = step(token_ids, index, cache)
        logits = ops.cast(logits, "float32") / temperature  # (rows, vocab)
        forced = ops.take(given, index + 1, axis=1)  # (rows,) the next token is part of the prompt
        chosen = ops.where(finished, 0, select(logits, index))  # 0 (padding) once a row has ended
        chosen = ops.where(forced, ops.take(token_ids, index + 1, axis=1), chosen)
        gained = ops.take_along_axis(ops.log_softmax(logits, axis=-1), chosen[:, None], axis=-1)[:, 0]
        scores = scores + ops.where(ops.logical_or(finished, forced), 0.0, gained)
        token_ids = ops.slice_update(token_ids, [0, index + 1], chosen[:, None])
        if end_id is not None:
            finished = ops.logical_or(finished, ops.logical_and(ops.logical_not(forced), ops.equal(chosen, end_id)))
        return index + 1, token_ids, finished, scores, cache

    def cond(index, token_ids, finished, scores, cache):
        return ops.logical_and(index < length - 1, ops.logical_not(ops.all(finished)))

    loop_vars = (ops.convert_to_tensor(start, "int32"), token_ids, ops.zeros((rows,), "bool"),
                 ops.zeros((rows,), "float32"), cache)
    _, token_ids, _, scores, _ = ops.while_loop(cond, body, loop_vars)
    return token_ids, scores


def repeat_rows(nest, times):
    """Repeats every row of every tensor in `nest` `times` times (row r becomes rows r*times .. r*times+times-1)."""
    return keras.tree.map_structure(lambda x: ops.repeat(x, times, axis=0), nest)


def take_rows(nest, rows):
    """`nest` with every tensor's rows gathered at `rows` (one `take` per tensor)."""
    return keras.tree.map_structure(lambda x: ops.take(x, rows, axis=0), nest)


def beam_search(step, token_ids, cache, start, num_beams, given=None, end_id=None, length_penalty=1.0,
                temperature=1.0):
    """Beam search: keeps the `num_beams` best partial sequences, ranked by `sum log p / length ** length_penalty`.

    Arguments as for `sample`; `token_ids`, `cache` and `given` hold one row per sample: the loop repeats them
    `num_beams` times (so a model's encoder runs once) and, after every step, reorders all of the cache nest's
    rows with one `take` so that each beam carries the cache of the hypothesis it extends. A finished beam can
    only be extended by padding (id 0), at no cost, and keeps its score; the length counts the produced tokens
    (`end_id` included, prompt tokens not).

    Returns:
        `(token_ids, scores)`: each sample's best sequence `(rows, length)` and its normalised score `(rows,)`.
    """
    _checks.positive_int("num_beams", num_beams)
    batch, length, beams = ops.shape(token_ids)[0], ops.shape(token_ids)[1], num_beams
    rows = batch * beams  # row b * beams + j is beam j of sample b
    given = ops.zeros_like(token_ids, dtype="bool") if given is None else given
    token_ids, cache, given = repeat_rows((token_ids, cache, given), beams)

    def normalised(scores, lengths):
        return scores / ops.power(ops.maximum(ops.cast(lengths, "float32"), 1.0), length_penalty)

    def body(index, token_ids, finished, scores, lengths, cache):
        logits, cache = step(token_ids, index, cache)  # (rows, vocab)
        vocab = logits.shape[-1]
        log_probs = ops.reshape(ops.log_softmax(ops.cast(logits, "float32") / temperature, axis=-1),
                                (batch, beams, vocab))
        token = ops.arange(vocab)[None, None, :]  # (1, 1, vocab)
        forced = ops.reshape(ops.take(given, index + 1, axis=1), (batch, beams))
        next_given = ops.reshape(ops.take(token_ids, index + 1, axis=1), (batch, beams))
        # A prompt token is the only extension, free; a finished hypothesis is extended by padding, free.
        log_probs = ops.where(forced[:, :, None], ops.where(token == next_given[:, :, None], 0.0, _NEG), log_probs)
        log_probs = ops.where(finished[:, :, None], ops.where(token == 0, 0.0, _NEG), log_probs)
        candidates = scores[:, :, None] + log_probs  # (batch, beams, vocab)
        grows = ops.logical_not(ops.logical_or(finished, forced))
        new_lengths = lengths + ops.cast(grows, "int32")  # (batch, beams)
        ranked = normalised(candidates, new_lengths[:, :, None])
        _, best = ops.top_k(ops.reshape(ranked, (batch, beams * vocab)), beams)  # (batch, beams)
        parent, chosen = best // vocab, ops.cast(best % vocab, "int32")  # which beam, which token
        scores = ops.take_along_axis(ops.reshape(candidates, (batch, beams * vocab)), best, axis=1)
        lengths = ops.take_along_axis(new_lengths, parent, axis=1)
        finished = ops.take_along_axis(finished, parent, axis=1)
        if end_id is not None:
            produced = ops.take_along_axis(grows, parent, axis=1)  # the token was chosen, not given or padding
            finished = ops.logical_or(finished, ops.logical_and(produced, ops.equal(chosen, end_id)))
        # Every beam takes its parent's rows of the token buffer and of the whole cache nest (the prompt flags
        # need no reordering: all beams of a sample share them).
        parent_rows = ops.reshape(ops.arange(batch)[:, None] * beams + parent, (rows,))
        token_ids, cache = take_rows((token_ids, cache), parent_rows)
        token_ids = ops.slice_update(token_ids, [0, index + 1], ops.reshape(chosen, (rows, 1)))
        return index + 1, token_ids, finished, scores, lengths, cache

    def cond(index, token_ids, finished, scores, lengths, cache):
        return ops.logical_and(index < length - 1, ops.logical_not(ops.all(finished)))

    first_beam_only = ops.where(ops.equal(ops.arange(beams), 0), 0.0, _NEG)  # the beams start identical
    loop_vars = (
        ops.convert_to_tensor(start, "int32"),
        token_ids,
        ops.zeros((batch, beams), "bool"),
        ops.broadcast_to(first_beam_only[None, :], (batch, beams)),
        ops.zeros((batch, beams), "int32"),
        cache,
    )
    _, token_ids, _, scores, lengths, _ = ops.while_loop(cond, body, loop_vars)
    final = normalised(scores, lengths)  # (batch, beams)
    best = ops.argmax(final, axis=-1)  # (batch,)
    token_ids = ops.take(token_ids, ops.arange(batch) * beams + ops.cast(best, "int32"), axis=0)
    return token_ids, ops.take_along_axis(final, best[:, None], axis=1)[:, 0]
