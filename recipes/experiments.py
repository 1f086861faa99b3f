"""Small controlled experiments that answer a learner's "why" about the Transformer, each a few minutes on a CPU.

Every experiment trains the same small model several times, changing one thing, with the same data, seed and
budget, then prints a table and saves a plot:

    position   no positional encoding vs sinusoidal vs learned, on digit reversal and on an order-dependent
               text task. Without positions attention sees a bag of tokens: it cannot reverse, and it cannot
               tell whether "A" came before "B".
    scaling    softmax(QKᵀ/√d_k) vs softmax(QKᵀ), at head sizes 16 and 128. Unscaled logits grow with √d_k, so
               the softmax starts saturated (one key gets all the weight) and learns slowly (§3.2.1).
    heads      1 vs 4 vs 8 heads at the same width (the per-head size shrinks as heads are added; §3.2.2).
    norm       pre-norm vs post-norm (the paper's) at growing learning rates without warm-up: post-norm needs
               the warm-up, pre-norm trains without it (Xiong et al., 2020).
    combine    adding the positional encoding to the token vectors (the paper) vs concatenating it.

    python -m recipes.experiments position          # one experiment, <= 5 minutes on 2 CPU cores
    python -m recipes.experiments all               # all five, one after the other
    python -m recipes.experiments scaling --quick   # seconds: checks that it runs (numbers mean nothing)

Each experiment writes `<name>.md` (the table), `<name>.json` (every number, the validation curves included)
and `<name>.png` into `runs/experiments/<timestamp>/` (or `--output-dir`). One run per variant and seed: for
claims about small differences, repeat with other `--seed`s.
"""

import argparse
import json
import os
import sys
import time

from recipes import flags

EXPERIMENT_NAMES = ("position", "scaling", "heads", "norm", "combine")  # the keys of EXPERIMENTS below


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=flags.HelpFormatter)
    parser.add_argument("experiment", choices=[*EXPERIMENT_NAMES, "all"], help="which experiment to run")
    parser.add_argument("--epochs", type=flags.positive_int, default=5, help="epochs per training run")
    parser.add_argument("--train-samples", type=flags.positive_int, default=8000, help="training examples")
    parser.add_argument("--test-samples", type=flags.positive_int, default=1000, help="held-out examples")
    parser.add_argument("--batch-size", type=flags.positive_int, default=64, help="batch size of every training run")
    parser.add_argument("--max-digits", type=flags.positive_int, default=8, help="longest digit string")
    parser.add_argument("--seed", type=int, default=0, help="random seed (data and initial weights)")
    parser.add_argument("--output-dir", default=None, help="where to write the tables and plots "
                        "(default: runs/experiments/<timestamp>)")
    parser.add_argument("--quick", action="store_true", help="a few seconds per experiment: checks that it runs")
    args = parser.parse_args(argv)
    if args.quick:  # tiny data, and no graph tracing: eager steps are faster than compiling for a few batches
        args.epochs, args.train_samples, args.test_samples, args.max_digits = 1, 128, 32, 5
    return args


if __name__ == "__main__":
    flags.parse_early(parse_args, sys.argv[1:])  # --help and flag errors answer before TensorFlow loads

from recipes import common  # noqa: E402  (first: it imports TensorFlow, quietly)
import keras  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from keras_tfm.attention_probe import attention_maps  # noqa: E402
from keras_tfm.data import digits  # noqa: E402
from keras_tfm.models import Seq2SeqTransformer, TextClassifier  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------
# The two tasks.


