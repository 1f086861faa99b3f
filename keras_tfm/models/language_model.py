"""A decoder-only (GPT-style) Transformer language model (Radford et al., 2018/2019; nanoGPT's layout).

Tokens are embedded with positions, pass through causal `DecoderBlock`s without cross-attention (each position
sees itself and the positions before it), a final layer norm, and a projection back onto the vocabulary
(by default the token table itself, transposed: weight tying). Training predicts every next token at once:

    model.fit(ids[:, :-1], ids[:, 1:])

Generation feeds the prompt through once (filling the key/value cache), then one token at a time, inside a
compiled loop from `keras_tfm.models.generation`.
"""

import keras
import numpy as np
from keras import ops

from keras_tfm.checks import DataChecks
from keras_tfm.layers import DecoderBlock, TokenEmbedding
from keras_tfm.layers import _checks
from keras_tfm.metrics import MaskedSparseCategoricalCrossentropy
from keras_tfm.models import generation
from keras_tfm.models._base import PresetModel
from keras_tfm.presets import LANGUAGE_MODEL_PRESETS

_NEVER = -1e9  # the generation logit of padding


@keras.saving.register_keras_serializable(package="keras_tfm")
class TransformerLM(generation.GenerationMixin, PresetModel, keras.Model):
    """Decoder-only Transformer over token ids (0 = padding), predicting each next token.

    Layer names: `embedding` (a `TokenEmbedding`), `block_{i}` (`DecoderBlock`s, pre-norm, no cross-attention),
    `final_norm`, `output_projection` (unless `tie_embeddings`), `logits`.

    Args:
        vocab_size: number of token ids, padding (0) included.
        dim: model width.
        depth: number of decoder blocks.
        num_heads: attention heads per block; `dim` must be divisible by it.
        mlp_dim: feed-forward width (GPT: `4 * dim`).
        max_length: the context: the longest sequence the model reads, prompt plus generated tokens.
        position: `"learned"` (GPT) or `"sinusoidal"` (Vaswani et al.) positions.
        tie_embeddings: project onto the vocabulary with the token table (Press & Wolf, 2017), as GPT does.
        dropout: dropout rate (embeddings, blocks).
        attention_dropout: dropout on the attention weights.
        mlp_activation: activation of the blocks' feed-forward network (the MLP): `"gelu"` (default), `"relu"`,
            `"gelu_tanh"`... The old name `activation` still works, with a FutureWarning, for one release.
        layer_norm_epsilon: epsilon of the layer norms.
        **kwargs: `keras.Model` arguments.

    Call arguments / shapes:
        `token_ids` `(batch, length)` ints, `length <= max_length` -> logits `(batch, length, vocab_size)`
        (float32, also under mixed precision); position t depends on tokens 0..t only. Padding (id 0) is
        masked out of attention and carries a Keras mask to the output, so the loss of `compile_for_training`
        ignores it.

    Example:

    >>> model = TransformerLM.from_preset("shakespeare_char_cpu", vocab_size=66)
    >>> model.compile_for_training()
    >>> model.fit(ids[:, :-1], ids[:, 1:], epochs=1)  # doctest: +SKIP
    >>> model.generate(prompt_ids, max_new_tokens=32, strategy="top_k", k=5, seed=0)  # doctest: +SKIP
    """

    RENAMED_ARGUMENTS = {"activation": "mlp_activation"}
    PRESETS = LANGUAGE_MODEL_PRESETS

    def __init__(
        self,
        vocab_size,
        dim=128,
        depth=4,
        num_heads=4,
        mlp_dim=512,
        max_length=64,
        position="learned",
        tie_embeddings=True,
        dropout=0.0,
        attention_dropout=0.0,
        mlp_activation="gelu",
        layer_norm_epsilon=1e-5,
        **kwargs,
    ):
        mlp_activation = _checks.renamed(type(self).__name__, kwargs, "activation", "mlp_activation",
                                         mlp_activation, "gelu")
        self.check_keywords(kwargs)
        kwargs.setdefault("name", "transformer_lm")
        _checks.positive_int("vocab_size", vocab_size)
        _checks.positive_int("depth", depth)
        _checks.positive_int("max_length", max_length)
        _checks.one_of("position", position, ("learned", "sinusoidal"))
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        embedding = TokenEmbedding(
            vocab_size, dim, max_length=max_length, position=position, scale=False, dropout=dropout,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02), name="embedding",
        )
        x = embedding(token_ids)  # (batch, length, dim) + padding mask
        for i in range(depth):
            x = DecoderBlock(
                num_heads, mlp_dim, dropout=dropout, attention_dropout=attention_dropout, activation=mlp_activation,
                layer_norm_epsilon=layer_norm_epsilon, name=f"block_{i}",
            )(x)
        x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="final_norm")(x)
        if tie_embeddings:
            x = embedding(x, reverse=True)  # (batch, length, vocab_size), the token table transposed
        else:
            x = keras.layers.Dense(vocab_size, use_bias=False, name="output_projection")(x)
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(x)
        super().__init__(token_ids, logits, **kwargs)

        self.store_arguments(locals())
        self._generate_functions = {}

    def compile_for_training(self, optimizer=None, **kwargs):
        """`compile` with the next-token cross-entropy (nats per token), ignoring padding targets (id 0).

        Args:
            optimizer: defaults to AdamW(1e-3, weight decay 0.1 except biases and norms, clipping at norm 1).
            **kwargs: passed on to `compile` (e.g. `jit_compile`, `steps_per_execution`).
        """
        if optimizer is None:
            optimizer = keras.optimizers.AdamW(1e-3, weight_decay=0.1, beta_2=0.99, clipnorm=1.0)
            self.exclude_from_weight_decay(optimizer)
        self.compile(optimizer=optimizer, loss=MaskedSparseCategoricalCrossentropy(from_logits=True), **kwargs)

    def no_weight_decay(self):
        """None beyond the rule (biases and norms, see `WeightDecayPolicy`): the matrices and the token and
        position tables decay, as in GPT-2 and nanoGPT."""
        return ()

    # ------------------------------------------------------------------------------------------------------
    # Generation.

    def _logits(self, x):
        """Next-token logits for generation; padding (id 0) is never chosen, so outputs stay right-padded."""
        x = self.get_layer("final_norm")(x)
        if self.tie_embeddings:
            x = self.get_layer("embedding")(x, reverse=True)
        else:
            x = self.get_layer("output_projection")(x)
        x = ops.cast(x, "float32")  # (rows, length, vocab)
        return ops.where(ops.arange(self.vocab_size) == 0, _NEVER, x)

    def _run_blocks(self, token_ids, start, caches):
        """Embeds `token_ids` at positions `start, ...` and runs the blocks over them, extending the caches."""
        x = self.get_layer("embedding")(token_ids, start_position=start)  # (rows, length, dim)
        real = ops.ones_like(token_ids, dtype="bool")  # generated and prompt tokens are all attended to
        new_caches = []
        for i, cache in enumerate(caches):
            x, cache = self.get_layer(f"block_{i}")(x, mask=real, cache=cache, cache_index=start)
            new_caches.append(cache)
        return self._logits(x), new_caches

    def step(self, token_ids, index, cache):
        """One decoding step for `keras_tfm.models.generation`: the token at `index` goes through the blocks,
        attending over the key/value cache of the positions before it.

        Args:
            token_ids: `(rows, length)` int32 buffer, filled up to `index`.
            index: scalar int, the position of the newest token.
            cache: a list with one `DecoderBlock` cache per block (see `DecoderBlock.build_cache`).

        Returns:
            `(logits, cache)`: `(rows, vocab_size)` float32 for position `index + 1`, and the extended cache.
        """
        current = ops.expand_dims(ops.take(token_ids, index, axis=1), 1)  # (rows, 1)
        logits, cache = self._run_blocks(current, index, cache)
        return logits[:, 0, :], cache

    def _step_without_cache(self, token_ids, index, cache):
        """The reference for `step`: runs the whole buffer (no cache) and reads position `index`."""
        x = self.get_layer("embedding")(token_ids)
        real = ops.ones_like(token_ids, dtype="bool")
        for i in range(self.depth):
            x = self.get_layer(f"block_{i}")(x, mask=real)
        return ops.take(self._logits(x), index, axis=1), cache  # (rows, vocab)

    def generate(
        self,
        prompt_ids,
        max_new_tokens,
        strategy="greedy",
        temperature=1.0,
        seed=None,
        k=10,
        p=0.9,
        num_beams=4,
        length_penalty=1.0,
        end_id=None,
        use_cache=True,
        return_scores=False,
    ):
        """Continues each prompt by up to `max_new_tokens` tokens.

        Prompts of different lengths go in one batch **right-padded** with 0: row `r`'s prompt is its tokens up
        to the first 0. Each row continues from its own last token at its own positions, so a row's output does
        not depend on the other rows (tested). The prompt and the new tokens together must fit in the context
        (`max_length`); to write longer text, continue from the tail of the output (the language-model recipe
        does).

        The decoding loop is compiled once per setting (strategy, lengths, beams, k, end token, cache; not per
        temperature, p or length penalty): XLA on TensorFlow, `jax.jit` on JAX; on PyTorch it runs
        eagerly (a Python loop under `torch.no_grad()`, see `keras_tfm.models.generation.compile_loop`).

        Args:
            prompt_ids: `(batch, prompt_len)` ints, right-padded with 0; every row needs at least one token.
            max_new_tokens: how many tokens to add to each prompt.
            strategy: `"greedy"`, `"top_k"`, `"top_p"` or `"beam"`.
            temperature: the logits are divided by it (sampling and beam scores).
            seed: int seed of `"top_k"`/`"top_p"`; the same seed gives the same text.
            k: candidates for `"top_k"`.
            p: probability mass for `"top_p"`, in (0, 1].
            num_beams: beams for `"beam"`.
            length_penalty: beam hypotheses are ranked by `sum log p / length ** length_penalty`.
            end_id: if given, a row stops after producing this token (its later positions are 0).
            use_cache: False re-runs the whole sequence at every step (the reference the cache is tested against).
            return_scores: also return `(batch,)` summed log-probabilities of the new tokens (length-normalised
                for beam search).

        Returns:
            `(batch, prompt_len + max_new_tokens)` int32 NumPy array: each row's prompt, then its new tokens,
            then zeros; with `return_scores`, `(tokens, scores)`.
        """
        self.check_decoding(strategy, num_beams, k, p, temperature, use_cache)
        _checks.positive_int("max_new_tokens", max_new_tokens)
        self.check_token("end_id", end_id, self.vocab_size, optional=True)
        prompt_ids = self.id_batch("prompt_ids", prompt_ids, self.vocab_size)
        lengths = np.sum(prompt_ids != 0, axis=1)  # (batch,)
        if np.any(lengths == 0):
            empty = np.flatnonzero(lengths == 0).tolist()
            raise ValueError(f"Every prompt needs at least one token. Received: empty rows {empty} in `prompt_ids`")
        if np.any(np.cumsum(prompt_ids == 0, axis=1)[prompt_ids != 0] > 0):
            raise ValueError("`prompt_ids` must be right-padded: a row's tokens first, then only zeros.")
        batch, prompt_len = prompt_ids.shape
        total = prompt_len + max_new_tokens
        if total > self.max_length:
            raise ValueError(
                f"The prompt ({prompt_len} tokens) plus `max_new_tokens` ({max_new_tokens}) must fit in the model's "
                f"context, max_length={self.max_length}. Shorten the prompt or generate fewer tokens."
            )

        token_ids = np.zeros((batch, total), "int32")
        token_ids[:, :prompt_len] = prompt_ids
        positions = np.arange(total)[None, :]
        # Tokens the loop must keep: the prompt, and padding after each row's own `max_new_tokens`.
        given = (positions < lengths[:, None]) | (positions >= lengths[:, None] + max_new_tokens)
        # One compiled loop per setting and size that shapes the program (the cache's size must be static).
        # Temperature, p and the length penalty are numbers the loop reads when it runs (`generation.numbers`).
        settings = dict(prompt_len=prompt_len, max_new_tokens=max_new_tokens, strategy=strategy, num_beams=num_beams,
                        k=k, end_id=end_id, use_cache=use_cache)
        if strategy in ("top_k", "top_p"):
            uniform = keras.random.uniform((total - 1, batch), seed=seed)  # one draw per position and row
        else:  # greedy and beam search draw nothing
            uniform = np.zeros((total - 1, batch), "float32")
        return self.run_loop(settings, (
            ops.convert_to_tensor(token_ids), ops.convert_to_tensor(given),
            ops.convert_to_tensor(int(lengths.min()) - 1, "int32"), uniform,
            generation.numbers(temperature, p, length_penalty),
        ), return_scores)

    def _decode(self, token_ids, given, start, uniform, numbers, settings):
        """The whole generation for one `settings` dict (see `generate`) and the `numbers` tensor of
        `generation.numbers`: prefill the cache, then a loop."""
        temperature, p, length_penalty = numbers[0], numbers[1], numbers[2]
        batch, total = ops.shape(token_ids)[0], settings["prompt_len"] + settings["max_new_tokens"]
        if settings["use_cache"]:
            cache = [self.get_layer(f"block_{i}").build_cache(batch, total) for i in range(self.depth)]
            # Prefill: the padded prompt but its last column in one pass (the loop starts at the shortest
            # prompt's last token, at the latest that column). Slots past a row's own prompt hold padding but are
            # rewritten by the loop before anything reads them.
            if settings["prompt_len"] > 1:
                _, cache = self._run_blocks(token_ids[:, : settings["prompt_len"] - 1], 0, cache)
            step = self.step
        else:
            cache, step = (), self._step_without_cache
        common = dict(given=given, end_id=settings["end_id"], temperature=temperature)
        if settings["strategy"] == "beam":
            return generation.beam_search(step, token_ids, cache, start, settings["num_beams"],
                                          length_penalty=length_penalty, **common)
        return generation.sample(step, token_ids, cache, start, settings["strategy"], uniform=uniform, k=settings["k"],
                                 p=p, **common)

    @property
    def data_checks(self):
        """Token ids in [0, vocab_size) in `x` and `y` (`keras_tfm.checks.DataChecks`)."""
        return DataChecks(inputs=self.vocab_size, target_ids=self.vocab_size)
