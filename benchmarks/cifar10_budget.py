"""CIFAR-10 in a fixed time: our CPU recipe vs keras.io's ViT and CCT examples, each given the same minutes.

Side by side in one process, one after another, on the same machine and the same images:

* `ours`: the recipe itself, `recipes.cifar10_vit --preset cifar10_cpu --time-budget MINUTES`, as a user runs
  it (warm-up + cosine schedule planned for the epochs that fit; the weights of the last epoch are scored).
* `deit_tiny`: DeiT-tiny (Touvron et al. 2021; timm's `deit_tiny_patch16_224`: width 192, 12 blocks of 3 heads,
  a [CLS] token; 5.4M weights here) from scratch on the same pipeline: the recipe again, with the `ViT-Ti/16` preset on
  4x4 patches (64 tokens) and DeiT's training recipe where the recipe has it (`RECIPE_MODELS`). Left out: DeiT's
  random erasing, repeated augmentation and 5 warm-up epochs (the recipe warms up over its first tenth).
* `keras_io_vit`: "Image classification with Vision Transformer" (Khalid Salama, keras.io), re-implemented
  from the page's description: images resized to 72x72 in the model, 6x6 patches (144), a linear projection
  plus a learned position embedding, 8 pre-norm blocks of `keras.layers.MultiHeadAttention` (4 heads, key size
  64, dropout 0.1) and a GELU MLP (dropout 0.1), no [CLS]: the final layer norm's tokens are flattened into an
  MLP head [2048, 1024] (dropout 0.5). Augmentation in the model: Normalization (adapted to the training
  images), Resizing, RandomFlip (horizontal), RandomRotation 0.02, RandomZoom 0.2. AdamW, constant learning
  rate 1e-3, weight decay 1e-4, batch 256, sparse cross-entropy. The page exists in two versions:
  `--keras-io-vit 2021` (the original: token width 64, block MLP [128, 64]; the default) and `current` (the
  Keras 3 version: token width 64 x 4 heads = 256, block MLP [512, 256], about 8 times the work per image).
* `keras_io_cct`: "Compact Convolutional Transformers" (Sayak Paul, keras.io): a convolutional tokenizer of two
  3x3 convolutions (64 and 128 filters, ReLU, no bias), each followed by 1-pixel zero padding and a 3x3 max pool
  of stride 2 (64 tokens of width 128), a learned position embedding, 2 pre-norm blocks (2 heads, key size 128,
  dropout 0.1, MLP [128, 128]) with stochastic depth rising linearly from 0 to 0.1, sequence pooling, a Dense
  classifier. Augmentation in the model: Rescaling 1/255, RandomCrop 32x32, RandomFlip (horizontal). AdamW,
  constant learning rate 1e-3, weight decay 1e-4, label smoothing 0.1, batch 128. The page reports about 78%
  test accuracy after 30 epochs.

The budget decides the epochs, for every model alike: the first epoch is timed, the epochs that still fit are
planned from it, and training stops after them, or at the end of the epoch that passes the budget if epochs turn
out slower (`keras_tfm.callbacks.TimeBudget`: an epoch estimated to end past the budget is not started, so a model
with long epochs may stop well before it; the budget counts `fit`, training and validation, not data loading or
model building). The keras.io models keep
their pages' constant learning rate, so only their number of epochs changes; ours re-plans its schedule. Both
keras.io pages keep the weights of the epoch with the best validation accuracy (`ModelCheckpoint(save_best_only)`)
and score those; so does this benchmark for them, while ours scores its last epoch, as the recipe does.

The path: ours trains on the path its recipe's "auto" flags choose here (its measured fast path for this CPU and
backend, e.g. `mixed_bfloat16` as a TensorFlow graph where bf16 units pay), and by default the keras.io models get
the same dtype policy and `jit_compile` (`--keras-io-path ours`; their logits stay float32, as Keras' mixed
precision guide advises). `--keras-io-path float32` trains them as their pages do. The report records each model's
path.

Validation: the same 5,000 training images are held out for every model (`keras_tfm.data.cifar10.holdout`,
stratified, drawn with `--seed`), where the pages hold out 10% with `validation_split`; the 10,000 test images
are scored once per model, at the end of its run. Per epoch the JSON records minutes since `fit` began and
validation accuracy; per model the test accuracy.

    tar xzf cifar10-jpeg.tar.gz -C /tmp        # cifar10/{train,test}/<class>/*.jpg
    python benchmarks/cifar10_budget.py --image-dir /tmp/cifar10 --minutes 60 --output cifar10_budget.json \\
        --plot cifar10_budget.png
    python benchmarks/cifar10_budget.py --image-dir /tmp/cifar10 --minutes 60 --models keras_io_cct   # one model

The models share the machine only in turn, never at once; a `--models` subset runs one of them alone (four
60-minute runs take four hours either way). Reports of runs made apart, with the same budget, seed and images,
are joined into one table, JSON and plot without training anything:

    python benchmarks/cifar10_budget.py --merge ours.json keras_io_cct.json --output cifar10_budget.json \\
        --plot cifar10_budget.png
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

from recipes import flags

MODELS = ("ours", "deit_tiny", "keras_io_vit", "keras_io_cct")
DESCRIPTIONS = {
    "ours": "recipes.cifar10_vit --preset cifar10_cpu --time-budget",
    "deit_tiny": "DeiT-tiny's sizes and training recipe, through recipes.cifar10_vit",
    "keras_io_vit": "keras.io ViT example (Salama), re-implemented",
    "keras_io_cct": "keras.io CCT example (Paul), re-implemented",
}
# The model flags of each run of the recipe: ours as users run it; DeiT-tiny (Touvron et al. 2021, timm's
# `deit_tiny_patch16_224`: width 192, 12 blocks of 3 heads, a [CLS] token) on 4x4 patches of the 32x32 images, with
# DeiT's training recipe where the recipe has it: RandAugment of magnitude 9 (of 10), MixUp 0.8, CutMix 1.0, label
# smoothing 0.1, stochastic depth 0.1, AdamW with weight decay 0.05 and a peak learning rate of 5e-4 x batch / 512.
RECIPE_MODELS = {
    "ours": ["--preset", "cifar10_cpu"],
    "deit_tiny": ["--preset", "ViT-Ti/16", "--patch-size", "4", "--randaugment", "0.9", "--mixup", "0.8",
                  "--cutmix", "1.0", "--label-smoothing", "0.1", "--drop-path", "0.1", "--weight-decay", "0.05",
                  "--learning-rate", str(5e-4 * 128 / 512)],
}
# The two versions of the keras.io ViT page: the width of the tokens and the sizes of each block's MLP.
KERAS_IO_VIT_VERSIONS = {"2021": dict(width=64, block_mlp=(128, 64)), "current": dict(width=256, block_mlp=(512, 256))}
MOST_EPOCHS = 10_000  # the keras.io models' epochs are set by the budget alone


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=flags.HelpFormatter)
    parser.add_argument("--image-dir", default=None, metavar="PATH",
                        help="an extracted CIFAR-10 folder: PATH/{train,test}/<class>/*.jpg|png (required to train)")
    parser.add_argument("--merge", nargs="+", default=None, metavar="REPORT.json",
                        help="join reports written by earlier runs (same budget, seed and images) instead of "
                             "training: write --output and --plot from them and print the table")
    parser.add_argument("--minutes", type=flags.positive_float, default=60.0, help="the budget of every model")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="which to train, in order")
    parser.add_argument("--output", default="cifar10_budget.json", metavar="FILE.json", help="where to write results")
    parser.add_argument("--plot", default=None, metavar="FILE.png",
                        help="also draw validation (per epoch) and test accuracy against minutes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the held-out images, weights and shuffling")
    parser.add_argument("--validation-images", type=flags.positive_int, default=5000, metavar="N",
                        help="training images held out for per-epoch validation")
    parser.add_argument("--train-images", type=flags.positive_int, default=None, metavar="N",
                        help="train on only N of the remaining images (tests and smoke runs); None = all")
    parser.add_argument("--test-images", type=flags.positive_int, default=None, metavar="N",
                        help="score only N test images (tests and smoke runs); None = all")
    parser.add_argument("--keras-io-vit", choices=tuple(KERAS_IO_VIT_VERSIONS), default="2021",
                        help="which version of the keras.io ViT page to follow (see the module docstring)")
    parser.add_argument("--keras-io-path", choices=("ours", "float32"), default="ours",
                        help="the keras.io models' dtype policy and jit_compile: `ours` = the path ours' recipe "
                             "takes on this machine and backend (its measured fast path), so that both get it; "
                             "`float32` = Keras' defaults, as the pages train")
    parser.add_argument("--run-dir", default=None,
                        help="folder for ours' recipe run (ours/) and the keras.io models' best weights; None = a new "
                             "temporary folder")
    args = parser.parse_args(argv)
    if args.merge and args.image_dir:
        parser.error("--merge joins earlier reports and trains nothing: drop --image-dir")
    if args.image_dir is None and not args.merge:
        parser.error("--image-dir is required to train (or pass --merge REPORT.json ... to join earlier reports)")
    return args


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # --help and flag errors answer before the models are built

from recipes import fast_paths, fitting  # noqa: E402  (first: it keeps TensorFlow off the GPUs on JAX and PyTorch)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import layers  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from keras_tfm.callbacks import TimeBudget  # noqa: E402
from keras_tfm.data import cifar10  # noqa: E402


class EpochLog(keras.callbacks.Callback):
    """Minutes since `fit` began and validation accuracy at the end of every epoch (and the model's size)."""

    def on_train_begin(self, logs=None):
        self.started = time.monotonic()
        self.epochs = []
        self.parameters = self.model.count_params()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.epochs.append({"epoch": epoch + 1, "minutes": round((time.monotonic() - self.started) / 60, 3),
                            "validation_accuracy": float(logs.get("val_accuracy", math.nan))})


# --------------------------------------------------------------------------------------------------------------
# The keras.io models, as their pages describe them: plain Keras layers, benchmark code only.


class Patches(layers.Layer):
    """Images cut into non-overlapping `patch_size` squares, each flattened: (batch, patches, patch_size² · 3)."""

    def __init__(self, patch_size, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size

    def call(self, images):
        patches = keras.ops.image.extract_patches(images, self.patch_size)  # (batch, rows, columns, p * p * 3)
        rows, columns, values = patches.shape[1:]
        return keras.ops.reshape(patches, (-1, rows * columns, values))  # (batch, patches, p * p * 3)


class PositionEmbedding(layers.Layer):
    """Adds a learned vector per token position (initialised like `keras.layers.Embedding`)."""

    def build(self, input_shape):
        self.table = self.add_weight(shape=tuple(input_shape[1:]), initializer="uniform", name="table")

    def call(self, tokens):
        return tokens + self.table  # (batch, tokens, width)


class StochasticDepth(layers.Layer):
    """Drops a residual branch for a random `rate` of the examples while training, scaling the rest up."""

    def __init__(self, rate, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate
        self.seed_generator = keras.random.SeedGenerator()

    def call(self, branch, training=None):
        if not training or self.rate == 0:
            return branch
        keep = 1.0 - self.rate
        shape = (keras.ops.shape(branch)[0],) + (1,) * (len(branch.shape) - 1)  # one draw per example
        mask = keras.ops.floor(keep + keras.random.uniform(shape, seed=self.seed_generator))  # drawn in float32
        return branch / keep * keras.ops.cast(mask, branch.dtype)  # in the branch's dtype under a mixed policy


def mlp(x, units, dropout):
    for width in units:
        x = layers.Dropout(dropout)(layers.Dense(width, activation="gelu")(x))
    return x


def encoder_block(tokens, num_heads, key_dim, mlp_units, epsilon, drop_path=0.0):
    """A pre-norm Transformer block as both pages write it: attention and MLP, each added back to its input."""
    normed = layers.LayerNormalization(epsilon=epsilon)(tokens)
    attended = layers.MultiHeadAttention(num_heads=num_heads, key_dim=key_dim, dropout=0.1)(normed, normed)
    if drop_path:
        attended = StochasticDepth(drop_path)(attended)
    tokens = layers.Add()([attended, tokens])
    transformed = mlp(layers.LayerNormalization(epsilon=epsilon)(tokens), mlp_units, 0.1)
    if drop_path:
        transformed = StochasticDepth(drop_path)(transformed)
    return layers.Add()([transformed, tokens])


def to_float(images):
    return tf.cast(images, tf.float32)


def keras_io_vit(train_images, num_classes, version="2021"):
    """The keras.io ViT: 72x72 images in 6x6 patches, 8 blocks, tokens flattened into a [2048, 1024] MLP head."""
    size = KERAS_IO_VIT_VERSIONS[version]
    augmentation = keras.Sequential([
        # Adapted below to the training images' mean and variance; in float32 under a mixed policy too (its
        # statistics are float32 variables, which adapting in bfloat16 cannot update).
        layers.Normalization(dtype="float32"),
        layers.Resizing(72, 72),
        layers.RandomFlip("horizontal"),
        layers.RandomRotation(0.02),
        layers.RandomZoom(height_factor=0.2, width_factor=0.2),
    ], name="data_augmentation")
    augmentation.layers[0].adapt(tf.data.Dataset.from_tensor_slices(train_images).batch(1024).map(to_float))

    inputs = keras.Input((32, 32, 3))
    patches = Patches(6)(augmentation(inputs))  # (batch, 144, 108)
    tokens = PositionEmbedding()(layers.Dense(size["width"])(patches))  # (batch, 144, width)
    for _ in range(8):
        tokens = encoder_block(tokens, num_heads=4, key_dim=64, mlp_units=size["block_mlp"], epsilon=1e-6)
    representation = layers.Flatten()(layers.LayerNormalization(epsilon=1e-6)(tokens))  # (batch, 144 * width)
    features = mlp(layers.Dropout(0.5)(representation), (2048, 1024), 0.5)
    # The logits in float32 under a mixed policy, as Keras' mixed precision guide advises (no change in float32).
    return keras.Model(inputs, layers.Dense(num_classes, dtype="float32")(features), name="keras_io_vit")


def keras_io_cct(num_classes):
    """The keras.io CCT: a two-convolution tokenizer (64 tokens), 2 blocks, sequence pooling."""
    augmentation = keras.Sequential([
        layers.Rescaling(1.0 / 255),
        layers.RandomCrop(32, 32),  # as on the page; a 32x32 crop of a 32x32 image leaves it as it is
        layers.RandomFlip("horizontal"),
    ], name="data_augmentation")
    tokenizer = keras.Sequential(name="tokenizer")
    for filters in (64, 128):
        tokenizer.add(layers.Conv2D(filters, 3, padding="valid", use_bias=False, activation="relu",
                                    kernel_initializer="he_normal"))
        tokenizer.add(layers.ZeroPadding2D(1))
        tokenizer.add(layers.MaxPooling2D(3, 2, padding="same"))  # 32 -> 16 -> 8

    inputs = keras.Input((32, 32, 3))
    feature_map = tokenizer(augmentation(inputs))  # (batch, 8, 8, 128)
    tokens = PositionEmbedding()(layers.Reshape((-1, 128))(feature_map))  # (batch, 64, 128)
    for rate in np.linspace(0.0, 0.1, 2):
        tokens = encoder_block(tokens, num_heads=2, key_dim=128, mlp_units=(128, 128), epsilon=1e-5,
                               drop_path=float(rate))
    tokens = layers.LayerNormalization(epsilon=1e-5)(tokens)
    # Sequence pooling: a learned weight per token, softmax over the tokens, the weighted sum of the tokens.
    weights = layers.Softmax(axis=1)(layers.Dense(1)(tokens))  # (batch, 64, 1)
    pooled = layers.Flatten()(layers.Dot(axes=1)([weights, tokens]))  # (batch, 128)
    return keras.Model(inputs, layers.Dense(num_classes, dtype="float32")(pooled), name="keras_io_cct")


# --------------------------------------------------------------------------------------------------------------
# Training under the budget.


def load_data(args):
    """The recipe's split of the same folder: training arrays, held-out validation arrays, test arrays."""
    train, test, class_names = cifar10.load(image_dir=args.image_dir, seed=args.seed)
    train, validation = cifar10.holdout(train, args.validation_images, args.seed)
    if args.train_images:
        train = train.take(args.train_images)
    if args.test_images:
        test = test.take(args.test_images)
    return cifar10.to_arrays(train), validation, cifar10.to_arrays(test), class_names


def batches(images, labels, batch_size, one_hot, num_classes, seed=None):
    """Float32 [0, 255] images (the models augment and rescale them) with sparse or one-hot labels."""
    def floats(images, labels):
        return tf.cast(images, tf.float32), tf.one_hot(labels, num_classes) if one_hot else labels

    data = tf.data.Dataset.from_tensor_slices((images, labels))
    if seed is not None:
        data = data.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
    return data.batch(batch_size).map(floats).prefetch(tf.data.AUTOTUNE)


def keras_io_path(args):
    """`(dtype policy, jit_compile)` for the keras.io models: with `--keras-io-path ours`, what the recipe's
    `--mixed-precision auto --jit auto` resolve to for ours' model on this machine and backend (`fast_paths.fast_path`:
    its measured fast path, where one is measured for this CPU), so both sides train on the same path."""
    if args.keras_io_path == "float32":
        return "float32", "auto"
    recipe_flags = argparse.Namespace(mixed_precision="auto", jit="auto", distribute="none", quick=False)
    policy, _ = fast_paths.fast_path(recipe_flags, "cifar10_vit --preset cifar10_cpu", keras.backend.backend())
    return policy, recipe_flags.jit


def train_keras_io(name, args, data, run_dir):
    """One keras.io model on its page's recipe, for the epochs the budget allows; scored with its best epoch."""
    (train_images, train_labels), validation, (test_images, test_labels), class_names = data
    num_classes = len(class_names)
    keras.backend.clear_session()
    keras.utils.set_random_seed(args.seed)
    policy, jit_compile = keras_io_path(args)
    keras.config.set_dtype_policy(policy)  # before the model is built: its layers take the policy then
    if name == "keras_io_vit":
        model = keras_io_vit(train_images, num_classes, args.keras_io_vit)
        batch_size, one_hot = 256, False
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    else:
        model = keras_io_cct(num_classes)
        batch_size, one_hot = 128, True
        loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
        accuracy = keras.metrics.CategoricalAccuracy(name="accuracy")
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-4), loss=loss,
                  metrics=[accuracy], jit_compile=jit_compile)
    best = os.path.join(run_dir, f"{name}.weights.h5")
    log = EpochLog()
    callbacks = [TimeBudget(args.minutes),  # no schedule: the pages' learning rate stays constant
                 keras.callbacks.ModelCheckpoint(best, monitor="val_accuracy", save_best_only=True,
                                                 save_weights_only=True),
                 log]
    model.fit(batches(train_images, train_labels, batch_size, one_hot, num_classes, seed=args.seed),
              validation_data=batches(*validation, batch_size, one_hot, num_classes), epochs=MOST_EPOCHS,
              shuffle=False, callbacks=callbacks, verbose=fitting.fit_verbosity())  # the pipeline shuffles
    model.load_weights(best)  # the epoch with the best validation accuracy, as the pages do
    logits = model.predict(batches(test_images, test_labels, batch_size, one_hot, num_classes), verbose=0)
    return {"test_accuracy": float(np.mean(logits.argmax(-1) == test_labels)), "epochs": log.epochs,
            "scored_weights": "best validation epoch", "parameters": log.parameters,
            "path": {"dtype_policy": policy, "jit_compile": jit_compile}}


def train_recipe(name, args, run_dir):
    """The recipe as users run it, with `RECIPE_MODELS[name]`'s flags and the same images, seed and budget."""
    from recipes import cifar10_vit

    output_dir = os.path.join(run_dir, name)
    shutil.rmtree(output_dir, ignore_errors=True)  # never resume an earlier benchmark's run
    argv = RECIPE_MODELS[name] + ["--time-budget", str(args.minutes), "--image-dir", args.image_dir,
            "--seed", str(args.seed), "--validation-images", str(args.validation_images),
            "--output-dir", output_dir, "--no-attention-maps"]
    if args.train_images:
        argv += ["--train-samples", str(args.train_images)]
    if args.test_images:
        argv += ["--test-samples", str(args.test_images)]
    keras.backend.clear_session()
    log = EpochLog()
    summary = cifar10_vit.main(argv, extra_callbacks=[log])
    precision = summary["flags"]["mixed_precision"]  # the path the recipe resolved its "auto" flags to
    return {"test_accuracy": summary["metrics"]["test_accuracy"], "epochs": log.epochs,
            "scored_weights": "last epoch", "parameters": log.parameters, "run_dir": output_dir,
            "recipe_flags": argv, "path": {"dtype_policy": f"mixed_{precision}" if precision else "float32",
                                           "jit_compile": summary["flags"]["jit"]}}


def usable_cpus():
    """The cores this process may run on (`taskset` narrows them; macOS has no affinity: all of them)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def plot(results, minutes, path, cpus=None):
    """Validation accuracy after every epoch (lines) and the final test accuracy (stars) against minutes; the
    budget is the dashed line (each model stops after the whole epochs that fit in it)."""
    figure = Figure(figsize=(7, 4.5))
    ax = figure.subplots()
    ax.axvline(minutes, color="gray", linestyle="--", linewidth=1)
    for name, result in results.items():
        ends = [epoch["minutes"] for epoch in result["epochs"]]
        line, = ax.plot(ends, [epoch["validation_accuracy"] for epoch in result["epochs"]], marker=".",
                        label=f"{name} (validation)")
        ax.plot(ends[-1:], [result["test_accuracy"]], marker="*", markersize=14, linestyle="none",
                color=line.get_color(), label=f"{name} test {result['test_accuracy']:.3f}")
    ax.set_xlabel("minutes of training")
    ax.set_ylabel("accuracy (validation per epoch; test at the end)")
    on = f" on {cpus} CPU core{'s' if cpus != 1 else ''}" if cpus else ""
    ax.set_title(f"CIFAR-10 in {minutes:g} minutes{on}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def table(results):
    """Markdown rows: the path trained on (dtype policy, jit_compile; "–" where a report predates recording it),
    epochs, minutes, last and best validation accuracy, test accuracy, ours / this."""
    ours = results.get("ours", {}).get("test_accuracy")
    rows = ["| model | path | epochs | minutes | validation (last / best) | test accuracy | ours / this |",
            "|---|---|---|---|---|---|---|"]
    for name, result in results.items():
        validation = [epoch["validation_accuracy"] for epoch in result["epochs"]]
        ratio = f"{ours / result['test_accuracy']:.2f}×" if ours is not None and result["test_accuracy"] else "–"
        path = result.get("path")
        path = f"{path['dtype_policy']}, jit_compile={path['jit_compile']}" if path else "–"
        rows.append(f"| {name} | {path} | {len(result['epochs'])} | {result['epochs'][-1]['minutes']:.1f} | "
                    f"{validation[-1]:.4f} / {max(validation):.4f} | {result['test_accuracy']:.4f} | {ratio} |")
    return "\n".join(rows)


# The settings every model of one table must have run with.
SHARED_SETTINGS = ("minutes", "seed", "validation_images", "train_images", "test_images")


def merge(paths):
    """One report from the reports of runs made apart: their shared settings, which must agree, and every model's
    result with the machine it ran on (load included) and the report it came from."""
    reports = []
    for path in paths:
        with open(path) as file:
            report = json.load(file)
        if not isinstance(report, dict) or "models" not in report:
            raise ValueError(f"`--merge` takes reports written by this benchmark. Received: {path}, which has no "
                             "'models'")
        reports.append((path, report))
    first_path, first = reports[0]
    merged = {key: first.get(key) for key in SHARED_SETTINGS + ("image_dir",)}
    models = {}
    for path, report in reports:
        for key in SHARED_SETTINGS:
            if report.get(key) != merged[key]:
                raise ValueError(f"Reports merged into one table must share `{key}`. Received: {key}="
                                 f"{report.get(key)!r} in {path} but {key}={merged[key]!r} in {first_path}")
        for name, result in report["models"].items():
            if name in models:
                raise ValueError(f"Model {name!r} is in two reports, {models[name]['report']} and {path}; "
                                 "merge one run of each model")
            models[name] = dict(result)  # a model from a merged report keeps its own machine and report
            models[name].setdefault("report", path)
            models[name].setdefault("machine", report.get("machine"))
            if name == "keras_io_vit":
                models[name].setdefault("keras_io_vit_version", report.get("keras_io_vit_version"))
    merged["models"] = {name: models[name] for name in MODELS if name in models}
    return merged


def save(report, path):
    with open(path, "w") as file:
        json.dump(report, file, indent=2)


def publish(report, args, cpus):
    """The table and where the JSON went, printed; the plot drawn if `--plot` asks for it."""
    print("\n" + table(report["models"]) + f"\n\nwrote {args.output}")
    if args.plot:
        plot(report["models"], report["minutes"], args.plot, cpus=cpus)
        print(f"wrote {args.plot}")


def main(argv=None):
    args = parse_args(argv)
    if args.merge:
        report = merge(args.merge)
        save(report, args.output)
        cpus = {(result.get("machine") or {}).get("cpus_usable") for result in report["models"].values()}
        publish(report, args, cpus=cpus.pop() if len(cpus) == 1 else None)
        return report
    load_at_start = os.getloadavg()  # other work on the machine slows every model; the JSON says how much there was
    run_dir = args.run_dir or tempfile.mkdtemp(prefix="cifar10_budget_")
    os.makedirs(run_dir, exist_ok=True)
    data = load_data(args) if set(args.models) - set(RECIPE_MODELS) else None  # the recipe loads its own alike
    results = {}

    def write_report():  # after every model, so that a later model's failure loses none of the earlier runs
        report = {
            "minutes": args.minutes, "seed": args.seed, "image_dir": args.image_dir,
            "validation_images": args.validation_images, "train_images": args.train_images,
            "test_images": args.test_images, "keras_io_vit_version": args.keras_io_vit,
            "machine": {"cpus": os.cpu_count(), "cpus_usable": usable_cpus(),
                        "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg(),
                        "backend": keras.backend.backend(), "keras": keras.__version__,
                        "tensorflow": tf.__version__},
            "models": results,
        }
        save(report, args.output)
        return report

    for name in args.models:
        started = time.monotonic()
        print(f"\n=== {name}: {DESCRIPTIONS[name]}, {args.minutes:g} minutes ===", flush=True)
        results[name] = (train_recipe(name, args, run_dir) if name in RECIPE_MODELS
                         else train_keras_io(name, args, data, run_dir))
        results[name].update(description=DESCRIPTIONS[name], epochs_trained=len(results[name]["epochs"]),
                             wall_minutes=round((time.monotonic() - started) / 60, 2))
        report = write_report()
    publish(report, args, cpus=usable_cpus())
    return report


if __name__ == "__main__":
    main()
