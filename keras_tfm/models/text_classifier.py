"""A Transformer text classifier: a head on a `TextEncoder` backbone, pooled state -> logits.

    token ids ──> TextEncoder ──> states (batch, length, dim) ──> pool ──> dropout ──> Dense ──> logits

Pooling reads the state of the first token (`"cls"`: a learned [CLS] token the encoder prepends, or the
tokenizer's own [CLS] in a pretrained BERT), the masked mean of the real tokens (`"mean"`), or BERT's pooler
(`"pooler"`: tanh(W · [CLS] state), trained with BERT's next-sentence task). Padding is masked everywhere, so a
review's prediction does not depend on how much padding its batch needed.

The classifier is a task on a backbone (keras-hub's split): it takes a `TextEncoder` and adds the head. Three ways
to get the encoder: a named size (`TextClassifier.from_preset("small", vocab_size=..., max_length=...)` builds
a `TextEncoder` of that size first, trained from scratch), one you built or pre-trained (`TextClassifier(encoder)`,
`from_encoder(mlm)` after masked-LM pre-training) or a pretrained checkpoint (`from_pretrained(folder)`: BERT,
DistilBERT, RoBERTa).
"""

import keras

from keras_tfm.checks import DataChecks
from keras_tfm.layers import _checks
from keras_tfm.layers.dropout import Dropout
from keras_tfm.models._base import PresetModel, compile_classifier
from keras_tfm.models._lora import ParameterEfficient
from keras_tfm.presets import TEXT_CLASSIFIER_PRESETS
from keras_tfm.models.text_encoder import TextEncoder, TextTask, symbolic_inputs, task_encoder
from keras_tfm.presets import TEXT_CLASSIFIER_POOLS as POOLS


