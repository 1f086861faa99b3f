"""Peak memory of a translate training step: the label-smoothed loss with and without a one-hot target.

Each variant runs in its own fresh process (peak RSS cannot be reset inside one), built exactly as
`recipes.translate` builds its model at the defaults (small preset, shared 8,000-piece vocabulary, batch 128),
on random ids of one length. The "one-hot" variant is the earlier implementation, kept here as the reference:
it materialises `(batch, length, vocab)` smoothed targets. Prints each variant's peak resident memory and the
difference, plus the loss values (which must agree).

    python benchmarks/loss_memory.py                # length 64 (--max-length's default), 5 steps
    python benchmarks/loss_memory.py --length 32
"""

import argparse
import json
import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_hot_loss(label_smoothing):
    import keras
    from keras import ops

    def loss(y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        vocab = ops.shape(y_pred)[-1]
        targets = ops.one_hot(y_true, vocab)  # (batch, length, vocab)
        targets = targets * (1.0 - label_smoothing) + label_smoothing / ops.cast(vocab, "float32")
        losses = keras.losses.categorical_crossentropy(targets, ops.cast(y_pred, "float32"), from_logits=True)
        weights = ops.cast(ops.not_equal(y_true, 0), "float32")
        return ops.sum(losses * weights) / ops.maximum(ops.sum(weights), 1.0)

    return loss


def run_variant(variant, length, steps, batch, vocab, smoothing):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np

    from keras_tfm.metrics import MaskedAccuracy, MaskedSparseCategoricalCrossentropy
    from keras_tfm.models import Seq2SeqTransformer

    keras.utils.set_random_seed(0)
    model = Seq2SeqTransformer.from_preset("small", source_vocab_size=vocab, target_vocab_size=vocab, max_length=length,
                                           tie_embeddings=True)
    loss = one_hot_loss(smoothing) if variant == "one-hot" else MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)
    model.compile(keras.optimizers.AdamW(1e-4), loss=loss, metrics=[MaskedAccuracy()])
    rng = np.random.default_rng(0)
    source = rng.integers(4, vocab, (batch * steps, length)).astype("int32")
    target = rng.integers(4, vocab, (batch * steps, length + 1)).astype("int32")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    history = model.fit((source, target[:, :-1]), target[:, 1:], batch_size=batch, epochs=1, verbose=0, shuffle=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"variant": variant, "peak_mib": peak / 1024, "before_fit_mib": before / 1024,
            "loss": history.history["loss"][-1]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--label-smoothing", type=float, default=0.1, help="translate's default: 0.1")
    parser.add_argument("--variant", choices=("one-hot", "keras_tfm"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:  # the child process
        print(json.dumps(run_variant(args.variant, args.length, args.steps, args.batch_size, args.vocab_size,
                                      args.label_smoothing)))
        return
    results = []
    for variant in ("one-hot", "keras_tfm"):
        command = [sys.executable, __file__, "--variant", variant, "--length", str(args.length), "--steps",
                   str(args.steps), "--batch-size", str(args.batch_size), "--vocab-size", str(args.vocab_size),
                   "--label-smoothing", str(args.label_smoothing)]
        output = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout
        results.append(json.loads(output.strip().splitlines()[-1]))
    one_hot_bytes = 4 * args.batch_size * args.length * args.vocab_size
    print(f"translate training step: batch {args.batch_size}, length {args.length}, vocabulary {args.vocab_size} "
          f"label smoothing {args.label_smoothing} (one (batch, length, vocab) float32 tensor = {one_hot_bytes / 2**20:.0f} MiB)")
    print(f"{'loss':<12}{'peak RSS (MiB)':>16}{'in fit (MiB)':>14}{'last loss':>12}")
    for row in results:
        print(f"{row['variant']:<12}{row['peak_mib']:>16.0f}{row['peak_mib'] - row['before_fit_mib']:>14.0f}"
              f"{row['loss']:>12.4f}")
    print(f"saved: {results[0]['peak_mib'] - results[1]['peak_mib']:.0f} MiB of peak memory")


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    main()
