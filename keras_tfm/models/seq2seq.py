"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017), with fast generation.

Training (teacher forcing): the decoder sees the whole target shifted right and predicts every next token at
once; causal masking keeps position t from seeing the answer.

    model.fit((source_ids, target_ids[:, :-1]), target_ids[:, 1:])

Generation: the encoder runs once; then one token at a time, the decoder embeds only the newest token and
attends over a key/value cache of the earlier ones, inside a compiled loop.
"""

import keras
from keras import ops

from keras_tfm.checks import DataChecks
from keras_tfm.layers import DecoderBlock, EncoderBlock, TokenEmbedding
from keras_tfm.layers import _checks
from keras_tfm.metrics import MaskedAccuracy, MaskedSparseCategoricalCrossentropy
from keras_tfm.models import generation
from keras_tfm.models._base import PresetModel
from keras_tfm.presets import SEQ2SEQ_PRESETS



@keras.saving.register_keras_serializable(package="keras_tfm")
class Seq2SeqTransformer(generation.GenerationMixin, PresetModel, keras.Model):
    """Encoder-decoder Transformer on token ids (0 = padding in both languages).

    Layer names: `source_embedding`, `encoder_block_{i}`, `encoder_norm` (pre-norm), `target_embedding`,
    `decoder_block_{i}`, `decoder_norm` (pre-norm), `output_projection` (unless `tie_embeddings`), `logits`.

    Padding is ignored by the loss and metrics when you compile with
    `keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)` and
    `keras_tfm.metrics.MaskedAccuracy()` (see `compile_for_training`).

    Args:
        source_vocab_size, target_vocab_size: vocabulary sizes (id 0 = padding).
        dim: model width `d_model`.
        encoder_depth, decoder_depth: number of encoder / decoder blocks.
        num_heads: attention heads per block.
        mlp_dim: feed-forward width.
        max_length: longest source or target sequence (and the most tokens `generate` can produce).
        norm_first: pre-norm (default) or the paper's post-norm.
        tie_embeddings: share the target token table with the output projection (as in the paper).
        position: `"sinusoidal"` (the paper), `"learned"` or `None` (no positions: a bag of tokens).
        position_combine: `"add"` (the paper) or `"concat"` (see `TokenEmbedding`).
        attention_scale: factor on every attention's logits; None = the paper's `1/√d_k`.
        dropout: dropout rate (embeddings, blocks).
        attention_dropout: dropout on attention weights.
        mlp_activation: activation of the blocks' feed-forward network (the MLP): `"relu"` in the paper,
            `"gelu"` default here. The old name `activation` still works, with a FutureWarning, for one release.
        layer_norm_epsilon: epsilon of the layer norms.
        **kwargs: `keras.Model` arguments.

    Call arguments / shapes:
        `(source_ids, target_ids)`: `(batch, source_len)` and `(batch, target_len)` ints ->
        logits `(batch, target_len, target_vocab_size)` (float32), masked where `target_ids` is padding.

    Example:

    >>> model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=13, target_vocab_size=13, max_length=12)
    >>> model.compile_for_training()
    >>> model.fit((source, target[:, :-1]), target[:, 1:], epochs=5)  # doctest: +SKIP
    >>> model.generate(source, max_new_tokens=12, start_id=1, end_id=2)  # doctest: +SKIP
    """

    RENAMED_ARGUMENTS = {"activation": "mlp_activation"}
    PRESETS = SEQ2SEQ_PRESETS

    def __init__(
        self,
        source_vocab_size,
        target_vocab_size,
        dim=256,
        encoder_depth=3,
        decoder_depth=3,
        num_heads=8,
        mlp_dim=512,
        max_length=128,
        norm_first=True,
        tie_embeddings=False,
        position="sinusoidal",
        position_combine="add",
        attention_scale=None,
        dropout=0.1,
        attention_dropout=0.0,
        mlp_activation="gelu",
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        mlp_activation = _checks.renamed(type(self).__name__, kwargs, "activation", "mlp_activation",
                                         mlp_activation, "gelu")
        self.check_keywords(kwargs)
        kwargs.setdefault("name", "seq2seq_transformer")
        _checks.positive_int("encoder_depth", encoder_depth)
        _checks.positive_int("decoder_depth", decoder_depth)
        _checks.positive_int("max_length", max_length)
        block_args = dict(
            dropout=dropout,
            attention_dropout=attention_dropout,
            norm_first=norm_first,
            layer_norm_epsilon=layer_norm_epsilon,
            activation=mlp_activation,
            attention_scale=attention_scale,
        )
        embedding_args = dict(max_length=max_length, position=position, combine=position_combine, dropout=dropout)

        source = keras.Input((None,), dtype="int32", name="source_ids")
        target = keras.Input((None,), dtype="int32", name="target_ids")
        x = TokenEmbedding(source_vocab_size, dim, name="source_embedding", **embedding_args)(source)
        for i in range(encoder_depth):
            x = EncoderBlock(num_heads, mlp_dim, name=f"encoder_block_{i}", **block_args)(x)
        if norm_first:
            x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)
        memory = x  # (batch, source_len, dim), carries the source padding mask

        target_embedding = TokenEmbedding(target_vocab_size, dim, name="target_embedding", **embedding_args)
        y = target_embedding(target)
        for i in range(decoder_depth):
            y = DecoderBlock(num_heads, mlp_dim, name=f"decoder_block_{i}", **block_args)(y, memory)
        if norm_first:
            y = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="decoder_norm")(y)
        if tie_embeddings:
            y = target_embedding(y, reverse=True)  # (batch, target_len, vocab), shares the token table
        else:
            y = keras.layers.Dense(target_vocab_size, name="output_projection")(y)
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(y)  # float32 under mixed precision
        super().__init__((source, target), logits, **kwargs)

        self.store_arguments(locals())
        self._generate_functions = {}

    def no_weight_decay(self):
        """A learned position table (biases and norms are exempt by rule, see `WeightDecayPolicy`)."""
        return ("position_embeddings",)

    @property
    def data_checks(self):
        """Source ids in [0, source_vocab_size), target ids (`x[1]` and `y`) in [0, target_vocab_size)
        (`keras_tfm.checks.DataChecks`)."""
        return DataChecks(inputs={"source_ids": self.source_vocab_size, "target_ids": self.target_vocab_size},
                          target_ids=self.target_vocab_size)

    def compile_for_training(self, optimizer=None, label_smoothing=0.0, **kwargs):
        """`compile` with a loss and accuracy that ignore padding (target id 0).

        Args:
            optimizer: defaults to Adam(1e-3) with gradient clipping at norm 1.
            label_smoothing: label smoothing of the cross-entropy (0.1 in the paper).
            **kwargs: passed on to `compile` (e.g. `jit_compile`, `steps_per_execution`).
        """
        self.compile(
            optimizer=optimizer or keras.optimizers.Adam(1e-3, clipnorm=1.0),
            loss=MaskedSparseCategoricalCrossentropy(from_logits=True, label_smoothing=label_smoothing),
            metrics=[MaskedAccuracy()],
            **kwargs,
        )

    # ------------------------------------------------------------------------------------------------------
    # Generation.

    def encode(self, source_ids, training=False):
        """Runs the encoder: `(batch, source_len)` ids -> `(batch, source_len, dim)` memory."""
        x = self.get_layer("source_embedding")(source_ids, training=training)
        padding = ops.not_equal(source_ids, 0)
        for i in range(self.encoder_depth):
            x = self.get_layer(f"encoder_block_{i}")(x, mask=padding, training=training)
        if self.norm_first:
            x = self.get_layer("encoder_norm")(x)
        return x

    def _logits(self, y):
        if self.norm_first:
            y = self.get_layer("decoder_norm")(y)
        if self.tie_embeddings:
            y = self.get_layer("target_embedding")(y, reverse=True)
        else:
            y = self.get_layer("output_projection")(y)
        return ops.cast(y, "float32")  # (batch, length, vocab)

    def step(self, token_ids, index, cache):
        """One decoding step for `keras_tfm.models.generation`: the decoder embeds `token_ids[:, index]` at
        position `index`, attends over its key/value cache and returns the next token's logits.

        Args:
            token_ids: `(rows, length)` int32 target buffer (start token first).
            index: scalar int, the position of the newest token.
            cache: `{"source_mask": (rows, source_len), "blocks": [DecoderBlock caches]}`.

        Returns:
            `(logits, cache)`: `(rows, target_vocab_size)` float32 and the cache with position `index` filled.
        """
        current = ops.expand_dims(ops.take(token_ids, index, axis=1), 1)  # (rows, 1)
        y = self.get_layer("target_embedding")(current, start_position=index)  # (rows, 1, dim)
        blocks = []
        for i, block_cache in enumerate(cache["blocks"]):
            y, block_cache = self.get_layer(f"decoder_block_{i}")(
                y, mask=ops.ones_like(current, dtype="bool"), context_mask=cache["source_mask"], cache=block_cache,
                cache_index=index,
            )
            blocks.append(block_cache)
        return self._logits(y)[:, 0, :], {**cache, "blocks": blocks}  # (rows, vocab)

    def _step_without_cache(self, token_ids, index, cache):
        """The reference for `step`: re-runs the decoder over the whole buffer and reads position `index`."""
        buffer = token_ids[:, :-1]  # (rows, max_length): the last slot is only ever an output
        y = self.get_layer("target_embedding")(buffer)
        padding = ops.not_equal(buffer, 0)
        for i in range(self.decoder_depth):
            y = self.get_layer(f"decoder_block_{i}")(
                y, cache["memory"], mask=padding, context_mask=cache["source_mask"]
            )
        return ops.take(self._logits(y), index, axis=1), cache  # (rows, vocab)

    def generate(
        self,
        source_ids,
        max_new_tokens=None,
        start_id=1,
        end_id=2,
        strategy="greedy",
        num_beams=4,
        k=10,
        p=0.9,
        temperature=1.0,
        seed=None,
        length_penalty=1.0,
        use_cache=True,
        return_scores=False,
        **kwargs,
    ):
        """Generates target token ids for a batch of sources.

        The decoding loop is compiled once per setting (strategy, lengths, tokens, beams, k, cache; not per
        temperature, p or length penalty): XLA on TensorFlow, `jax.jit` on JAX; on PyTorch it runs eagerly (a
        Python loop under `torch.no_grad()`, see `keras_tfm.models.generation.compile_loop`).

        Args:
            source_ids: `(batch, source_len)` int ids (0 = padding).
            max_new_tokens: number of tokens to generate (at most the model's `max_length`; default: that), as
                `TransformerLM.generate` names it. The old name `max_length` still works, with a FutureWarning, for
                one release.
            start_id: the token the decoder starts from (not included in the output).
            end_id: the end-of-sequence token; a row stops after producing it and is 0-padded afterwards.
            strategy: `"greedy"`, `"beam"`, `"top_k"` or `"top_p"`.
            num_beams: beams for `"beam"` (1 = greedy).
            k: candidates for `"top_k"`.
            p: probability mass for `"top_p"`, in (0, 1].
            temperature: logits are divided by it before sampling (and before beam scoring).
            seed: int seed for `"top_k"`/`"top_p"`; the same seed gives the same samples.
            length_penalty: beam hypotheses are ranked by `sum log p / length ** length_penalty` (0 = none).
            use_cache: use the key/value cache (True, fast) or re-run the decoder over the prefix at every step
                (False: the reference the cache is checked against; greedy and sampling only).
            return_scores: also return `(batch,)` scores: the summed log-probability of each output (length
                normalised for beam search).

        Returns:
            `(batch, max_new_tokens)` int32 token ids (the tokens after `start_id`, `end_id` included, zeros after
            it), as a NumPy array; with `return_scores`, `(tokens, scores)`.
        """
        max_new_tokens = _checks.renamed("Seq2SeqTransformer.generate", kwargs, "max_length", "max_new_tokens",
                                         max_new_tokens)
        _checks.known_keywords(Seq2SeqTransformer.generate, kwargs, ())
        max_new_tokens = self.max_length if max_new_tokens is None else max_new_tokens
        self.check_decoding(strategy, num_beams, k, p, temperature, use_cache)
        _checks.positive_int("max_new_tokens", max_new_tokens)
        if max_new_tokens > self.max_length:
            raise ValueError(
                f"`max_new_tokens` ({max_new_tokens}) must not exceed the model's max_length ({self.max_length})."
            )
        source_ids = self.id_batch("source_ids", source_ids, self.source_vocab_size)
        if source_ids.shape[1] > self.max_length:
            raise ValueError(
                f"`source_ids` is longer ({source_ids.shape[1]}) than the model's max_length ({self.max_length})."
            )
        self.check_token("start_id", start_id, self.target_vocab_size)
        self.check_token("end_id", end_id, self.target_vocab_size)

        # One compiled loop per setting that shapes the program. Temperature, p and the length penalty are numbers
        # the loop reads when it runs (`generation.numbers`), so another value compiles nothing.
        settings = dict(strategy=strategy, max_length=max_new_tokens, start_id=start_id, end_id=end_id,
                        num_beams=num_beams, k=k, use_cache=use_cache)
        uniform = keras.random.uniform((max_new_tokens, source_ids.shape[0]), seed=seed)  # one draw per step, row
        return self.run_loop(settings, (ops.convert_to_tensor(source_ids.astype("int32")), uniform,
                                        generation.numbers(temperature, p, length_penalty)), return_scores)

    def _decode(self, source, uniform, numbers, settings):
        """The whole generation for one `settings` dict (see `generate`) and the `numbers` tensor of
        `generation.numbers`: encode once, then a loop of `keras_tfm.models.generation`."""
        temperature, p, length_penalty = numbers[0], numbers[1], numbers[2]
        batch, max_length = ops.shape(source)[0], settings["max_length"]
        memory = self.encode(source)  # (batch, source_len, dim)
        cache = {"source_mask": ops.not_equal(source, 0)}  # (batch, source_len)
        if settings["use_cache"]:
            cache["blocks"] = [self.get_layer(f"decoder_block_{i}").build_cache(batch, max_length, context=memory)
                               for i in range(self.decoder_depth)]
            step = self.step
        else:
            cache["memory"] = memory
            step = self._step_without_cache
        # The buffer: the start token, then room for `max_length` generated tokens.
        token_ids = ops.concatenate(
            [ops.full((batch, 1), settings["start_id"], dtype="int32"), ops.zeros((batch, max_length), dtype="int32")],
            axis=1,
        )
        common = dict(end_id=settings["end_id"], temperature=temperature)
        if settings["strategy"] == "beam":
            token_ids, scores = generation.beam_search(step, token_ids, cache, 0, settings["num_beams"],
                                                       length_penalty=length_penalty, **common)
        else:
            token_ids, scores = generation.sample(step, token_ids, cache, 0, settings["strategy"], uniform=uniform,
                                                  k=settings["k"], p=p, **common)
        return token_ids[:, 1:], scores  # (batch, max_length), (batch,)
