"""The Transformer text encoder, a backbone: token ids in, one state per token out (BERT, Devlin et al. 2019).

    token ids ──> token table (× √dim or not) + positions (+ segment table) ──> [LayerNorm] ──> dropout
              ──> [CLS token] ──> EncoderBlock × depth ──> [final LayerNorm] ──> states (batch, length, dim)
                                                                           └──> [pooler: tanh(W · state₀)]

Every text model of keras_tfm is a head on this one backbone (keras-hub's backbone/task split):
`TextClassifier` reads the states (or the pooler) to classify, `MaskedLanguageModel` reads the hidden positions
to fill in words, and `TextEncoder.from_pretrained` builds it from a HuggingFace BERT, DistilBERT or RoBERTa
folder (`keras_tfm.models.text_weights`). The same switches describe the 2017 paper's encoder and BERT's:

    paper / ours from scratch   scale_embeddings=True, position="sinusoidal", norm_first=True (pre-norm), final_norm
    BERT                        scale_embeddings=False, position="learned", num_segments=2, embedding_norm=True,
                                norm_first=False (post-norm, the paper's layout), pooler=True
    RoBERTa                     BERT with padding_id=1 and position_offset=2 (rows 0 and 1 of its table unused)
"""

import keras
import numpy as np
from keras import ops

from keras_tfm.checks import DataChecks
from keras_tfm.layers import ClassToken, EncoderBlock, TokenEmbedding
from keras_tfm.layers import _checks
from keras_tfm.layers.dropout import Dropout
from keras_tfm.models import text_weights
from keras_tfm.models._base import PresetModel
from keras_tfm.models._lora import ParameterEfficient
from keras_tfm.presets import TEXT_CLASSIFIER_PRESETS, resolve_preset

INPUT_NAMES = ("token_ids", "padding_mask", "segment_ids")


def symbolic_inputs(num_segments):
    """The `keras.Input`s of the encoder's graph (and of a head built on it): token ids, padding mask and, with a
    segment table, segment ids; each `(batch, length)` int32."""
    names = INPUT_NAMES if num_segments else INPUT_NAMES[:2]
    return {name: keras.Input((None,), dtype="int32", name=name) for name in names}


