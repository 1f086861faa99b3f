"""Generation speed (tokens/s) of Seq2SeqTransformer.generate: with and without the cache, beam vs greedy, keras-hub.

An untrained encoder-decoder (fixed seed, no dropout) translates a batch of random source sentences. Four ways of
generating run side by side in one process, each compiled (traced) once before timing, in interleaved rounds
(A B C D A B C D ...) so that a machine that slows down or speeds up affects all alike:

* keras_tfm greedy, `use_cache=True`: one new token per step through the decoder, over a key/value cache.
* keras_tfm greedy, `use_cache=False`: the decoder re-runs over the whole prefix buffer at every step. Its output
  must be identical to the cached one (checked), and the ratio of the two times is the cache's speed-up.
* keras_tfm beam search, `num_beams` beams (cached): the cost of keeping several hypotheses.
* keras-hub: the same encoder-decoder built from keras-hub layers (`keras.layers.Embedding` scaled by sqrt(dim)
  + `SinePositionEncoding`, pre-norm GELU `TransformerEncoder`s and `TransformerDecoder`s with cross-attention,
  final layer norms, a Dense output projection; the parameter count is printed next to ours), generating greedily
  with `keras_hub.samplers.GreedySampler` and the decoders' own caches (`self_attention_cache` /
  `self_attention_cache_update_index`, `cross_attention_cache`). As keras-hub's own encoder-decoder models do,
  a first decoder pass over the start token fills the self-attention cache's slot 0 and computes every layer's
  cross-attention keys/values (`cross_attention_cache_update_index=0`); that pass also gives the first token, so
  the sampler runs the other `new_tokens - 1` steps with a static cross-attention cache: the same number of
  decoder steps as ours. Its self-attention cache holds `new_tokens + 1` slots (the start token's included),
  ours `new_tokens`.

Every row runs the full `new_tokens` steps: an untrained model's argmax is arbitrary and might pick the padding
id 0 or `end_id` and stop early, so both models' output biases are set to -1e4 at those two ids. That changes no
step's work, only which token wins. The script still counts the generated (non-zero) tokens and reports tokens/s
on that count. Timings include the encoder (run once per call) and, for keras_tfm, `generate`'s Python-side
argument checks and NumPy conversion. keras_tfm's `generate` compiles its decoding loop with XLA on TensorFlow
(the uncached reference too); the keras-hub graph is compiled with `jit_compile=True` as well, as keras-hub's own
`CausalLM.generate` does (`--no-xla` runs it as a plain `tf.function` graph).

Other backends: `KERAS_BACKEND=jax` (generate's loop is `jax.jit`-compiled) or `KERAS_BACKEND=torch` (it runs
eagerly) time keras_tfm's three rows; the keras-hub row needs TensorFlow.

    pip install keras-hub
    python benchmarks/generation_speed.py                  # defaults: batch 16, source 32, 64 new tokens
    python benchmarks/generation_speed.py --batch 2 --new-tokens 8 --rounds 1   # a quick check
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared timing loop
import timing  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from keras_tfm.models import Seq2SeqTransformer  # noqa: E402

START_ID, END_ID = 1, 2
FORBIDDEN = (0, END_ID)  # padding and end: the untrained models must not stop early
CACHED, UNCACHED, BEAM, HUB = "cached greedy", "uncached greedy", "beam search", "keras-hub greedy"


def forbid_tokens(dense, token_ids):
    """Makes `dense`'s logits for `token_ids` very negative, so that no search picks them."""
    bias = np.array(ops.convert_to_numpy(dense.bias))
    bias[list(token_ids)] = -1e4
    dense.bias.assign(bias)


