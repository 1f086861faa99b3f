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

from keras_tfm.layers import ClassToken, EncoderBlock, TokenEmbedding
from keras_tfm.layers import _checks
from keras_tfm.layers.dropout import Dropout
from keras_tfm.models import text_weights
from keras_tfm.models._base import PresetModel
from keras_tfm.models._lora import ParameterEfficient
from keras_tfm.models.presets import TEXT_CLASSIFIER_PRESETS

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
            DeprecationWarning, for one release.
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
        mlp_activation = self.renamed_argument(kwargs, "activation", mlp_activation, "gelu")
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

    def token_inputs(self, x):
        ids = x.get("token_ids") if isinstance(x, dict) else x
        return [("token_ids" if isinstance(x, dict) else "x", ids, self.vocab_size)]

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