@keras.saving.register_keras_serializable(package="keras_tfm")
class TextEncoder(ParameterEfficient, PresetModel, keras.Model):
    """A stack of `EncoderBlock`s over token embeddings: the backbone of every keras_tfm text model.

    Layer names: `token_embedding`, `segment_embedding` (with `num_segments`), `embedding_norm` (with
    `embedding_norm=True`), `embedding_dropout`, `class_token` (with `class_token=True`), `block_0` ...
    `block_{depth-1}`, `encoder_norm` (with `final_norm`), `pooler` (with `pooler=True`).

    Args:
        vocab_size: number of token ids.
        max_length: longest sequence the encoder reads (the size of a learned position table, less
            `position_offset`), not counting a learned [CLS] token.
        dim, depth, num_heads, mlp_dim: width, number of blocks, heads per block, MLP width.
        position: `"sinusoidal"`, `"learned"` or `None`.
        position_offset: first row of the learned position table (RoBERTa: 2).
        scale_embeddings: multiply the token vectors by √dim (the paper) or not (BERT).
        num_segments: size of the segment (token-type) table; 0 = none. BERT has 2 (sentence A / B).
        embedding_norm: a layer norm on the summed embeddings (BERT).
        class_token: prepend a learned [CLS] vector to every sequence (for a classifier trained from scratch
            whose tokenizer has no [CLS] token of its own).
        norm_first: pre-norm blocks (True) or post-norm (False: the paper and BERT).
        final_norm: a layer norm after the last block; None = `norm_first` (a pre-norm stack leaves its residual
            stream unnormalised).
        mlp_activation: the blocks' MLP activation: `"gelu"` (exact, BERT), `"gelu_tanh"` (the tanh
            approximation, `keras_tfm>gelu_tanh`), `"relu"`... The old name `activation` still works, with a
            FutureWarning, for one release.
        dropout: dropout rate on the embeddings and in the blocks.
        attention_dropout: dropout on the attention weights.
        activation_dropout: dropout after the blocks' MLP activation; None = `dropout`; 0.0 = none, as in BERT
            (what `from_pretrained` builds).
        layer_norm_epsilon: epsilon of every layer norm (BERT: 1e-12).
        padding_id: the id of padding tokens (RoBERTa: 1); they are masked when no `padding_mask` is given.
        pooler: add BERT's pooler, `tanh(dense(state of the first token))`; the output is then a dict.
        **kwargs: `keras.Model` arguments (`name`, `dtype`).

    Call arguments / shapes:
        inputs: token ids `(batch, length)`, or a dict (keras-hub's `BertBackbone` layout) with `"token_ids"`,
            optionally `"padding_mask"` `(batch, length)` (1/True at real tokens; default `token_ids !=
            padding_id`) and `"segment_ids"` `(batch, length)` (default 0).
        Returns the states `(batch, length, dim)` (`1 + length` with `class_token=True`) with their padding
        mask attached (Keras masking: a `GlobalAveragePooling1D` after it averages the real tokens only); with
        `pooler=True` a dict `{"sequence_output": states, "pooled_output": (batch, dim)}`. States at real
        tokens do not depend on the padding.

    Example:

    >>> encoder = TextEncoder(vocab_size=1000, max_length=64, dim=32, depth=2, num_heads=4, mlp_dim=64)
    >>> tuple(encoder(np.array([[5, 8, 13, 0, 0]])).shape)
    (1, 5, 32)
    >>> bert = TextEncoder.from_pretrained("all-MiniLM-L6-v2")  # doctest: +SKIP
    """

    lora_trainable_layers = ()  # a backbone alone: only the LoRA updates learn


    RENAMED_ARGUMENTS = {"activation": "mlp_activation"}
    PRESETS = TEXT_CLASSIFIER_PRESETS

    def __init__(
        self,
        vocab_size,
        max_length,
        dim=128,
        depth=2,
        num_heads=4,
        mlp_dim=256,
        position="sinusoidal",
        position_offset=0,
        scale_embeddings=True,
        num_segments=0,
        embedding_norm=False,
        class_token=False,
        norm_first=True,
        final_norm=None,
        mlp_activation="gelu",
        dropout=0.1,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-6,
        padding_id=0,
        pooler=False,
        activation_dropout=None,
        **kwargs,
    ):
        mlp_activation = _checks.renamed(type(self).__name__, kwargs, "activation", "mlp_activation",
                                         mlp_activation, "gelu")
        self.check_keywords(kwargs)
        kwargs.setdefault("name", "text_encoder")
        _checks.positive_int("depth", depth)
        _checks.positive_int("max_length", max_length)
        if isinstance(num_segments, bool) or not isinstance(num_segments, int) or num_segments < 0:
            raise ValueError(f"`num_segments` must be a non-negative int (0 = no segment table). "
                             f"Received: num_segments={num_segments!r}")
        for flag, value in (("scale_embeddings", scale_embeddings), ("embedding_norm", embedding_norm),
                            ("class_token", class_token), ("norm_first", norm_first), ("pooler", pooler)):
            if not isinstance(value, bool):
                raise TypeError(f"`{flag}` must be True or False. Received: {flag}={value!r}")
        if final_norm is not None and not isinstance(final_norm, bool):
            raise TypeError(f"`final_norm` must be True, False or None (= norm_first). Received: final_norm={final_norm!r}")
        with_final_norm = norm_first if final_norm is None else final_norm

        inputs = symbolic_inputs(num_segments)
        x = TokenEmbedding(
            vocab_size, dim, max_length=max_length, position=position, position_offset=position_offset,
            scale=scale_embeddings, mask_zero=False, padding_id=padding_id, name="token_embedding",
        )(inputs["token_ids"])  # (batch, length, dim)
        if num_segments:
            segments = keras.layers.Embedding(num_segments, dim, name="segment_embedding")(inputs["segment_ids"])
            x = keras.layers.Add(name="add_segments")([x, segments])
        if embedding_norm:
            x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="embedding_norm")(x)
        x = Dropout(dropout, name="embedding_dropout")(x)
        mask = ops.cast(inputs["padding_mask"], "bool")  # (batch, length), True at real tokens
        if class_token:
            x = ClassToken(name="class_token")(x, mask=mask)  # (batch, 1 + length, dim)
            mask = ops.concatenate([ops.ones_like(mask[:, :1]), mask], axis=1)  # (batch, 1 + length)
        for i in range(depth):
            x = EncoderBlock(
                num_heads, mlp_dim, dropout=dropout, attention_dropout=attention_dropout, norm_first=norm_first,
                activation_dropout=activation_dropout,
                layer_norm_epsilon=layer_norm_epsilon, activation=mlp_activation, name=f"block_{i}",
            )(x, mask=mask)
        if with_final_norm:
            x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)
        outputs = x
        if pooler:
            first = keras.layers.Lambda(lambda states: states[:, 0], mask=lambda states, mask: None,
                                        name="first_token")(x)  # (batch, dim): the first token, [CLS]
            outputs = {"sequence_output": x,
                       "pooled_output": keras.layers.Dense(dim, activation="tanh", name="pooler")(first)}
        super().__init__(inputs, outputs, **kwargs)
        # The structure check of the dict inputs is done by `standardize_inputs`, which also takes plain token ids.
        self.input_spec = None

        self.store_arguments(locals())

    # ------------------------------------------------------------------------------------------------------
    # Inputs: token ids alone, or keras-hub's dict.

    def standardize_inputs(self, inputs):
        """The dict the encoder's graph reads, from token ids alone or keras-hub's dict.

        The padding mask is filled in from `padding_id` and the segment ids with zeros when not given. A task
        model on this encoder (`TextClassifier`) calls it on its own inputs.

        Args:
            inputs: `(batch, length)` token ids, or a dict with "token_ids" and optionally "padding_mask" and
                "segment_ids" (all-zero segment ids are dropped when the encoder has no segment table).

        Returns:
            `{"token_ids", "padding_mask"}` (int32 mask), with "segment_ids" when the encoder has segments.
        """
        if isinstance(inputs, dict):
            unknown = sorted(set(inputs) - set(INPUT_NAMES))
            if unknown or "token_ids" not in inputs:
                raise ValueError(f"TextEncoder inputs must be token ids or a dict with 'token_ids' and optionally "
                                 f"'padding_mask' and 'segment_ids'. Received keys: {sorted(inputs)}")
            token_ids = inputs["token_ids"]
            padding_mask = inputs.get("padding_mask")
            segment_ids = inputs.get("segment_ids")
        else:
            token_ids, padding_mask, segment_ids = inputs, None, None
        if segment_ids is not None and not self.num_segments:
            if isinstance(segment_ids, np.ndarray) and not segment_ids.any():
                segment_ids = None  # all zero: nothing to add, as `transformers` ignores them
            else:
                raise ValueError("`segment_ids` were given but this encoder has no segment table (num_segments=0); "
                                 "only all-zero segment ids can be left out.")
        token_ids = ops.convert_to_tensor(token_ids) if not isinstance(token_ids, keras.KerasTensor) else token_ids
        if padding_mask is None:
            padding_mask = ops.not_equal(token_ids, self.padding_id)
        graph_inputs = {"token_ids": token_ids, "padding_mask": ops.cast(padding_mask, "int32")}
        if self.num_segments:
            graph_inputs["segment_ids"] = ops.zeros_like(token_ids) if segment_ids is None else segment_ids
        return graph_inputs

    def call(self, inputs, training=None, mask=None):
        return super().call(self.standardize_inputs(inputs), training=training)

    def compute_output_spec(self, inputs, training=None, mask=None):
        return super().compute_output_spec(self.standardize_inputs(inputs))

    def compute_mask(self, inputs, mask=None):
        """The padding mask of the states, True at real tokens (and at a learned [CLS] token)."""
        padding = ops.cast(self.standardize_inputs(inputs)["padding_mask"], "bool")  # (batch, length)
        if self.class_token:
            padding = ops.concatenate([ops.ones_like(padding[:, :1]), padding], axis=1)
        return {"sequence_output": padding, "pooled_output": None} if self.pooler else padding

    @property
    def data_checks(self):
        """Token ids in [0, vocab_size) in `x` (or `x["token_ids"]`) (`keras_tfm.checks.DataChecks`)."""
        return DataChecks(inputs=self.vocab_size)

    def no_weight_decay(self):
        """A learned position table and [CLS] token (biases and norms are exempt by rule, see
        `WeightDecayPolicy`)."""
        return ("position_embeddings", "token")

    # ------------------------------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, folder, dtype=None, **overrides):
        """A `TextEncoder` built and filled from a HuggingFace checkpoint folder (`config.json` +
        `model.safetensors`) of a BERT, DistilBERT or RoBERTa model; see `keras_tfm.models.text_weights`.

        Args:
            folder: the checkpoint folder (e.g. what `all_minilm_l6_v2.extract_model(folder)` writes).
            dtype: a dtype policy for the encoder (e.g. `"mixed_bfloat16"`); None = the global policy.
            **overrides: arguments that do not change the weights: `dropout`, `attention_dropout`, `name`.
        """
        return text_weights.load_text_encoder(cls, folder, dtype=dtype, **overrides)


