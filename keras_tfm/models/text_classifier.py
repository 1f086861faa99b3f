"""A Transformer text classifier: token ids -> TokenEmbedding -> EncoderBlocks -> pooled state -> logits.

Padding (id 0) is masked everywhere: padded keys get no attention, and pooling reads only real tokens, so a
review's prediction does not depend on how much padding its batch needed.
"""

import keras

from keras_tfm.layers import ClassToken, EncoderBlock, TokenEmbedding
from keras_tfm.layers import _checks
from keras_tfm.models._base import PresetModel
from keras_tfm.models.masked_lm import encoder_layer_names
from keras_tfm.models.presets import TEXT_CLASSIFIER_PRESETS

POOLS = ("cls", "mean")


@keras.saving.register_keras_serializable(package="keras_tfm")
class TextClassifier(PresetModel, keras.Model):
    """Classifies integer token sequences (0 = padding) with a Transformer encoder.

    Layer names: `token_embedding`, `class_token` (with `pool="cls"`), `block_0` ... `block_{depth-1}`,
    `encoder_norm`, `pool`, `head`.

    Args:
        vocab_size: number of token ids (0 is padding).
        max_length: longest sequence the model accepts (the size of the learned position table, or a guard
            for sinusoidal positions).
        num_classes: number of output classes.
        dim, depth, num_heads, mlp_dim: width, number of blocks, heads per block, MLP width.
        pool: `"cls"` (a learned [CLS] token prepended after the embedding) or `"mean"` (masked mean of the
            token states).
        position: `"sinusoidal"`, `"learned"` or `None`.
        dropout: dropout rate in the embedding, the blocks and before the head.
        attention_dropout: dropout on attention weights.
        norm_first: pre-norm (default) or post-norm blocks.
        activation: activation of the head (`None` = logits).
        layer_norm_epsilon: epsilon of the layer norms.
        **kwargs: `keras.Model` arguments.

    Call arguments / shapes:
        token ids `(batch, length)`, `length <= max_length` -> logits `(batch, num_classes)`.

    Example:

    >>> model = TextClassifier.from_preset("tiny", vocab_size=20000, max_length=256, num_classes=2)
    >>> tuple(model(np.array([[12, 7, 99, 0, 0]])).shape)
    (1, 2)
    """

    PRESETS = TEXT_CLASSIFIER_PRESETS

    def __init__(
        self,
        vocab_size,
        max_length,
        num_classes=2,
        dim=128,
        depth=2,
        num_heads=4,
        mlp_dim=256,
        pool="cls",
        position="sinusoidal",
        dropout=0.1,
        attention_dropout=0.0,
        norm_first=True,
        activation=None,
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        self.check_keywords(kwargs)
        kwargs.setdefault("name", "text_classifier")
        _checks.one_of("pool", pool, POOLS)
        _checks.positive_int("depth", depth)
        _checks.positive_int("num_classes", num_classes)
        _checks.positive_int("max_length", max_length)
        ids = keras.Input((None,), dtype="int32", name="token_ids")
        x = TokenEmbedding(
            vocab_size, dim, max_length=max_length, position=position, dropout=dropout, name="token_embedding"
        )(ids)  # (batch, length, dim) + padding mask
        if pool == "cls":
            x = ClassToken(name="class_token")(x)  # (batch, 1 + length, dim), mask extended
        for i in range(depth):
            x = EncoderBlock(
                num_heads,
                mlp_dim,
                dropout=dropout,
                attention_dropout=attention_dropout,
                norm_first=norm_first,
                layer_norm_epsilon=layer_norm_epsilon,
                name=f"block_{i}",
            )(x)
        if norm_first:  # pre-norm leaves the residual stream unnormalised
            x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)
        if pool == "cls":
            # The [CLS] state; the padding mask has done its job and ends here.
            x = keras.layers.Lambda(lambda states: states[:, 0], mask=lambda states, mask: None, name="pool")(x)
        else:
            x = keras.layers.GlobalAveragePooling1D(name="pool")(x)  # masked mean over real tokens
        x = keras.layers.Dropout(dropout, name="head_dropout")(x)
        logits = keras.layers.Dense(num_classes, activation=activation, dtype="float32", name="head")(x)
        super().__init__(ids, logits, **kwargs)

        self.store_arguments(locals())

    def token_inputs(self, x):
        return [("x", x, self.vocab_size)]

    @classmethod
    def from_encoder(cls, encoder, num_classes=2, **kwargs):
        """A classifier whose encoder starts from a pre-trained `MaskedLanguageModel`'s (fine-tuning).

        The encoder's architecture (`vocab_size`, `max_length`, `dim`, `depth`, `num_heads`, `mlp_dim`,
        `position`, `norm_first`, `layer_norm_epsilon`) is taken from `encoder`, and the weights of its
        `token_embedding`, `block_i` and `encoder_norm` layers are copied; the [CLS] token (with `pool="cls"`) and
        the head are new. The two models share no variables: fine-tuning leaves `encoder` as it was.

        Args:
            encoder: a built `MaskedLanguageModel` (e.g. `keras.saving.load_model("encoder.keras")`).
            num_classes: number of output classes.
            **kwargs: the classifier's other arguments (`pool`, `dropout`, `attention_dropout`, `activation`,
                `name`...); the encoder's own arguments cannot be changed here.
        """
        from_encoder = getattr(encoder, "encoder_config", None)
        if from_encoder is None:
            raise TypeError(
                "`encoder` must be a keras_tfm MaskedLanguageModel (or a model with `encoder_config()`). "
                f"Received: {type(encoder).__name__}"
            )
        config = encoder.encoder_config()
        fixed = sorted(set(kwargs) & set(config))
        if fixed:
            raise ValueError(
                f"{fixed} come from the pre-trained encoder and cannot be changed when fine-tuning. "
                f"The encoder has {({name: config[name] for name in fixed})}."
            )
        cls.check_keywords({name: value for name, value in kwargs.items() if name not in cls.argument_names()})
        model = cls(**config, num_classes=num_classes, **kwargs)
        for name in encoder_layer_names(config["depth"], config["norm_first"]):
            model.get_layer(name).set_weights(encoder.get_layer(name).get_weights())
        return model

    def no_weight_decay(self):
        return super().no_weight_decay() + ["position_embeddings", "token"]  # + the [CLS] token
