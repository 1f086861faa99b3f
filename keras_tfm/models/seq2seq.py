"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017), with fast generation.

Training (teacher forcing): the decoder sees the whole target shifted right and predicts every next token at
once; causal masking keeps position t from seeing the answer.

    model.fit((source_ids, target_ids[:, :-1]), target_ids[:, 1:])

Generation: the encoder runs once; then one token at a time, the decoder embeds only the newest token and
attends over a key/value cache of the earlier ones, inside a compiled loop.
"""

import keras
import numpy as np
from keras import ops

from keras_tfm.layers import DecoderBlock, EncoderBlock, TokenEmbedding
from keras_tfm.layers import _checks
from keras_tfm.metrics import MaskedAccuracy, MaskedSparseCategoricalCrossentropy
from keras_tfm.models import generation
from keras_tfm.models._base import PresetModel
from keras_tfm.models.presets import SEQ2SEQ_PRESETS

_NEG = -1e9  # log-probability of impossible beam extensions (finite, so no inf - inf = NaN)


@keras.saving.register_keras_serializable(package="keras_tfm")
class Seq2SeqTransformer(PresetModel, keras.Model):
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
        activation: feed-forward activation (`"relu"` in the paper, `"gelu"` default here).
        layer_norm_epsilon: epsilon of the layer norms.
        **kwargs: `keras.Model` arguments.

    Call arguments / shapes:
        `(source_ids, target_ids)`: `(batch, source_len)` and `(batch, target_len)` ints ->
        logits `(batch, target_len, target_vocab_size)` (float32), masked where `target_ids` is padding.

    Example:

    >>> model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=13, target_vocab_size=13, max_length=12)
    >>> model.compile_for_training()
    >>> model.fit((source, target[:, :-1]), target[:, 1:], epochs=5)  # doctest: +SKIP
    >>> model.generate(source, max_length=12, start_id=1, end_id=2)  # doctest: +SKIP
    """

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
        activation="gelu",
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
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
            activation=activation,
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

    def token_inputs(self, x):
        if isinstance(x, (tuple, list)) and len(x) == 2:
            return [("source_ids", x[0], self.source_vocab_size), ("target_ids", x[1], self.target_vocab_size)]
        return []

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

    def _decode_step_cached(self, token_ids, position, caches, source_mask):
        """One new token per row through the decoder, reading and extending the key/value caches."""
        y = self.get_layer("target_embedding")(token_ids, start_position=position)  # (rows, 1, dim)
        new_caches = []
        for i, cache in enumerate(caches):
            y, cache = self.get_layer(f"decoder_block_{i}")(
                y, mask=ops.ones_like(token_ids, dtype="bool"), context_mask=source_mask, cache=cache,
                cache_index=position,
            )
            new_caches.append(cache)
        return self._logits(y)[:, 0, :], new_caches  # (rows, vocab)

    def _decode_step_full(self, target_buffer, position, memory, source_mask):
        """Without a cache: re-run the decoder over the whole buffer and read position `position`."""
        y = self.get_layer("target_embedding")(target_buffer)
        padding = ops.not_equal(target_buffer, 0)
        for i in range(self.decoder_depth):
            y = self.get_layer(f"decoder_block_{i}")(y, memory, mask=padding, context_mask=source_mask)
        logits = self._logits(y)  # (rows, buffer_len, vocab)
        return ops.take(logits, position, axis=1)  # (rows, vocab)

    def generate(
        self,
        source_ids,
        max_length=None,
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
    ):
        """Generates target token ids for a batch of sources.

        Args:
            source_ids: `(batch, source_len)` int ids (0 = padding).
            max_length: number of tokens to generate (at most the model's `max_length`; default: that).
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
            `(batch, max_length)` int32 token ids (the tokens after `start_id`, `end_id` included, zeros after
            it), as a NumPy array; with `return_scores`, `(tokens, scores)`.
        """
        max_length = self.max_length if max_length is None else max_length
        _checks.one_of("strategy", strategy, generation.STRATEGIES)
        _checks.positive_int("max_length", max_length)
        if max_length > self.max_length:
            raise ValueError(
                f"`max_length` ({max_length}) must not exceed the model's max_length ({self.max_length})."
            )
        _checks.positive_int("num_beams", num_beams)
        _checks.positive_int("k", k)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
            raise ValueError(f"`p` must be a number in (0, 1]. Received: p={p!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
            raise ValueError(f"`temperature` must be a positive number. Received: temperature={temperature!r}")
        if strategy == "beam" and not use_cache:
            raise ValueError("Beam search always uses the cache: use_cache=False is for greedy and sampling.")
        source_ids = np.asarray(ops.convert_to_numpy(source_ids))
        if source_ids.ndim != 2 or not np.issubdtype(source_ids.dtype, np.integer):
            raise ValueError(
                "`source_ids` must be an int array of shape (batch, source_len). "
                f"Received: shape {source_ids.shape}, dtype {source_ids.dtype}"
            )
        _checks.token_ids("source_ids", source_ids, self.source_vocab_size)
        if source_ids.shape[1] > self.max_length:
            raise ValueError(
                f"`source_ids` is longer ({source_ids.shape[1]}) than the model's max_length ({self.max_length})."
            )
        for name, token in (("start_id", start_id), ("end_id", end_id)):
            if not 0 < token < self.target_vocab_size:
                raise ValueError(
                    f"`{name}` must be a token id in [1, {self.target_vocab_size}). Received: {name}={token}"
                )

        key = (strategy, max_length, start_id, end_id, num_beams, k, float(p), float(temperature),
               float(length_penalty), use_cache)
        if key not in self._generate_functions:
            run = self._beam_search if strategy == "beam" else self._sample

            def loop(source, uniform):
                return run(source, uniform, *key)

            self._generate_functions[key] = generation.compile_loop(loop, self.variables)
        uniform = keras.random.uniform((max_length, source_ids.shape[0]), seed=seed)  # one draw per step, row
        tokens, scores = self._generate_functions[key](ops.convert_to_tensor(source_ids.astype("int32")), uniform)
        tokens = np.asarray(ops.convert_to_numpy(tokens)).astype("int32")
        return (tokens, np.asarray(ops.convert_to_numpy(scores))) if return_scores else tokens

    def _sample(self, source, uniform, strategy, max_length, start_id, end_id, num_beams, k, p, temperature,
                length_penalty, use_cache):
        """Greedy / top-k / top-p decoding of a whole batch in one `while_loop`."""
        batch = ops.shape(source)[0]
        memory = self.encode(source)
        source_mask = ops.not_equal(source, 0)  # (batch, source_len)

        def select(logits, step):
            if strategy == "greedy":
                return generation.select_greedy(logits)
            u = uniform[step]  # (batch,)
            if strategy == "top_k":
                return generation.select_top_k(logits, u, k)
            return generation.select_top_p(logits, u, p)

        if use_cache:
            state = [self.get_layer(f"decoder_block_{i}").build_cache(batch, max_length, context=memory)
                     for i in range(self.decoder_depth)]
        else:
            state = ops.concatenate(  # the decoder input buffer: start token, then what has been generated
                [ops.full((batch, 1), start_id, dtype="int32"), ops.zeros((batch, max_length - 1), dtype="int32")],
                axis=1,
            )

        def body(step, tokens, current, finished, scores, state):
            if use_cache:
                logits, state = self._decode_step_cached(current, step, state, source_mask)
            else:
                logits = self._decode_step_full(state, step, memory, source_mask)
            logits = logits / temperature
            chosen = ops.where(finished, 0, select(logits, step))  # (batch,), 0 once a row has ended
            log_probs = ops.log_softmax(logits, axis=-1)
            gained = ops.take_along_axis(log_probs, chosen[:, None], axis=-1)[:, 0]
            scores = scores + ops.where(finished, 0.0, gained)
            tokens = ops.slice_update(tokens, [0, step], chosen[:, None])
            if not use_cache:  # feed the choice back through the buffer (if there is room)
                state = ops.slice_update(
                    state, [0, ops.minimum(step + 1, max_length - 1)],
                    ops.where(step + 1 < max_length, chosen, state[:, -1])[:, None],
                )
            finished = ops.logical_or(finished, ops.equal(chosen, end_id))
            return step + 1, tokens, chosen[:, None], finished, scores, state

        def cond(step, tokens, current, finished, scores, state):
            return ops.logical_and(step < max_length, ops.logical_not(ops.all(finished)))

        loop_vars = (
            ops.convert_to_tensor(0, dtype="int32"),
            ops.zeros((batch, max_length), dtype="int32"),
            ops.full((batch, 1), start_id, dtype="int32"),
            ops.zeros((batch,), dtype="bool"),
            ops.zeros((batch,), dtype="float32"),
            state,
        )
        _, tokens, _, _, scores, _ = ops.while_loop(cond, body, loop_vars)
        return tokens, scores

    def _beam_search(self, source, uniform, strategy, max_length, start_id, end_id, num_beams, k, p, temperature,
                     length_penalty, use_cache):
        """Beam search with length normalisation: hypotheses are compared by sum log p / length^alpha."""
        batch = ops.shape(source)[0]
        beams = num_beams
        rows = batch * beams
        vocab = self.target_vocab_size
        # Every source row is repeated `beams` times: row b * beams + j is beam j of sample b.
        source = ops.repeat(source, beams, axis=0)
        memory = self.encode(source)
        source_mask = ops.not_equal(source, 0)
        caches = [self.get_layer(f"decoder_block_{i}").build_cache(rows, max_length, context=memory)
                  for i in range(self.decoder_depth)]
        is_padding = ops.equal(ops.arange(vocab), 0)[None, None, :]  # (1, 1, vocab)

        def normalised(scores, lengths):
            return scores / ops.power(ops.maximum(ops.cast(lengths, "float32"), 1.0), length_penalty)

        def body(step, sequences, current, finished, scores, lengths, caches):
            logits, caches = self._decode_step_cached(current, step, caches, source_mask)  # (rows, vocab)
            log_probs = ops.reshape(ops.log_softmax(logits / temperature, axis=-1), (batch, beams, vocab))
            # A finished hypothesis can only be extended by padding, at no cost: it keeps its score.
            log_probs = ops.where(finished[:, :, None], ops.where(is_padding, 0.0, _NEG), log_probs)
            candidates = scores[:, :, None] + log_probs  # (batch, beams, vocab)
            new_lengths = lengths + ops.cast(ops.logical_not(finished), "int32")  # (batch, beams)
            ranked = normalised(candidates, new_lengths[:, :, None])
            _, best = ops.top_k(ops.reshape(ranked, (batch, beams * vocab)), beams)  # (batch, beams)
            parent, token = best // vocab, ops.cast(best % vocab, "int32")  # which beam, which token

            def reorder(x):  # (batch, beams, ...) -> the chosen parents' values
                return ops.take_along_axis(x, ops.reshape(parent, (batch, beams) + (1,) * (len(x.shape) - 2)), axis=1)

            scores = ops.take_along_axis(ops.reshape(candidates, (batch, beams * vocab)), best, axis=1)
            lengths = reorder(new_lengths)
            finished = ops.logical_or(reorder(finished), ops.equal(token, end_id))
            sequences = ops.slice_update(reorder(sequences), [0, 0, step], token[:, :, None])
            # The caches follow their hypotheses: row b * beams + j takes the cache of its parent beam.
            rows_taken = ops.reshape(ops.arange(batch)[:, None] * beams + parent, (rows,))
            caches = [
                {**cache, "self": tuple(ops.take(part, rows_taken, axis=0) for part in cache["self"])}
                for cache in caches
            ]
            return step + 1, sequences, ops.reshape(token, (rows, 1)), finished, scores, lengths, caches

        def cond(step, sequences, current, finished, scores, lengths, caches):
            return ops.logical_and(step < max_length, ops.logical_not(ops.all(finished)))

        first_beam_only = ops.where(ops.equal(ops.arange(beams), 0), 0.0, _NEG)  # the beams start identical
        loop_vars = (
            ops.convert_to_tensor(0, dtype="int32"),
            ops.zeros((batch, beams, max_length), dtype="int32"),
            ops.full((rows, 1), start_id, dtype="int32"),
            ops.zeros((batch, beams), dtype="bool"),
            ops.broadcast_to(first_beam_only[None, :], (batch, beams)),
            ops.zeros((batch, beams), dtype="int32"),
            caches,
        )
        _, sequences, _, _, scores, lengths, _ = ops.while_loop(cond, body, loop_vars)
        final = normalised(scores, lengths)  # (batch, beams)
        best = ops.argmax(final, axis=-1)[:, None]  # (batch, 1)
        tokens = ops.take_along_axis(sequences, best[:, :, None], axis=1)[:, 0, :]
        return tokens, ops.take_along_axis(final, best, axis=1)[:, 0]