# ----------------------------------------------------------------------------------------------------------
# What the text tasks (`TextClassifier`, `MaskedLanguageModel`) share: they take an encoder, and their presets
# build one first.

class TextTask:
    """A task on a `TextEncoder` (keras-hub's backbone/task split); put it before `PresetModel`.

    The task's constructor takes the encoder as `encoder` and checks it with `task_encoder`. This mixin gives it
    `from_preset` (the encoder built first from a named size), the encoder's `vocab_size` and `max_length`, a config
    that holds the encoder's, and the loading of `.keras` files keras_tfm 0.1 wrote (the sizes among the task's
    own arguments).
    """

    SHARED_WITH_ENCODER = ("dtype",)  # `from_preset` arguments that go to the task and the encoder both

    @property
    def vocab_size(self):
        return self.encoder.vocab_size

    @property
    def max_length(self):
        return self.encoder.max_length

    @classmethod
    def preset_encoder_arguments(cls, task_args):
        """Encoder arguments a preset's task implies (the classifier's [CLS] token); none by default."""
        return {}

    @classmethod
    def from_preset(cls, preset, vocab_size, max_length, **kwargs):
        """The task on a new `TextEncoder` of a named size (`PRESETS`), built first and named `encoder`.

        Args:
            preset: a key of `PRESETS` ("tiny", "small", "base").
            vocab_size: number of token ids (0 is padding).
            max_length: longest sequence the model accepts.
            **kwargs: the task's arguments (and `name`) and the encoder's (`dim`, `depth`, `position`...), which
                win over the preset's; `SHARED_WITH_ENCODER` go to both.
        """
        if "encoder" in kwargs:
            raise TypeError(f"{cls.__name__}.from_preset builds the encoder: to use yours, write "
                            f"{cls.__name__}(encoder, ...). Received: encoder={type(kwargs['encoder']).__name__}")
        own = set(cls.argument_names()) | {"name", "trainable"} | set(cls.RENAMED_ARGUMENTS)
        _checks.known_keywords(cls, kwargs, own | set(TextEncoder.argument_names()) | _checks.MODEL_KEYWORDS
                               | set(TextEncoder.RENAMED_ARGUMENTS), signature_of=TextEncoder)
        task_args = {key: value for key, value in kwargs.items() if key in own or key in cls.SHARED_WITH_ENCODER}
        encoder_args = {key: value for key, value in kwargs.items()
                        if key not in own or key in cls.SHARED_WITH_ENCODER}
        encoder_args = {**cls.preset_encoder_arguments(task_args), **encoder_args}
        encoder_args.update(vocab_size=vocab_size, max_length=max_length, name="encoder")
        encoder = TextEncoder(**resolve_preset(cls.PRESETS, preset, cls.__name__, encoder_args))
        return cls(encoder, **task_args)

    def get_config(self):
        return {**super().get_config(), "encoder": keras.saving.serialize_keras_object(self.encoder)}

    @classmethod
    def from_config(cls, config):
        # A 0.1 task built its encoder as its preset does now (the classifier: a [CLS] token for "cls" pooling);
        # then PresetMixin's from_config, which freezes the frozen layers again.
        return super().from_config(cls.config_of_0_1(config, **cls.preset_encoder_arguments(config)))

    @classmethod
    def config_of_0_1(cls, config, class_token=False):
        """A config as keras_tfm 0.1 saved it (the encoder's sizes among the task's arguments), rewritten to take
        an encoder, so `.keras` files of 0.1 load with the same weights (the encoder was already the task's
        sublayer `encoder`). A config without those sizes is returned unchanged.

        Args:
            config: the task's config.
            class_token: whether the 0.1 task built its encoder with a learned [CLS] token.
        """
        config = dict(config)
        names = set(TextEncoder.argument_names()) - set(cls.argument_names())
        sizes = {name: config.pop(name) for name in sorted(names) if name in config}
        if not sizes or config.get("encoder") is not None:  # 0.2, or a 0.1 task built around an encoder
            return config
        built_from = ("vocab_size", "max_length", "dim", "depth", "num_heads", "mlp_dim", "position", "norm_first",
                      "dropout", "attention_dropout", "layer_norm_epsilon")  # what a 0.1 task passed its encoder
        arguments = {**sizes, "dropout": config.get("dropout", sizes.get("dropout"))}
        encoder = TextEncoder(**{name: arguments[name] for name in built_from if arguments.get(name) is not None},
                              class_token=class_token, name="encoder")
        return {**config, "encoder": encoder}

    def no_weight_decay(self):
        return self.encoder.no_weight_decay()