@keras.saving.register_keras_serializable(package="keras_tfm")
class TextClassifier(TextTask, ParameterEfficient, PresetModel, keras.Model):
    """Classifies token sequences: a `TextEncoder` backbone and a linear head on its pooled state.

    Layer names: the encoder (its own name; `encoder` when a preset or checkpoint built it, with its layers
    `token_embedding`, `class_token`, `block_0` ..., `encoder_norm`), `pool`, `head_dropout`, `head`.
    `model.encoder` is the backbone object.

    Args:
        encoder: the `TextEncoder` to classify with. The classifier uses that very object (shared weights), so a
            pre-trained encoder fine-tunes in place.
        num_classes: number of output classes.
        pool: `"cls"` (the first state: a learned [CLS] token the encoder prepends with `class_token=True`, or a
            pretrained tokenizer's [CLS]), `"mean"` (masked mean of the token states) or `"pooler"` (the
            encoder's pooler, BERT's). None (default): what the encoder has, `"pooler"` with a pooler, `"cls"`
            with a learned [CLS] token, else `"mean"`, so a classifier never reads the first word of a text
            without asking. A pretrained DistilBERT's or RoBERTa's own [CLS] token: pass `"cls"` (as
            `from_pretrained` does).
        dropout: dropout rate before the head.
        head_activation: activation of the head (`None` = logits, `"softmax"` = probabilities). The old name
            `activation` still works, with a FutureWarning, for one release.
        **kwargs: `keras.Model` arguments.

    Call arguments / shapes:
        token ids `(batch, length)`, `length <= encoder.max_length`, or the encoder's dict (`"token_ids"`,
        `"padding_mask"`, `"segment_ids"`) -> logits `(batch, num_classes)` (float32, also under mixed precision).

    Example:

    >>> model = TextClassifier.from_preset("tiny", vocab_size=20000, max_length=256, num_classes=2)
    >>> tuple(model(np.array([[12, 7, 99, 0, 0]])).shape)
    (1, 2)
    >>> encoder = TextEncoder(vocab_size=1000, max_length=64, dim=32, depth=2, num_heads=4, mlp_dim=64)
    >>> model = TextClassifier(encoder, num_classes=3, pool="mean")
    >>> bert = TextClassifier.from_pretrained("all-MiniLM-L6-v2", num_classes=2)  # doctest: +SKIP
    """

    RENAMED_ARGUMENTS = {"activation": "head_activation"}
    PRESETS = TEXT_CLASSIFIER_PRESETS
    SHARED_WITH_ENCODER = ("dropout", "dtype")  # from_preset's: the head's dropout and the encoder's

    def __init__(self, encoder=None, num_classes=2, pool=None, dropout=0.1, head_activation=None, **kwargs):
        head_activation = _checks.renamed(type(self).__name__, kwargs, "activation", "head_activation",
                                          head_activation, None)
        encoder = task_encoder(type(self), encoder, kwargs)
        self.check_keywords(kwargs)
        kwargs.setdefault("name", "text_classifier")
        if pool is None:  # what the encoder has; never the first word of a text unasked
            pool = "pooler" if encoder.pooler else "cls" if encoder.class_token else "mean"
        _checks.one_of("pool", pool, POOLS)
        _checks.positive_int("num_classes", num_classes)
        if pool == "pooler" and not encoder.pooler:
            raise ValueError(f'pool="pooler" needs an encoder with a pooler (a pretrained BERT); encoder '
                             f'{encoder.name!r} has none (pooler=False). Use pool="cls" or "mean".')

        inputs = symbolic_inputs(encoder.num_segments)
        outputs = encoder(inputs)
        states = outputs["sequence_output"] if encoder.pooler else outputs  # (batch, length, dim) + padding mask
        if pool == "pooler":
            x = keras.layers.Identity(name="pool")(outputs["pooled_output"])  # (batch, dim)
        elif pool == "cls":
            # The first state ([CLS]); the padding mask has done its job and ends here.
            x = keras.layers.Lambda(lambda h: h[:, 0], mask=lambda h, mask: None, name="pool")(states)
        else:
            x = keras.layers.GlobalAveragePooling1D(name="pool")(states)  # masked mean over real tokens
        x = Dropout(dropout, name="head_dropout")(x)
        logits = keras.layers.Dense(num_classes, activation=head_activation, dtype="float32", name="head")(x)
        super().__init__(inputs, logits, **kwargs)
        self.input_spec = None  # token ids alone are accepted too (see `call`)
        self.store_arguments(locals())

    def call(self, inputs, training=None, mask=None):
        return super().call(self.encoder.standardize_inputs(inputs), training=training)

    def compute_output_spec(self, inputs, training=None, mask=None):
        return super().compute_output_spec(self.encoder.standardize_inputs(inputs))

    @classmethod
    def preset_encoder_arguments(cls, task_args):
        return {"class_token": task_args.get("pool") in (None, "cls")}  # presets pool a learned [CLS] by default

    @classmethod
    def from_pretrained(cls, folder, num_classes=2, pool=None, dtype=None, dropout=None, attention_dropout=None,
                        **kwargs):
        """A classifier on a pretrained encoder (`TextEncoder.from_pretrained(folder)`), with a new head.

        Args:
            folder: a HuggingFace checkpoint folder (`config.json` + `model.safetensors`) of a BERT, DistilBERT or
                RoBERTa model.
            num_classes: number of output classes.
            pool: `"pooler"` when the checkpoint has BERT's pooler (as `BertForSequenceClassification`), else
                `"cls"`; or `"mean"`.
            dtype: dtype policy (e.g. `"mixed_bfloat16"`); None = the global policy.
            dropout: dropout in the encoder and before the head; None = the checkpoint's config.
            attention_dropout: dropout on the attention weights; None = the checkpoint's config.
            **kwargs: the head's other arguments (`head_activation`, `name`).
        """
        overrides = {name: value for name, value in (("dropout", dropout), ("attention_dropout", attention_dropout))
                     if value is not None}
        encoder = TextEncoder.from_pretrained(folder, dtype=dtype, name="encoder", **overrides)
        pool = ("pooler" if encoder.pooler else "cls") if pool is None else pool
        if dtype is not None:
            kwargs["dtype"] = dtype
        return cls(encoder, num_classes=num_classes, pool=pool, dropout=encoder.dropout, **kwargs)

    def compile_for_training(self, optimizer=None, label_smoothing=0.0, **kwargs):
        """`compile` for sparse integer labels: cross-entropy and accuracy.

        Args:
            optimizer: defaults to AdamW(1e-3, weight decay 0.01 except `weight_decay_exempt_variables()`,
                clipping at norm 1).
            label_smoothing: label smoothing of the cross-entropy (0 in BERT fine-tuning).
            **kwargs: passed on to `compile` (e.g. `jit_compile`, `steps_per_execution`).
        """
        compile_classifier(self, optimizer, label_smoothing, weight_decay=0.01, **kwargs)

    @property
    def data_checks(self):
        """The encoder's token ids in [0, vocab_size), sparse labels in [0, num_classes) in `y`
        (`keras_tfm.checks.DataChecks`)."""
        return DataChecks(inputs=self.encoder.vocab_size, labels=self.num_classes)

    @classmethod
    def from_encoder(cls, encoder, num_classes=2, **kwargs):
        """A classifier on a pre-trained encoder: a `TextEncoder`, or a `MaskedLanguageModel`'s (fine-tuning).

        The classifier is built around that very encoder object (`TextClassifier(encoder)`): its weights are
        the ones that train, and the masked LM sees them change. Only the head is new.

        Args:
            encoder: a `TextEncoder`, or a model with one as `.encoder` (e.g. a `MaskedLanguageModel` from
                `keras.saving.load_model("encoder.keras")`).
            num_classes: number of output classes.
            **kwargs: the head's arguments (`pool`: by default what the encoder has, as in the constructor;
                "mean" for a masked LM's encoder; `dropout`,
                `head_activation`, `name`); the encoder's own
                arguments (`dim`, `depth`...) cannot be changed here.
        """
        backbone = encoder if isinstance(encoder, TextEncoder) else getattr(encoder, "encoder", None)
        if not isinstance(backbone, TextEncoder):
            raise TypeError("`encoder` must be a keras_tfm TextEncoder, or a model with one as `.encoder` (a "
                            f"MaskedLanguageModel). Received: {type(encoder).__name__}")
        fixed = sorted(set(kwargs) & set(TextEncoder.argument_names()) - set(cls.argument_names()))
        if fixed:
            raise ValueError(f"{fixed} come from the pre-trained encoder and cannot be changed when fine-tuning. "
                             f"The encoder has {({name: getattr(backbone, name) for name in fixed})}.")
        if backbone is not encoder:  # a masked LM's encoder: its tokens have no [CLS], so the mean is the default
            kwargs.setdefault("pool", "mean")
            if kwargs["pool"] == "cls" and not backbone.class_token:
                raise ValueError('pool="cls" reads a [CLS] token, and this masked LM\'s encoder has none (its text '
                                 'has no [CLS] token and it was built with class_token=False): use pool="mean".')
        return cls(backbone, num_classes=num_classes, **kwargs)
