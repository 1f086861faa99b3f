"""A BERT-style masked language model (Devlin et al., 2019): the text classifier's encoder, pre-trained on
unlabelled text by filling in hidden words.

Some tokens of each sequence are hidden (`keras_tfm.data.mlm.mask_tokens`: 15% of the real tokens, of those 80%
become [MASK], 10% a random word, 10% stay as they are) and the model predicts the original word at exactly those
positions. The model is a head on a `TextEncoder` (`mlm.encoder`), the same backbone `TextClassifier` classifies
with, so `TextClassifier.from_encoder(mlm)` fine-tunes that very encoder:

    mlm = MaskedLanguageModel.from_preset("small", vocab_size=20000, max_length=256)
    mlm.compile_for_training()
    mlm.fit(masked_lm_dataset(ids, batch_size=64, mask_token_id=2), epochs=3, steps_per_epoch=...)
    classifier = TextClassifier.from_encoder(mlm, num_classes=2)

Only the masked positions are projected onto the vocabulary: the head reads the encoder's states at
`mask_positions`, so the costly `dim x vocab_size` product runs on 15% of the tokens, as in BERT's reference code.
"""

import keras
from keras import ops

from keras_tfm.checks import DataChecks
from keras_tfm.metrics import MaskedAccuracy, MaskedSparseCategoricalCrossentropy
from keras_tfm.models._base import PresetModel
from keras_tfm.presets import TEXT_CLASSIFIER_PRESETS
from keras_tfm.models.text_encoder import TextTask, task_encoder

@keras.saving.register_keras_serializable(package="keras_tfm")
class GatherPositions(keras.layers.Layer):
    """The states at some positions of each sequence: `[states (batch, length, dim), positions (batch, k) ints]`
    -> `(batch, k, dim)`, row `i` taking `states[i, positions[i, j]]`. The padding mask of `states` ends here:
    unused slots (label 0) are ignored by the loss, not masked."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs):
        states, positions = inputs
        return ops.take_along_axis(states, ops.expand_dims(ops.cast(positions, "int32"), -1), axis=1)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shapes):
        states, positions = input_shapes
        return (states[0], positions[1], states[2])


@keras.saving.register_keras_serializable(package="keras_tfm")
class MaskedLanguageModel(TextTask, PresetModel, keras.Model):
    """A masked-LM head on a `TextEncoder`: predicts the tokens hidden at `mask_positions`.

    Layer names: the encoder (its own name; `encoder` when a preset built it: `token_embedding`, `block_0` ...
    `block_{depth-1}`, `encoder_norm`), then the head: `mlm_gather`, `mlm_dense` (dim -> dim, GELU), `mlm_norm`,
    then the encoder's token table transposed (the output is tied to `token_embedding`, as in BERT) and
    `mlm_logits` (float32).

    Args:
        encoder: the `TextEncoder` to pre-train (0 is padding; the [MASK] id is one of its token ids). The model
            uses that very object, so `TextClassifier.from_encoder(mlm)` fine-tunes what was pre-trained.
        **kwargs: `keras.Model` arguments.

    Call arguments / shapes:
        A dict with `"token_ids"` `(batch, length)` ints (hidden tokens already replaced,
        `length <= encoder.max_length`) and `"mask_positions"` `(batch, predictions)` ints (indices into
        `length`) -> logits `(batch, predictions, vocab_size)` (float32, also under mixed precision). Labels are
        the original ids at those positions, with 0 for unused prediction slots, which the loss and accuracy of
        `compile_for_training` ignore.

    Example:

    >>> mlm = MaskedLanguageModel.from_preset("tiny", vocab_size=1000, max_length=32)
    >>> inputs = {"token_ids": np.array([[5, 2, 9, 0]]), "mask_positions": np.array([[1, 0]])}
    >>> tuple(mlm(inputs).shape)
    (1, 2, 1000)
    >>> mlm = MaskedLanguageModel(TextEncoder(vocab_size=1000, max_length=32, dim=32, depth=1, num_heads=2,
    ...                                       mlp_dim=64))
    """

    PRESETS = TEXT_CLASSIFIER_PRESETS  # the same sizes as the classifier it pre-trains

    def __init__(self, encoder=None, **kwargs):
        encoder = task_encoder(type(self), encoder, kwargs)
        self.check_keywords(kwargs)
        kwargs.setdefault("name", "masked_language_model")
        if encoder.class_token:
            raise ValueError("A masked LM's encoder must not prepend a learned [CLS] token (class_token=True): "
                             "`mask_positions` index the text's own tokens. Build it with class_token=False.")
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        mask_positions = keras.Input((None,), dtype="int32", name="mask_positions")
        x = encoder(token_ids)  # (batch, length, dim) + padding mask
        x = x["sequence_output"] if encoder.pooler else x
        # The states at the hidden positions: (batch, predictions, dim).
        x = GatherPositions(name="mlm_gather")([x, mask_positions])
        x = keras.layers.Dense(encoder.dim, activation="gelu", name="mlm_dense")(x)
        x = keras.layers.LayerNormalization(epsilon=encoder.layer_norm_epsilon, name="mlm_norm")(x)
        x = encoder.get_layer("token_embedding")(x, reverse=True)  # (batch, predictions, vocab_size): the table, transposed
        logits = keras.layers.Activation("linear", dtype="float32", name="mlm_logits")(x)
        super().__init__({"token_ids": token_ids, "mask_positions": mask_positions}, logits, **kwargs)

        self.store_arguments(locals())

    @property
    def data_checks(self):
        """Token ids in [0, vocab_size) in `x["token_ids"]` and in `y`, the hidden tokens' ids (0: no prediction)
        (`keras_tfm.checks.DataChecks`)."""
        return DataChecks(inputs=self.vocab_size, target_ids=self.vocab_size)

    def compile_for_training(self, optimizer=None, **kwargs):
        """`compile` with the cross-entropy and accuracy over the masked positions only (labels 0 are ignored).

        Args:
            optimizer: defaults to AdamW(5e-4, weight decay 0.01 except
                `weight_decay_exempt_variables()`, clipping at norm 1).
            **kwargs: passed on to `compile` (e.g. `jit_compile`).
        """
        if optimizer is None:
            optimizer = keras.optimizers.AdamW(5e-4, weight_decay=0.01, clipnorm=1.0)
            self.exclude_from_weight_decay(optimizer)
        self.compile(optimizer=optimizer, loss=MaskedSparseCategoricalCrossentropy(from_logits=True),
                     metrics=[MaskedAccuracy()], **kwargs)