def task_encoder(task, encoder, kwargs):
    """The `TextEncoder` a text task was given, checked: a dict (from a saved config) is deserialized, anything
    else than an encoder is a TypeError, and the encoder's own sizes among the task's keywords are a TypeError
    that shows how to build the encoder first (the tasks took sizes in keras_tfm 0.1).

    Args:
        task: the task's class.
        encoder: what the task received as `encoder`.
        kwargs: the task's other keyword arguments.
    """
    if isinstance(encoder, dict):
        encoder = keras.saving.deserialize_keras_object(encoder)
    sizes = sorted(set(kwargs) & set(TextEncoder.argument_names()))
    if sizes or encoder is None:
        raise TypeError(
            f"{task.__name__} takes a TextEncoder (keras_tfm 0.2; sizes were its arguments in 0.1). Build the "
            f"encoder first: {task.__name__}(TextEncoder(vocab_size=..., max_length=..., dim=..., ...), ...), "
            f"or {task.__name__}.from_preset(\"small\", vocab_size=..., max_length=...). Received: encoder="
            f"{type(encoder).__name__} and the encoder arguments {sizes}")
    if not isinstance(encoder, TextEncoder):
        raise TypeError(f"`encoder` must be a keras_tfm TextEncoder. Received: {type(encoder).__name__}")
    return encoder
