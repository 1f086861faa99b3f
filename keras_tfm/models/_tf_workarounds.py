"""What the ready models need on the TensorFlow backend only; imported only there (`_base`), so a JAX or
PyTorch user's model code never imports TensorFlow."""

import tensorflow as tf


def build_optimizer_before_tracing(model):
    """Creates the optimizer's slots (Adam's moments...) now, eagerly, before `fit` traces the training step.

    On TensorFlow without a distribution strategy Keras leaves that to the first traced training step, and a
    `tf.function` that creates variables is traced a second time: the whole step, twice (3.4 of the 13.6 seconds
    of `reverse_digits --quick`). Under a strategy, and on JAX and PyTorch, Keras builds the optimizer before
    tracing itself.

    Args:
        model: a compiled (or not yet compiled) `keras.Model`; nothing happens before `compile`, before the model
            is built, or when its optimizer is built already.
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or optimizer.built or not model.built:
        return
    if model._distribute_strategy is None and not tf.distribute.has_strategy():
        optimizer.build(model.trainable_variables)  # what Keras' own symbolic build does under a strategy