class KerasHubSeq2Seq(keras.Model):
    """Keras-hub's layers assembled into the same pre-norm encoder-decoder as `Seq2SeqTransformer`."""

    def __init__(self, vocab_size, dim, depth, num_heads, mlp_dim, **kwargs):
        import keras_hub

        super().__init__(**kwargs)
        self.dim = dim
        self.num_heads = num_heads
        block = dict(
            intermediate_dim=mlp_dim, num_heads=num_heads, activation="gelu", layer_norm_epsilon=1e-6,
            normalize_first=True,
        )
        self.source_embedding = keras.layers.Embedding(vocab_size, dim)
        self.target_embedding = keras.layers.Embedding(vocab_size, dim)
        self.positions = keras_hub.layers.SinePositionEncoding()
        self.encoder_blocks = [keras_hub.layers.TransformerEncoder(**block) for _ in range(depth)]
        self.encoder_norm = keras.layers.LayerNormalization(epsilon=1e-6)
        self.decoder_blocks = [keras_hub.layers.TransformerDecoder(**block) for _ in range(depth)]
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-6)
        self.output_projection = keras.layers.Dense(vocab_size)
        self.sampler = keras_hub.samplers.GreedySampler()

    def embed(self, embedding, token_ids, start_index=0):
        x = embedding(token_ids) * ops.sqrt(ops.cast(self.dim, "float32"))  # (batch, length, dim)
        return x + self.positions(x, start_index=start_index)

    def encode(self, source_ids):
        padding = ops.not_equal(source_ids, 0)  # (batch, source_len)
        x = self.embed(self.source_embedding, source_ids)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=padding)
        return self.encoder_norm(x), padding

    def logits(self, y):
        return self.output_projection(self.decoder_norm(y))  # (batch, length, vocab)

    def call(self, inputs):
        source_ids, target_ids = inputs
        memory, source_padding = self.encode(source_ids)
        y = self.embed(self.target_embedding, target_ids)
        for block in self.decoder_blocks:
            y = block(y, memory, encoder_padding_mask=source_padding)
        return self.logits(y)

    def generate(self, source_ids, new_tokens, start_id):
        """Greedy decoding with GreedySampler: `(batch, source_len)` -> `(batch, new_tokens)` token ids."""
        batch, source_len = ops.shape(source_ids)[0], ops.shape(source_ids)[1]
        key_dim = self.dim // self.num_heads
        memory, source_padding = self.encode(source_ids)  # (batch, source_len, dim)

        # The seeding pass: the start token fills slot 0 of each self-attention cache (batch, 2, 1 + new_tokens,
        # heads, key_dim) and every layer's cross-attention keys/values (batch, 2, source_len, heads, key_dim).
        start = ops.full((batch, 1), start_id, dtype="int32")
        y = self.embed(self.target_embedding, start)  # (batch, 1, dim)
        self_caches, cross_caches = [], []
        for block in self.decoder_blocks:
            y, self_cache, cross_cache = block(
                y, memory, encoder_padding_mask=source_padding,
                self_attention_cache=ops.zeros((batch, 2, 1 + new_tokens, self.num_heads, key_dim)),
                self_attention_cache_update_index=0,
                cross_attention_cache=ops.zeros((batch, 2, source_len, self.num_heads, key_dim)),
                cross_attention_cache_update_index=0,
            )
            self_caches.append(self_cache)
            cross_caches.append(cross_cache)
        first = ops.cast(ops.argmax(self.logits(y)[:, 0], axis=-1), "int32")  # (batch,)

        # The prompt holds the start token, the first token, then room for the rest; `mask` marks fixed slots.
        prompt = ops.concatenate(
            [start, first[:, None], ops.zeros((batch, new_tokens - 1), dtype="int32")], axis=1
        )  # (batch, 1 + new_tokens)
        mask = ops.arange(1 + new_tokens)[None, :] < 2  # (1, 1 + new_tokens)
        mask = ops.broadcast_to(mask, ops.shape(prompt))

        def next_token_logits(prompt, caches, index):
            position = index - 1  # the newest token's position: its keys and values go to this cache slot
            token = ops.slice(prompt, [0, position], [batch, 1])  # (batch, 1)
            y = self.embed(self.target_embedding, token, start_index=position)
            updated = []
            for block, self_cache, cross_cache in zip(self.decoder_blocks, caches, cross_caches):
                y, self_cache, _ = block(
                    y, memory, encoder_padding_mask=source_padding,
                    self_attention_cache=self_cache, self_attention_cache_update_index=position,
                    cross_attention_cache=cross_cache, cross_attention_cache_update_index=None,  # static
                )
                updated.append(self_cache)
            return self.logits(y)[:, 0], y[:, 0], tuple(updated)  # logits (batch, vocab), hidden, caches

        prompt = self.sampler(next_token_logits, prompt, cache=tuple(self_caches), index=2, mask=mask)
        return prompt[:, 1:]  # (batch, new_tokens), without the start token


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per row")
    parser.add_argument("--vocab", type=int, default=1000, help="source and target vocabulary size")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--depth", type=int, default=3, help="encoder and decoder blocks each")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--mlp-dim", type=int, default=1024)
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-xla", dest="xla", action="store_false",
                        help="run the keras-hub graph without XLA (keras_tfm's generate always uses it)")
    args = timing.parse_args(parser, argv, quick=dict(batch=2, source_length=8, new_tokens=4, vocab=50, dim=32,
                                                      depth=1, heads=2, mlp_dim=64, beams=2, rounds=1))
    if args.new_tokens < 2:
        parser.error("--new-tokens must be at least 2")

    rng = np.random.default_rng(0)
    source = rng.integers(3, args.vocab, size=(args.batch, args.source_length)).astype("int32")  # no padding

    keras.utils.set_random_seed(0)
    model = Seq2SeqTransformer(
        source_vocab_size=args.vocab, target_vocab_size=args.vocab, dim=args.dim, encoder_depth=args.depth,
        decoder_depth=args.depth, num_heads=args.heads, mlp_dim=args.mlp_dim, max_length=max(128, args.new_tokens),
        dropout=0.0,
    )
    forbid_tokens(model.get_layer("output_projection"), FORBIDDEN)

    def ours(**kwargs):
        return lambda: model.generate(source, args.new_tokens, START_ID, END_ID, **kwargs)

    runs = {
        CACHED: ours(strategy="greedy", use_cache=True),
        UNCACHED: ours(strategy="greedy", use_cache=False),
        BEAM: ours(strategy="beam", num_beams=args.beams),
    }
    params = {"keras_tfm": model.count_params()}
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        print("keras-hub is not installed (pip install keras-hub): skipping its GreedySampler")
    else:
        if keras.backend.backend() != "tensorflow":
            print("keras-hub's loop is compiled as a tf.function here: it runs on the TensorFlow backend only")
    if "keras_hub" in sys.modules and keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        keras.utils.set_random_seed(0)
        hub = KerasHubSeq2Seq(args.vocab, args.dim, args.depth, args.heads, args.mlp_dim, name="keras_hub")
        hub((source[:, :2], source[:, :2]))  # build every layer
        forbid_tokens(hub.output_projection, FORBIDDEN)
        params["keras_hub"] = hub.count_params()
        hub_generate = tf.function(lambda ids: hub.generate(ids, args.new_tokens, START_ID), jit_compile=args.xla)
        source_tensor = tf.constant(source)
        runs[HUB] = lambda: hub_generate(source_tensor).numpy()

    outputs = {name: run() for name, run in runs.items()}  # trace/compile each once
    if not np.array_equal(outputs[CACHED], outputs[UNCACHED]):
        rows, steps = np.nonzero(outputs[CACHED] != outputs[UNCACHED])
        raise AssertionError(
            f"cached and uncached greedy outputs differ at {len(rows)} of {outputs[CACHED].size} tokens "
            f"(first: row {rows[0]}, step {steps[0]})"
        )
    if HUB in runs:  # keras-hub's cached loop must agree with its own teacher-forced pass over the same tokens
        prefix = np.concatenate([np.full((args.batch, 1), START_ID), outputs[HUB][:, :-1]], axis=1)
        full_pass = np.argmax(ops.convert_to_numpy(hub((source, prefix.astype("int32")))), axis=-1)
        if not np.array_equal(full_pass, outputs[HUB]):
            raise AssertionError("keras-hub's cached greedy output differs from its uncached forward pass")
    generated = {name: int(np.count_nonzero(tokens)) for name, tokens in outputs.items()}
    for name, count in generated.items():
        if count != args.batch * args.new_tokens:
            print(f"WARNING: {name} generated {count} of {args.batch * args.new_tokens} tokens")

    seconds = timing.timed_rounds(runs, args.rounds, warmup=False)  # each run returns NumPy arrays: the work is done

    labels = {
        CACHED: "keras_tfm greedy, use_cache=True",
        UNCACHED: "keras_tfm greedy, use_cache=False",
        BEAM: f"keras_tfm beam search, {args.beams} beams",
        HUB: "keras-hub TransformerDecoder + GreedySampler" + (" (XLA)" if args.xla else ""),
    }
    print(
        f"\ngeneration, {keras.backend.backend()} backend, batch {args.batch}, source length {args.source_length}, "
        f"{args.new_tokens} new tokens, vocab {args.vocab}, dim {args.dim}, depth {args.depth}+{args.depth}, "
        f"{args.heads} heads, mlp {args.mlp_dim}; median of {args.rounds} rounds; parameters: "
        + ", ".join(f"{name} {count:,d}" for name, count in params.items())
    )
    cached = statistics.median(seconds[CACHED])
    print(f"{'method':50s} {'ms/call':>9s} {'tokens':>7s} {'tokens/s':>9s} {'time / cached greedy':>21s}")
    for name in runs:
        median = statistics.median(seconds[name])
        print(
            f"{labels[name]:50s} {1000 * median:>9.1f} {generated[name]:>7d} {generated[name] / median:>9.1f} "
            f"{median / cached:>20.2f}x"
        )
    print("\nkeras_tfm: cached and uncached greedy outputs are identical.")
    if HUB in runs:
        print("keras-hub: the cached greedy output equals the argmax of a full teacher-forced pass over it.")
    print(f"Cache speed-up at {args.new_tokens} new tokens: {statistics.median(seconds[UNCACHED]) / cached:.2f}x")
    print(f"Beam search ({args.beams} beams) costs {statistics.median(seconds[BEAM]) / cached:.2f}x greedy")
    if HUB in runs:
        print(f"keras_tfm cached greedy is {statistics.median(seconds[HUB]) / cached:.2f}x as fast as keras-hub's")


if __name__ == "__main__":
    main()
