"""What the ready models share, as three separate jobs put together in `PresetModel`:

* `PresetMixin` (`_config`): named sizes, the constructor's arguments kept and returned by `get_config`;
* `CheckedInputs` (`_checked_inputs`): token ids and labels checked before a compiled step sees them;
* `WeightDecayPolicy` (`_weight_decay`): which weights weight decay skips.

On the TensorFlow backend only, `fit` also builds the optimizer before Keras traces the step. On PyTorch only,
the training function (of `fit` and `train_on_batch`) is made with an optimizer whose `clipnorm` clips every
gradient in one call. Both are in `keras_tfm._keras_workarounds`, which imports neither TensorFlow nor PyTorch
unless it is the backend in use. `compile` itself is Keras' own: a model that overrides it is not compiled again
when a `.keras` file loads.
"""

import keras

from keras_tfm import _keras_workarounds
from keras_tfm.metrics import MaskedSparseCategoricalCrossentropy
from keras_tfm.models._checked_inputs import CheckedInputs
from keras_tfm.models._config import PresetMixin
from keras_tfm.models._weight_decay import WeightDecayPolicy

# JAX and PyTorch build the optimizer before tracing; TensorFlow and JAX compile the per-weight clipping into the
# step.
_BUILD_OPTIMIZER_FIRST = keras.backend.backend() == "tensorflow"
_CLIP_IN_ONE_CALL = keras.backend.backend() == "torch"


class PresetModel(PresetMixin, CheckedInputs, WeightDecayPolicy):
    """The mixins every ready model (`ViT`, `TextClassifier`, `TransformerLM`...) is built from; put it before
    `keras.Model`: `class ViT(PresetModel, keras.Model)`.

    Example:

    >>> model = ViT.from_preset("tiny", num_classes=10)  # PresetMixin
    >>> model(np.zeros((1, 32, 32, 3), "uint8")).shape  # CheckedInputs (images: nothing to check)
    (1, 10)
    >>> model.exclude_from_weight_decay(keras.optimizers.AdamW(weight_decay=0.05))  # doctest: +SKIP
    """

    def make_train_function(self, force=False):
        if _CLIP_IN_ONE_CALL:
            _keras_workarounds.clip_gradients_in_one_call(getattr(self, "optimizer", None))
        return super().make_train_function(force=force)

    def fit(self, *args, **kwargs):
        if _BUILD_OPTIMIZER_FIRST:
            _keras_workarounds.build_optimizer_before_tracing(self)
        return super().fit(*args, **kwargs)


def compile_classifier(model, optimizer, label_smoothing, weight_decay, **kwargs):
    """`compile_for_training` of the classifiers (ViT, TextClassifier): sparse labels, their cross-entropy
    (label-smoothed if asked) and accuracy; AdamW by default, with the model's weight-decay exemptions.

    Args:
        model: a classifier with a `head_activation` (None: logits; "softmax": probabilities).
        optimizer: the optimizer, or None for AdamW(1e-3, `weight_decay`, clipping at norm 1).
        label_smoothing: label smoothing of the cross-entropy (0: none).
        weight_decay: the default AdamW's weight decay.
        **kwargs: passed on to `model.compile`.
    """
    from_logits = model.head_activation is None  # a head with "softmax" gives probabilities
    if optimizer is None:
        optimizer = model.exclude_from_weight_decay(
            keras.optimizers.AdamW(1e-3, weight_decay=weight_decay, clipnorm=1.0))
    if label_smoothing:  # Keras' sparse cross-entropy has no label smoothing; ours does (nothing ignored)
        loss = MaskedSparseCategoricalCrossentropy(from_logits=from_logits, label_smoothing=label_smoothing,
                                                   ignore_id=-1, name="crossentropy")
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)
    model.compile(optimizer=optimizer, loss=loss, metrics=[keras.metrics.SparseCategoricalAccuracy("accuracy")],
                  **kwargs)
