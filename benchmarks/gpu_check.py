"""One backend's part of `benchmarks/gpu_check.sh`: what a GPU user meets first, measured in one process.

* the devices the backend sees (and whether TensorFlow, there only for tf.data, was kept off the GPU);
* `fit` of ViT "small" and a TextClassifier "small" under float32, mixed_float16 and mixed_bfloat16, with and
  without jit: samples/s (float16 where the device has it; a failure is printed, not fatal);
* which attention kernel ran: the JAX step's HLO searched for cuDNN's fused attention, PyTorch's profiler for
  flash / memory-efficient / math scaled-dot-product kernels, for a causal and a padded call;
* compile counts of a training step fed three sequence lengths;
* JAX: a `keras.distribution.DataParallel` fit over every device.

    KERAS_BACKEND=jax python benchmarks/gpu_check.py            # full sizes (a GPU)
    KERAS_BACKEND=torch python benchmarks/gpu_check.py --dry-run # tiny sizes, 2 steps: checks that it runs
"""

import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from recipes import devices  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_tfm.layers import MultiHeadAttention  # noqa: E402
from keras_tfm.models import TextClassifier, ViT  # noqa: E402

BACKEND = keras.backend.backend()


def section(title):
    print(f"\n## {BACKEND}: {title}", flush=True)


def environment():
    section("devices")
    print("training devices:", ", ".join(devices.training_devices()))
    if "tensorflow" in sys.modules and BACKEND != "tensorflow":
        import tensorflow as tf

        print("GPUs visible to TensorFlow (tf.data only, should be none):", tf.config.get_visible_devices("GPU"))


def models(dry_run):
    if dry_run:
        vit = dict(image_size=16, patch_size=4, num_classes=10, dim=32, depth=1, num_heads=2, mlp_dim=64)
        text = dict(vocab_size=100, max_length=32, num_classes=2, dim=32, depth=1, num_heads=2, mlp_dim=64)
        return {"ViT": (lambda: ViT.from_preset("tiny", **vit), (8, 16, 16, 3)),
                "TextClassifier": (lambda: TextClassifier.from_preset("tiny", **text), (8, 32))}
    vit = dict(image_size=32, patch_size=4, num_classes=10, dim=384, depth=12, num_heads=6, mlp_dim=1536)
    text = dict(vocab_size=30522, max_length=256, num_classes=2, dim=384, depth=6, num_heads=12, mlp_dim=1536)
    return {"ViT": (lambda: ViT.from_preset("tiny", **vit), (128, 32, 32, 3)),
            "TextClassifier": (lambda: TextClassifier.from_preset("tiny", **text), (32, 256))}


def batch(shape, rng):
    if len(shape) == 4:
        return rng.integers(0, 256, shape).astype("float32"), rng.integers(0, 10, shape[0])
    return rng.integers(1, 100, shape).astype("int32"), rng.integers(0, 2, shape[0])


def fits(dry_run, steps):
    section("fit: samples/s (float32 / mixed_float16 / mixed_bfloat16, jit on and off)")
    rng = np.random.default_rng(0)
    # torch.compile takes minutes per model; a dry run tries Keras' default ("auto") only.
    jits = ("auto",) if dry_run else (False, True) if BACKEND != "torch" else (False,)
    for name, (build, shape) in models(dry_run).items():
        x, y = batch(shape, rng)
        x, y = np.concatenate([x] * steps), np.concatenate([y] * steps)
        # A dry run (CI, on 2 CPU cores) leaves out float16, which a CPU computes slowly or not at all.
        for policy in ("float32", "mixed_bfloat16") if dry_run else ("float32", "mixed_float16", "mixed_bfloat16"):
            for jit in jits:
                keras.config.set_dtype_policy(policy)
                try:
                    model = build()
                    model.compile(optimizer="adamw", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                  jit_compile=jit)
                    if not dry_run:
                        model.fit(x[: shape[0]], y[: shape[0]], batch_size=shape[0], verbose=0)  # compile
                    start = time.perf_counter()
                    history = model.fit(x, y, batch_size=shape[0], verbose=0)
                    seconds = time.perf_counter() - start
                    loss = history.history["loss"][-1]
                    speed = len(x) / seconds
                    print(f"  {name:<15s} {policy:<15s} jit={model.jit_compile!s:<5s} {speed:9.1f} samples/s, "
                          f"loss {loss:.3f}{'' if np.isfinite(loss) else '  NOT FINITE'}", flush=True)
                except Exception as error:  # a policy the device lacks: say so and go on
                    print(f"  {name:<15s} {policy:<15s} jit={jit!s:<5s} FAILED: {type(error).__name__}: "
                          f"{str(error).splitlines()[0][:160]}", flush=True)
                finally:
                    keras.config.set_dtype_policy("float32")


