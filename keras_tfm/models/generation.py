"""Decoding strategies as pure functions of logits, and the compiled-loop helper.

Every strategy turns one step's logits `(rows, vocab)` into the next token per row:

* greedy: the most likely token;
* top_k: sample among the k most likely (Fan et al., 2018);
* top_p (nucleus): sample among the smallest set of tokens whose probability adds up to p
  (Holtzman et al., 2020);
* beam search keeps the `num_beams` best partial sequences (see `Seq2SeqTransformer.generate`).

Sampling uses one uniform number per step and row, drawn up front from the seed, and inverts the cumulative
distribution: reproducible with a fixed seed, and cheap inside a compiled loop.
"""

import keras
from keras import ops

STRATEGIES = ("greedy", "beam", "top_k", "top_p")


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


def compile_loop(function, variables):
    """Compiles `function` (which reads `variables` through Keras layers) for the current backend.

    TensorFlow: a `tf.function` compiled with XLA (the decoding `while_loop` runs as one compiled program).
    JAX: `jax.jit` of a stateless version, the variables' current values passed in at every call, so the
    compiled loop always sees the latest weights. PyTorch: runs eagerly.
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
    return function
