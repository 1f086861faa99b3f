"""Multi-worker training with Keras 3 on TensorFlow: `tf.distribute.MultiWorkerMirroredStrategy`, repaired.

Keras 3's TensorFlow trainer asks the strategy for two reductions that the original rejects as soon as the
cluster has more than one worker, so `model.fit` under `tf.distribute.MultiWorkerMirroredStrategy()` fails on
its first step. `MultiWorkerMirroredStrategy` here is the same strategy with those two reductions made to work;
use it wherever you would use TensorFlow's (the recipes' `--distribute multiworker` does).

This module imports TensorFlow (the strategy is TensorFlow's); `import keras_tfm` does not import it.
"""

import tensorflow as tf


class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """`tf.distribute.MultiWorkerMirroredStrategy` with the two reductions Keras 3's TensorFlow trainer asks of it.

    * `fit` reduces a whole `(inputs, targets)` batch (only to learn its shapes); the original reduces a single
      value, and fails with "Attempt to convert a value (PerReplica:{...}) ... to a Tensor";
    * every step averages the logged loss and metrics with `axis=0`, which a scalar does not have ("Invalid
      reduction dimension 0 for input with 0 dimensions"); a scalar is averaged over the replicas only.

    `reduce` therefore reduces each part of a nested structure on its own, and a scalar part without `axis`.
    Everything else, including the constructor's arguments (the cluster comes from the `TF_CONFIG` environment
    variable by default), is TensorFlow's.

    Example:

    >>> strategy = MultiWorkerMirroredStrategy()  # doctest: +SKIP  (every worker, with its own TF_CONFIG)
    >>> with strategy.scope():  # doctest: +SKIP
    ...     model = keras_tfm.ViT.from_preset("tiny", num_classes=10)
    ...     model.compile(optimizer="adamw", loss="sparse_categorical_crossentropy")
    >>> model.fit(dataset, epochs=10)  # doctest: +SKIP
    """

    def reduce(self, reduce_op, value, axis=None):
        """The original `reduce`, applied to each part of `value` (a tensor or a nested structure of them); a
        scalar part is reduced over the replicas alone, whatever `axis` says.

        Args:
            reduce_op: a `tf.distribute.ReduceOp` ("SUM", "MEAN").
            value: per-replica values, or a nested structure (tuple, dict) of them.
            axis: the axis to reduce over as well, within each replica's value; ignored for scalars.

        Returns:
            The reduced value, with the structure of `value`.
        """
        reduce_one = super().reduce

        def one(part):
            rank = self.experimental_local_results(part)[0].shape.rank
            return reduce_one(reduce_op, part, axis=None if rank == 0 else axis)

        return tf.nest.map_structure(one, value)
