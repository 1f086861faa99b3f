"""Stochastic depth (Huang et al., 2016), "drop path" in timm: randomly skip a residual branch per sample."""

import keras
from keras import ops

from keras_tfm.layers import _checks


@keras.saving.register_keras_serializable(package="keras_tfm")
class DropPath(keras.layers.Layer):
    """Zeroes a residual branch for a random subset of the samples in a batch during training.

    Used as `x + DropPath(rate)(branch(x))`: with probability `rate` a sample's branch is dropped (the block
    becomes the identity for that sample), otherwise it is scaled by `1 / (1 - rate)` so the expected value
    is unchanged. At inference it is the identity. Deep ViTs train markedly better with it (DeiT uses 0.1).

    Args:
        rate: probability of dropping the branch of a sample, in [0, 1).
        seed: random seed.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        x: `(batch, ...)`, the output of a residual branch.
        training: whether to drop (only in training).

    Returns:
        Tensor of the same shape and dtype. A mask on `x` passes through.

    Example:

    >>> drop = DropPath(0.1)
    >>> y = drop(np.ones((8, 4, 16), "float32"), training=True)  # some samples all 0, others 1/0.9
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        _checks.known_keywords(DropPath, kwargs, _checks.layer_keywords())
        super().__init__(**kwargs)
        _checks.rate("rate", rate)
        self.rate = rate
        self.seed = seed
        self.supports_masking = True
        if rate > 0:
            self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, x, training=None):
        if not training or self.rate == 0:
            return x
        keep = 1.0 - self.rate
        shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)  # one draw per sample
        kept = ops.cast(keras.random.uniform(shape, seed=self.seed_generator) < keep, x.dtype)
        return x * kept / ops.cast(keep, x.dtype)

    def compute_output_shape(self, x_shape):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config
