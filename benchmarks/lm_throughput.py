"""Training and cached-generation throughput of TransformerLM vs a minimal PyTorch GPT and a keras-hub stack.

Three GPT-style language models of the same size and parameter count (nanoGPT's CPU Shakespeare setting by
default: 4 layers, 4 heads, width 128, context 64, vocabulary 65 + padding; learned positions, pre-norm blocks
with biases, GELU MLP of 4x the width, final layer norm, output tied to the token table):

* `keras_tfm.TransformerLM`;
* a minimal GPT in plain PyTorch, written here (nanoGPT's layout, `scaled_dot_product_attention`);
* keras-hub `TransformerDecoder` blocks between a `ReversibleEmbedding` + `PositionEmbedding` and a final norm.

Training: AdamW steps on random token windows (`batch x context` tokens each). Generation: greedy, one token
at a time with a key/value cache, from a 1-token prompt to the full context (ours: `TransformerLM.generate`;
keras-hub: its `GreedySampler` over the decoders' caches, compiled with XLA; PyTorch: a Python loop over a
preallocated cache, `torch.no_grad`). The rounds are interleaved and rotated in one process, so that a machine
that slows down affects all three alike. Prints tokens/s and ours / theirs.

    python3 -m venv /tmp/bench && /tmp/bench/bin/pip install -r requirements.txt torch keras-hub -e .
    /tmp/bench/bin/python benchmarks/lm_throughput.py                 # defaults: nanoGPT's CPU setting
    /tmp/bench/bin/python benchmarks/lm_throughput.py --rounds 2 --steps 3   # a quick check
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared timing loop
import timing  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

import keras_tfm  # noqa: E402


# ------------------------------------------------------------------------------------------------------------
# keras_tfm


def ours(args):
    model = keras_tfm.TransformerLM(vocab_size=args.vocab, dim=args.dim, depth=args.depth, num_heads=args.heads,
                                    mlp_dim=4 * args.dim, max_length=args.context)
    model.compile_for_training(optimizer=keras.optimizers.AdamW(1e-3), jit_compile=args.jit)

    def generate(prompt, new_tokens):
        return model.generate(prompt, new_tokens)

    return model, model.count_params(), lambda x, y: model.train_on_batch(x, y), generate


# ------------------------------------------------------------------------------------------------------------
# keras-hub


def keras_hub_lm(args):
    import keras_hub
    import tensorflow as tf

    token_embedding = keras_hub.layers.ReversibleEmbedding(args.vocab, args.dim, tie_weights=True)
    position_embedding = keras_hub.layers.PositionEmbedding(sequence_length=args.context)
    blocks = [keras_hub.layers.TransformerDecoder(4 * args.dim, args.heads, activation="gelu", layer_norm_epsilon=1e-5,
                                                  normalize_first=True) for _ in range(args.depth)]
    norm = keras.layers.LayerNormalization(epsilon=1e-5)
    ids = keras.Input((None,), dtype="int32")
    x = token_embedding(ids)
    x = x + position_embedding(x)
    for block in blocks:
        x = block(x)
    model = keras.Model(ids, token_embedding(norm(x), reverse=True))
    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=args.jit)
    head_dim = args.dim // args.heads

    def next_token_logits(prompt, cache, index):  # the keras-hub sampler's `next`, as its causal LMs write it
        batch = ops.shape(prompt)[0]
        token = ops.slice(prompt, [0, index - 1], [batch, 1])
        x = token_embedding(token)
        x = x + position_embedding(x, start_index=index - 1)
        caches = []
        for i, block in enumerate(blocks):
            x, block_cache = block(x, self_attention_cache=cache[:, i], self_attention_cache_update_index=index - 1)
            caches.append(block_cache)
        logits = token_embedding(norm(x), reverse=True)
        return logits[:, 0, :], None, ops.stack(caches, axis=1)

    sampler = keras_hub.samplers.GreedySampler()

    @tf.function(jit_compile=True)
    def loop(prompt):
        cache = ops.zeros((ops.shape(prompt)[0], args.depth, 2, prompt.shape[1], args.heads, head_dim))
        return sampler(next_token_logits, prompt, cache=cache, index=1)

    def generate(prompt, new_tokens):
        buffer = np.zeros((prompt.shape[0], prompt.shape[1] + new_tokens), "int32")
        buffer[:, : prompt.shape[1]] = prompt
        return np.asarray(loop(tf.constant(buffer)))

    return model, model.count_params(), lambda x, y: model.train_on_batch(x, y), generate


# ------------------------------------------------------------------------------------------------------------
# A minimal GPT in plain PyTorch (nanoGPT's layout, with biases), written for this benchmark.


def torch_gpt(args):
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm_1, self.norm_2 = nn.LayerNorm(args.dim), nn.LayerNorm(args.dim)
            self.qkv = nn.Linear(args.dim, 3 * args.dim)
            self.out = nn.Linear(args.dim, args.dim)
            self.mlp = nn.Sequential(nn.Linear(args.dim, 4 * args.dim), nn.GELU(), nn.Linear(4 * args.dim, args.dim))

        def forward(self, x, cache=None, start=0):
            batch, length, _ = x.shape
            q, k, v = self.qkv(self.norm_1(x)).split(args.dim, dim=2)
            q, k, v = (t.view(batch, length, args.heads, -1).transpose(1, 2) for t in (q, k, v))  # (b, h, t, d)
            if cache is None:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # write the new keys/values into the cache, attend over positions 0..start + length - 1
                cache[0][:, :, start : start + length], cache[1][:, :, start : start + length] = k, v
                keys, values = cache[0][:, :, : start + length], cache[1][:, :, : start + length]
                # causal for a prompt (which starts at 0); one new token sees every cached position
                y = F.scaled_dot_product_attention(q, keys, values, is_causal=length > 1)
            x = x + self.out(y.transpose(1, 2).reshape(batch, length, args.dim))
            return x + self.mlp(self.norm_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(args.vocab, args.dim)
            self.positions = nn.Embedding(args.context, args.dim)
            self.blocks = nn.ModuleList(Block() for _ in range(args.depth))
            self.norm = nn.LayerNorm(args.dim)

        def forward(self, ids, caches=None, start=0):
            positions = torch.arange(start, start + ids.shape[1])
            x = self.tokens(ids) + self.positions(positions)
            for i, block in enumerate(self.blocks):
                x = block(x, None if caches is None else caches[i], start)
            return self.norm(x) @ self.tokens.weight.T  # tied output projection

    torch.manual_seed(0)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step(x, y):
        logits = model(torch.from_numpy(x).long())
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), torch.from_numpy(y).long().reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    @torch.no_grad()
    def generate(prompt, new_tokens):
        ids = torch.from_numpy(prompt).long()
        total = ids.shape[1] + new_tokens
        shape = (ids.shape[0], args.heads, total, args.dim // args.heads)
        caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(args.depth)]
        if ids.shape[1] > 1:
            model(ids[:, :-1], caches, 0)  # the prompt before its last token
        for position in range(ids.shape[1] - 1, total - 1):
            logits = model(ids[:, position : position + 1], caches, position)
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return ids.numpy()

    parameters = sum(p.numel() for p in model.parameters())
    return model, parameters, train_step, generate


# ------------------------------------------------------------------------------------------------------------


def timed(function, repeats):
    """(wall seconds, process CPU seconds) per call. The CPU time counts every thread of this process and not
    the time other programs take the cores, so it is the steadier of the two on a shared machine."""
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - start) / repeats, (time.process_time() - cpu_start) / repeats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=66, help="tiny Shakespeare's 65 characters + padding")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per round")
    parser.add_argument("--generate-batch", type=int, default=1, help="sequences generated together")
    parser.add_argument("--generations", type=int, default=5, help="timed generations per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jit", action="store_true", help="compile the Keras training steps with XLA")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="threads per operation, the same for TensorFlow (intra-op) and PyTorch")
    args = timing.parse_args(parser, argv, quick=dict(batch=2, context=8, dim=32, heads=2, depth=1, steps=1,
                                                      generations=1, rounds=1))
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)  # before TensorFlow runs anything
    except RuntimeError:  # TensorFlow already runs (main called from a test): its pools stay as they are
        pass
    try:
        import torch

        torch.set_num_threads(args.threads)
        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"

    rng = np.random.default_rng(0)
    windows = rng.integers(1, args.vocab, size=(args.batch, args.context + 1)).astype("int32")
    x, y = windows[:, :-1], windows[:, 1:]
    prompt = rng.integers(1, args.vocab, size=(args.generate_batch, 1)).astype("int32")
    new_tokens = args.context - 1

    builders = {"keras_tfm.TransformerLM": ours, "PyTorch minimal GPT": torch_gpt,
                "keras-hub TransformerDecoder": keras_hub_lm}
    models = {}
    for name, build in builders.items():
        try:
            keras.utils.set_random_seed(0)
            models[name] = build(args)
        except ImportError as error:
            print(f"skipping {name}: {error}")
            continue
        _, _, train_step, generate = models[name]
        for _ in range(2):  # trace/compile and warm up
            train_step(x, y)
            generate(prompt, new_tokens)

    def measure(name):  # (training wall, CPU; generation wall, CPU) seconds; each step returns the loss value
        _, _, train_step, generate = models[name]
        return (*timed(lambda: train_step(x, y), args.steps),
                *timed(lambda: generate(prompt, new_tokens), args.generations))

    rounds = timing.interleaved(measure, models, args.rounds, warmup=False)
    train_seconds, train_cpu, generate_seconds, generate_cpu = (
        {name: [values[i] for values in rounds[name]] for name in models} for i in range(4))

    print(
        f"\n{keras.backend.backend()} backend (Keras jit_compile={args.jit}), torch {torch_version}; "
        f"{args.threads} threads per operation in both, {os.cpu_count()} CPU cores; {args.depth} layers, "
        f"{args.heads} heads, width {args.dim}, context {args.context}, vocabulary {args.vocab}; training batch "
        f"{args.batch}; greedy "
        f"generation of {new_tokens} tokens x {args.generate_batch} sequences; median of {args.rounds} interleaved "
        f"rounds ({args.steps} training steps each)"
    )
    ours_name = "keras_tfm.TransformerLM"
    ours_train = args.batch * args.context / statistics.median(train_seconds[ours_name])
    ours_generate = args.generate_batch * new_tokens / statistics.median(generate_seconds[ours_name])
    print(f"{'model':30s} {'params':>9s} {'train tok/s':>12s} {'ours/this':>10s} {'generate tok/s':>15s} "
          f"{'ours/this':>10s}")
    for name in models:
        train = args.batch * args.context / statistics.median(train_seconds[name])
        generated = args.generate_batch * new_tokens / statistics.median(generate_seconds[name])
        print(f"{name:30s} {models[name][1]:>9,d} {train:>12,.0f} {ours_train / train:>9.2f}x "
              f"{generated:>15,.0f} {ours_generate / generated:>9.2f}x")
    print("CPU time (all threads of the process), median; in brackets this / ours (above 1: ours needs less)")
    ours_cpu = statistics.median(train_cpu[ours_name]), statistics.median(generate_cpu[ours_name])
    for name in models:
        cpu = statistics.median(train_cpu[name]), statistics.median(generate_cpu[name])
        print(f"  {name:30s} training {1000 * cpu[0]:6.1f} ms ({cpu[0] / ours_cpu[0]:.2f}x)   "
              f"generation {1000 * cpu[1]:6.1f} ms ({cpu[1] / ours_cpu[1]:.2f}x)")
    print("per round, training ms/step | generation ms/sequence (how steady the machine was):")
    for name in models:
        print(f"  {name:30s} " + " ".join(f"{1000 * t:.0f}" for t in train_seconds[name]) + " | "
              + " ".join(f"{1000 * t:.0f}" for t in generate_seconds[name]))


if __name__ == "__main__":
    main()