def make_order_task(samples, length=16, vocab_size=32, seed=0):
    """An order-dependent text task: random "words" (ids 3..vocab_size-1) with one "A" (id 1) and one "B" (id 2)
    somewhere; the label is 1 if A comes before B. Every sequence holds the same bag of special words, so
    nothing but their positions tells the classes apart."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab_size, size=(samples, length)).astype("int32")
    lengths = rng.integers(length // 2, length + 1, size=samples)
    labels = np.zeros(samples, "int32")
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
        a, b = rng.choice(n, size=2, replace=False)
        ids[row, a], ids[row, b] = 1, 2
        labels[row] = int(a < b)
    return ids, labels


def greedy_exact_match(model, source, target):
    """Fraction of held-out pairs that greedy decoding gets exactly right, from one teacher-forced pass.

    Greedy decoding reproduces the target iff, fed the correct prefix, the model's argmax is the correct next
    token at every position up to the end token (by induction over the steps). So one parallel forward pass
    gives the same number as running `model.generate`, without compiling the decoding loop.
    """
    logits = keras.ops.convert_to_numpy(model((source, target[:, :-1]), training=False))
    expected = target[:, 1:]
    correct = (logits.argmax(-1) == expected) | (expected == 0)
    return float(np.mean(correct.all(axis=1)))


def train_seq2seq(settings, task="reverse", learning_rate=3e-3, warmup=True, clipnorm=1.0, measure_init=False,
                  **model_kwargs):
    """Trains a tiny Seq2SeqTransformer on a digit task; returns its held-out exact match (greedy decoding),
    final training loss and validation token-accuracy curve."""
    x_train, y_train = digits.make_dataset(settings.train_samples, settings.max_digits, task, seed=settings.seed)
    x_test, y_test = digits.make_dataset(settings.test_samples, settings.max_digits, task, seed=settings.seed + 1)
    keras.utils.set_random_seed(settings.seed)  # the same initial weights for every variant of the same shape
    vocab = digits.VOCAB_SIZE
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=vocab, target_vocab_size=vocab,
                                           max_length=settings.max_digits + 2, dropout=0.0, **model_kwargs)
    result = {}
    if measure_init:  # how peaked is attention before any training? (1.0 = all weight on one key)
        maps = attention_maps(model, (x_test[:64], y_test[:64, :-1]))
        encoder = [np.asarray(m) for name, m in maps.items() if name.startswith("encoder")]
        mask = x_test[:64] > 0
        result["init_max_weight"] = float(np.mean([m.max(-1).mean(1)[mask].mean() for m in encoder]))
    steps = settings.epochs * common.steps_per_epoch(len(x_train), settings.batch_size)
    schedule = common.warmup_cosine(learning_rate, steps, 0.1) if warmup else learning_rate
    model.compile_for_training(keras.optimizers.Adam(schedule, clipnorm=clipnorm), run_eagerly=settings.quick)
    started = time.time()
    history = model.fit((x_train, y_train[:, :-1]), y_train[:, 1:], batch_size=settings.batch_size,
                        epochs=settings.epochs, validation_data=((x_test, y_test[:, :-1]), y_test[:, 1:]), verbose=0)
    loss = history.history["loss"][-1]
    result.update({
        "exact_match": greedy_exact_match(model, x_test, y_test),
        "final_loss": float(loss),
        "diverged": bool(not np.isfinite(loss)),
        "curve": [float(v) for v in history.history["val_accuracy"]],
        "seconds": round(time.time() - started, 1),
    })
    return result


def train_classifier(settings, **model_kwargs):
    """Trains a tiny TextClassifier on the order task; returns held-out accuracy and the validation curve."""
    x_train, y_train = make_order_task(settings.train_samples, seed=settings.seed)
    x_test, y_test = make_order_task(settings.test_samples, seed=settings.seed + 1)
    keras.utils.set_random_seed(settings.seed)
    model = TextClassifier(32, max_length=16, num_classes=2, dim=64, depth=2, num_heads=4, mlp_dim=128, pool="mean",
                           dropout=0.0, **model_kwargs)
    steps = settings.epochs * common.steps_per_epoch(len(x_train), settings.batch_size)
    model.compile(keras.optimizers.Adam(common.warmup_cosine(1e-3, steps, 0.1), clipnorm=1.0),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                  run_eagerly=settings.quick)
    started = time.time()
    history = model.fit(x_train, y_train, batch_size=settings.batch_size, epochs=settings.epochs,
                        validation_data=(x_test, y_test), verbose=0)
    return {
        "accuracy": float(history.history["val_accuracy"][-1]),
        "final_loss": float(history.history["loss"][-1]),
        "curve": [float(v) for v in history.history["val_accuracy"]],
        "seconds": round(time.time() - started, 1),
    }


# ---------------------------------------------------------------------------------------------------------------
# The experiments: each returns rows of {"task", "variant", <metrics>}.


def position(settings):
    rows = []
    for name, value in (("none", None), ("sinusoidal", "sinusoidal"), ("learned", "learned")):
        rows.append({"task": "reverse digits", "variant": name, **train_seq2seq(settings, position=value)})
        rows.append({"task": "A before B?", "variant": name, **train_classifier(settings, position=value)})
    return rows


def scaling(settings):
    rows = []
    for num_heads, head_size in ((4, 16), (1, 128)):  # dim 64: 4 heads of 16; dim 128: one head of 128
        for name, scale in (("1/√d_k", None), ("none", 1.0)):
            result = train_seq2seq(settings, dim=num_heads * head_size, num_heads=num_heads,
                                   attention_scale=scale, measure_init=True)
            rows.append({"task": "reverse digits", "variant": f"d_k={head_size}, scale {name}", **result})
    return rows


def heads(settings):
    return [{"task": "sort digits", "variant": f"{h} head{'s' if h > 1 else ''} x {64 // h}",
             **train_seq2seq(settings, task="sort", num_heads=h)} for h in (1, 4, 8)]


def norm(settings):
    rows = []
    for learning_rate in (1e-3, 3e-3, 1e-2):
        for name, norm_first in (("pre-norm", True), ("post-norm", False)):
            result = train_seq2seq(settings, learning_rate=learning_rate, warmup=False, clipnorm=None,
                                   norm_first=norm_first)
            rows.append({"task": "reverse digits", "variant": f"{name}, lr {learning_rate:g}, no warm-up", **result})
    return rows


def combine(settings):
    return [{"task": "reverse digits", "variant": f"{name} positions",
             **train_seq2seq(settings, position_combine=name)} for name in ("add", "concat")]


EXPERIMENTS = {"position": position, "scaling": scaling, "heads": heads, "norm": norm, "combine": combine}
METRICS = ("exact_match", "accuracy", "init_max_weight", "final_loss", "seconds")  # table columns, when present


# ---------------------------------------------------------------------------------------------------------------
# Reporting.


def table(rows):
    """The rows as a Markdown table."""
    columns = [m for m in METRICS if any(m in row for row in rows)]
    lines = ["| task | variant | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for row in rows:
        cells = [("diverged" if row.get("diverged") and c == "final_loss" else f"{row[c]:.3f}" if c != "seconds"
                  else f"{row[c]:.0f}") if c in row else "" for c in columns]
        lines.append(f"| {row['task']} | {row['variant']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(name, rows, path):
    """Validation-accuracy curves, one panel per task."""
    tasks = list(dict.fromkeys(row["task"] for row in rows))
    figure = Figure(figsize=(6 * len(tasks), 4))
    axes = np.atleast_1d(figure.subplots(1, len(tasks)))
    for ax, task in zip(axes, tasks):
        for row in (r for r in rows if r["task"] == task):
            ax.plot(np.arange(1, len(row["curve"]) + 1), row["curve"], marker="o", label=row["variant"])
        ax.set(title=f"{name}: {task}", xlabel="epoch", ylabel="validation accuracy", ylim=(0, 1.02))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return path


def main(argv=None):
    args = parse_args(argv)
    output_dir = common.output_directory("experiments", args.output_dir)
    keras.config.set_dtype_policy("float32")
    results = {}
    for name in EXPERIMENTS if args.experiment == "all" else [args.experiment]:
        started = time.time()
        rows = EXPERIMENTS[name](args)
        text = table(rows)
        print(f"\n## {name} ({time.time() - started:.0f} s)\n\n{text}")
        with open(os.path.join(output_dir, f"{name}.md"), "w", encoding="utf-8") as file:
            file.write(f"# {name}\n\n{text}\n")
        with open(os.path.join(output_dir, f"{name}.json"), "w", encoding="utf-8") as file:
            json.dump({"flags": vars(args), "rows": rows}, file, indent=2)
        plot(name, rows, os.path.join(output_dir, f"{name}.png"))
        results[name] = rows
    print(f"\nwrote {output_dir}")
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
