"""Dropout (Srivastava et al., 2014) whose random mask is cheap to draw on PyTorch.

Every keras_tfm layer that drops activations uses this layer. It is `keras.layers.Dropout`, with the same
arguments, config and state, except for how the mask is drawn by PyTorch on a CPU. There, Keras draws one random
number per element (`torch.bernoulli` from a tensor of keep probabilities for a seeded layer,
`torch.nn.functional.dropout` for an unseeded one), which made dropout 28% of a bf16 training step of a BERT-sized
classifier (`torch.profiler`, [results](../../docs/results.md#the-fast-path-backends-precisions-compilers)).
Here one 64-bit random word gives the draws of four elements, 16 bits each, so the mask costs a quarter of the
random numbers and one comparison. The rate is then a multiple of 1 / 65536 (0.1 drops 6,554 / 65,536 =
0.100006 of the elements), and the kept elements are scaled by the exact inverse of that keep probability, so the
expected output still equals the input. The other backends, and GPUs, keep Keras' own dropout.
"""

import numbers

import keras

from keras_tfm.layers import _checks

_RESOLUTION = 2**16  # each element's draw is a 16-bit integer


def _torch_dropout(inputs, rate, seed_generator=None):
    """`inputs` with elements zeroed with probability `rate` (rounded to a multiple of 1/65536) and the rest
    scaled. The draws come from `seed_generator`'s next seed, or, without one, from PyTorch's global generator (as
    Keras' unseeded dropout does: `keras.utils.set_random_seed` seeds it)."""
    import torch

    generator = None
    if seed_generator is not None:
        seed = seed_generator.next()  # Keras' seed state advances as its own dropout would advance it
        generator = torch.Generator(device=inputs.device)
        generator.manual_seed(int(seed.to(torch.int64).sum()) & 0xFFFFFFFF)
    count = inputs.numel()
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=inputs.device)
    words.random_(-(2**63), None, generator=generator)  # all 64 bits uniform: four independent int16 draws
    draws = words.view(torch.int16)[:count].view(inputs.shape)
    dropped = round(rate * _RESOLUTION)
    keep = draws >= dropped - _RESOLUTION // 2  # int16 draws are uniform on [-32768, 32767]
    return torch.where(keep, inputs * (_RESOLUTION / (_RESOLUTION - dropped)), 0.0)


@keras.saving.register_keras_serializable(package="keras_tfm")
class Dropout(keras.layers.Dropout):
    """Zeroes a random fraction `rate` of the elements during training and scales the rest by `1 / (1 - rate)`.

    The same layer as `keras.layers.Dropout` (the arguments, the config, the seed state, the identity at
    inference), with a cheaper mask on the PyTorch backend's CPU: one 16-bit draw per element, four per 64-bit
    random word, instead of one random number each. There the rate is rounded to a multiple of 1 / 65536 and the
    kept elements are scaled by the inverse of the rounded keep probability, so the output's expected value is the
    input. As in Keras, a `seed` gives the layer its own reproducible draws, and without one the draws come from
    the global generator that `keras.utils.set_random_seed` seeds. On TensorFlow, JAX and GPUs, and with a
    `noise_shape`, it is Keras' dropout.

    Args:
        rate: fraction of the elements to drop, in [0, 1].
        noise_shape: shape of the mask, broadcast over the input (as in `keras.layers.Dropout`).
        seed: random seed; the same seed gives the same masks in the same order.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        inputs: a tensor of any shape.
        training: drop only when True.

    Returns:
        A tensor of the shape and dtype of `inputs`. A mask on `inputs` passes through.

    Example:

    >>> drop = Dropout(0.1, seed=0)
    >>> y = drop(np.ones((4, 8, 16), "float32"), training=True)  # about 10% zeros, the rest 1 / 0.9
    """

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        _checks.known_keywords(Dropout, kwargs, _checks.layer_keywords())
        if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 <= rate <= 1:
            raise ValueError(f"`rate` must be a number in [0, 1]. Received: rate={rate!r}")
        super().__init__(rate, noise_shape=noise_shape, seed=seed, **kwargs)

    def call(self, inputs, training=False):
        if (
            training
            and 0 < self.rate < 1
            and self.noise_shape is None
            and keras.backend.backend() == "torch"
            # On a CPU the random numbers are the cost. A GPU draws them fast in Keras' path, and a seed would
            # have to be read back to the host at every call; symbolic ("meta") tensors draw nothing.
            and inputs.device.type == "cpu"
        ):
            return _torch_dropout(inputs, self.rate, None if self.seed is None else self.seed_generator)
        return super().call(inputs, training=training)