def attention_kernels(dry_run):
    section("attention kernels (a causal call, and a padded one of odd length 257)")
    heads, dim, length = (2, 32, 16) if dry_run else (12, 768, 256)
    layer = MultiHeadAttention(heads)
    keras.config.set_dtype_policy("float32")
    x = np.random.default_rng(0).normal(size=(4, length, dim)).astype("float32")
    odd = np.random.default_rng(0).normal(size=(4, length + 1, dim)).astype("float32")
    padding = np.arange(length + 1)[None, :] < np.array([length + 1, length, length - 3, 5])[:, None]
    calls = {"causal": (lambda q: layer(q, use_causal_mask=True), x),
             "padded, odd length": (lambda q: layer(q, value_mask=padding), odd)}
    for name, (call, inputs) in calls.items():
        try:
            if BACKEND == "jax":
                import jax

                hlo = jax.jit(call).lower(inputs).compile().as_text()
                fused = "cudnn" in hlo.lower() and "fmha" in hlo.lower()
                print(f"  {name}: cuDNN fused attention in the compiled HLO: {fused}")
            elif BACKEND == "torch":
                import torch

                tensor = keras.ops.convert_to_tensor(inputs)  # on the device Keras computes on
                with torch.profiler.profile() as profiler:
                    call(tensor)
                wanted = ("flash", "efficient", "math", "scaled_dot_product", "cudnn_attention")
                kernels = sorted({e.key for e in profiler.key_averages() if any(k in e.key.lower() for k in wanted)})
                print(f"  {name}: {', '.join(kernels) or 'no scaled_dot_product kernel'}")
            else:
                call(inputs)
                print(f"  {name}: ran (TensorFlow has no fused attention kernel in Keras)")
        except Exception as error:
            print(f"  {name}: FAILED: {type(error).__name__}: {str(error).splitlines()[0][:160]}")


def compile_counts(dry_run):
    section("compile counts: one training step fed three sequence lengths")
    model = TextClassifier.from_preset("tiny", vocab_size=100, max_length=64, num_classes=2, dim=32, depth=1,
                                       num_heads=2, mlp_dim=64)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    traces = []
    step = model.train_step
    model.train_step = lambda *args, **kwargs: (traces.append(1), step(*args, **kwargs))[1]
    rng = np.random.default_rng(0)
    lengths = (16, 32, 16) if dry_run else (16, 32, 48, 32)
    for length in lengths:
        x, y = rng.integers(1, 100, (8, length)).astype("int32"), rng.integers(0, 2, 8)
        model.fit(x, y, batch_size=8, verbose=0)
    print(f"  jit_compile={model.jit_compile}: {len(traces)} traces of train_step for {len(lengths)} fits over "
          f"lengths {', '.join(map(str, lengths))} (eager backends count every step)")


def data_parallel(steps):
    if BACKEND != "jax":
        return
    section("keras.distribution.DataParallel")
    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    try:
        model = TextClassifier.from_preset("tiny", vocab_size=100, max_length=32, num_classes=2, dim=32, depth=1,
                                           num_heads=2, mlp_dim=64)
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        rng = np.random.default_rng(0)
        samples = 8 * len(devices) * steps
        x, y = rng.integers(1, 100, (samples, 32)).astype("int32"), rng.integers(0, 2, samples)
        loss = model.fit(x, y, batch_size=8 * len(devices), verbose=0).history["loss"][-1]
        print(f"  {len(devices)} devices ({', '.join(devices)}): loss {loss:.3f}")
    finally:
        keras.distribution.set_distribution(None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny models, 2 steps: checks that every part runs")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per fit")
    args = parser.parse_args(argv)
    steps = 2 if args.dry_run else args.steps
    failed = []
    for part in (environment, lambda: fits(args.dry_run, steps), lambda: attention_kernels(args.dry_run),
                 lambda: compile_counts(args.dry_run), lambda: data_parallel(steps)):
        try:
            part()
        except Exception:
            traceback.print_exc()
            failed.append(part)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
