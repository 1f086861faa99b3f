"""Loss and accuracy for sequence outputs that ignore padding (target id 0).

With teacher forcing, `model.fit((source, target[:, :-1]), target[:, 1:])`, the labels are padded with 0 after
each sentence's end token. Those positions are not predictions the model should be graded on: both the loss and
the accuracy below average over real target tokens only, however much padding a batch has.
"""

import keras
from keras import ops

# Only a `tf.distribute` strategy splits a batch over replicas whose gradients are summed (see `_replica_share`).
# On JAX and PyTorch the loss is the mean over the whole batch as it is, so TensorFlow is imported only on its
# own backend.
if keras.backend.backend() == "tensorflow":
    import tensorflow as tf

    def _replicas_in_sync():
        return tf.distribute.get_strategy().num_replicas_in_sync
else:
    def _replicas_in_sync():
        return 1


def _token_weights(y_true, ignore_id, sample_weight=None):
    """`(batch, length)` float weights: 0 at padding labels, times `sample_weight` (per sample or per token)."""
    weights = ops.cast(ops.not_equal(y_true, ignore_id), "float32")
    if sample_weight is not None:
        sample_weight = ops.cast(sample_weight, "float32")
        weights = weights * (sample_weight[:, None] if len(sample_weight.shape) == 1 else sample_weight)
    return weights


def _replica_share(loss):
    """`loss` divided by the replicas of a `tf.distribute` strategy, as Keras' own losses are: the replicas'
    gradients are summed, so each must be the gradient of its share of the mean (and Keras multiplies the
    logged loss back). Unchanged without a strategy and on the other backends."""
    replicas = _replicas_in_sync()
    return loss / replicas if replicas > 1 else loss


def _check_shifted(y_true, y_pred):
    """Labels and predictions must be equally long; off by one almost always means unshifted targets."""
    true_length, pred_length = _static(y_true.shape, 1), _static(y_pred.shape, 1)
    if true_length is None or pred_length is None or true_length == pred_length:
        return
    hint = ""
    if abs(true_length - pred_length) == 1:
        hint = (" Off by one: shift the targets for teacher forcing, "
                "`model.fit((source, target[:, :-1]), target[:, 1:])` (the decoder reads tokens 0..n-1 and "
                "predicts tokens 1..n).")
    raise ValueError(
        f"The labels have {true_length} positions but the predictions {pred_length} "
        f"(labels shape {tuple(y_true.shape)}, predictions shape {tuple(y_pred.shape)}).{hint}"
    )


def _static(shape, axis):
    return shape[axis] if len(shape) > axis and isinstance(shape[axis], int) else None


@keras.saving.register_keras_serializable(package="keras_tfm")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Token-level cross-entropy averaged over the positions whose label is not `ignore_id`.

    Args:
        from_logits: whether predictions are logits (True) or probabilities.
        label_smoothing: spreads this much probability mass uniformly over the vocabulary (0.1 in the paper).
        ignore_id: the padding label.
        name: loss name.

    Shapes: `y_true` `(batch, length)` ints, `y_pred` `(batch, length, vocab)` -> scalar. A `sample_weight` of
    shape `(batch,)` or `(batch, length)` multiplies the per-token losses and the count alike.
    """

    def __init__(self, from_logits=True, label_smoothing=0.0, ignore_id=0, name="masked_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.from_logits = from_logits
        self.label_smoothing = label_smoothing
        self.ignore_id = ignore_id

    def __call__(self, y_true, y_pred, sample_weight=None):
        # The mask comes from the labels here, so Keras' own mask handling (from y_pred) is bypassed; its
        # scaling for a distribution strategy is done here instead.
        return _replica_share(self.call(y_true, y_pred, sample_weight))

    def call(self, y_true, y_pred, sample_weight=None):
        _check_shifted(y_true, y_pred)
        y_true = ops.cast(y_true, "int32")
        y_pred = ops.cast(y_pred, "float32")  # (batch, length, vocab)
        # Cross-entropy against the smoothed target (1 - ε)·onehot + ε/V, written without the one-hot:
        #   loss = (1 - ε)·(-log p[label]) + ε·(-mean_v log p[v])
        # The first term is the fused sparse cross-entropy kernel; the second is logsumexp - mean(logits).
        labels = ops.where(y_true < 0, 0, y_true)  # a negative ignore id is weighted out below anyway
        losses = ops.sparse_categorical_crossentropy(labels, y_pred, from_logits=self.from_logits)  # (batch, length)
        if self.label_smoothing:
            if self.from_logits:
                mean_log_p = ops.mean(y_pred, axis=-1) - ops.logsumexp(y_pred, axis=-1)
            else:
                probabilities = y_pred / ops.sum(y_pred, axis=-1, keepdims=True)
                mean_log_p = ops.mean(ops.log(ops.clip(probabilities, 1e-7, 1.0)), axis=-1)
            losses = (1.0 - self.label_smoothing) * losses - self.label_smoothing * mean_log_p
        weights = _token_weights(y_true, self.ignore_id, sample_weight)
        return ops.sum(losses * weights) / ops.maximum(ops.sum(weights), 1.0)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"from_logits": self.from_logits, "label_smoothing": self.label_smoothing, "ignore_id": self.ignore_id}
        )
        config.pop("reduction", None)
        return config


@keras.saving.register_keras_serializable(package="keras_tfm")
class MaskedAccuracy(keras.metrics.Metric):
    """Fraction of non-padding target tokens whose arg-max prediction is right.

    Args:
        ignore_id: the padding label.
        name: metric name.
    """

    def __init__(self, ignore_id=0, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.ignore_id = ignore_id
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        _check_shifted(y_true, y_pred)
        y_true = ops.cast(y_true, "int32")
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        weights = _token_weights(y_true, self.ignore_id, sample_weight)
        self.correct.assign_add(ops.sum(ops.cast(ops.equal(predicted, y_true), "float32") * weights))
        self.count.assign_add(ops.sum(weights))

    def result(self):
        return self.correct / ops.maximum(self.count, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "ignore_id": self.ignore_id}
