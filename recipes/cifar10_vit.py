"""Train a Vision Transformer on CIFAR-10 from scratch (or fine-tune pretrained ViT weights) and look at its attention.

The images are cut into 4x4 patches (64 tokens + [CLS]); augmentation runs in tf.data on the CPU while the
model trains. 10% of the training images, at most 5,000 (5,000 of CIFAR-10's 50,000), are held out (stratified,
seeded; `--validation-images`) and validate every epoch; the test images are scored once, after training. The
run then holds the test accuracy (summary.json), a confusion matrix, and for eight fixed test images where the
model looks: the patches the [CLS] token drew on (attention rollout, `rollout/`), or for a pooled preset (no [CLS]
token) the patches whose hiding lowers the predicted class's score most (occlusion, `occlusion/`); all eight on
one colour scale in `where_it_looks.png`.

    python -m recipes.cifar10_vit --randaugment --mixup --cutmix   # the >= 90% run: 100 epochs, one GPU
    python -m recipes.cifar10_vit                                  # crop + flip only
    python -m recipes.cifar10_vit --image-dir ~/data/cifar10       # PNG/JPEG folders instead of tensorflow-datasets
    python -m recipes.cifar10_vit --quick                          # tiny: checks that everything runs (CPU, < 1 min)
    python -m recipes.cifar10_vit --preset cifar10_cpu --time-budget 60   # what a CPU can learn in an hour

A time budget (`--time-budget MINUTES`) trains as many epochs as fit: the first epoch's duration tells how many,
the learning-rate schedule (warm-up, cosine decay to 0) is re-planned for exactly those, and training stops after
them; if later epochs turn out slower, the plan is shortened after each (from their mean duration) so the decay
still ends inside the budget; `--epochs` is then the most it may run. Preset "cifar10_cpu" is made for it: a
convolutional stem (CCT), locality self-attention and sequence pooling, the options that let a small ViT learn
from small data (`keras_tfm.models.ViT`: `tokenizer`, `locality`, `pool`). Measured: 82.3% test accuracy with
`--time-budget 60` on 2 CPU cores (43 epochs; README, "CIFAR-10 in an hour").

Defaults, chosen for >= 90% test accuracy within 100 epochs on one GPU from scratch. They follow DeiT's
training (Touvron et al. 2021) as small-data ViT work uses it (e.g. Lee et al. 2021, "Vision Transformer for
Small-Size Datasets"): preset "small" (dim 192, 6 blocks, 4 heads, MLP 384, 1.8 M parameters, 4x4 patches),
100 epochs of batch 128, AdamW with peak learning rate 1e-3, 10 warm-up epochs then cosine decay to 0, weight
decay 0.05 (not on biases, norms, [CLS] token and position table), gradient clipping at norm 1, label smoothing
0.1, stochastic depth 0.1. Data: random crops after 4-pixel zero padding and horizontal flips, always. A ViT
has no convolutional prior, so on 50,000 images it also needs the strong augmentations to pass 90%:
`--randaugment` (2 random operations per image, strength 0.5), `--mixup` (alpha 0.8) and `--cutmix` (factor
1.0; with both, each batch gets one of the two). Without them expect the high 80s at best. Both figures are
targets and estimates, not measurements: the full runs need a GPU and were not made here; `--quick` and short
CPU runs were.

Data: tensorflow-datasets "cifar10", downloaded into its default folder, or a prepared copy in `--data-dir`
(not downloaded into unless `--download`); or `--image-dir PATH` with PATH/{train,test}/<class>/*.png|jpg.
Without data or network the recipe says how to provide the data and exits with status 2.

Fine-tuning: `--pretrained PATH` (an original-ViT `.npz`; a timm `.safetensors` or `.pth`; a HuggingFace ViT or
DINOv2 folder or `.safetensors`) builds the model from the checkpoint's own shape (`ViT.from_pretrained`: its
patch size, width, depth, heads, its pixel normalisation), loads the weights with the position table resampled to
`--image-size`, and puts a fresh 10-class head on the [CLS] token. The 32x32 images are resized up to
`--image-size` (default with --pretrained: 112, eight patches of 14 or seven of 16 a side); `--freeze-blocks N`
keeps the patch embedding and the lowest N blocks as loaded, so the backward pass stops above them:

    python -m recipes.cifar10_vit --pretrained checkpoints/dinov2-vits14 --freeze-blocks 8 --time-budget 60
    python -m recipes.cifar10_vit --pretrained ViT-B_16.npz --image-size 224 --epochs 10 --batch-size 64

With --pretrained the defaults are those of a short fine-tune: 3 epochs of batch 64, peak learning rate 1e-4,
no stochastic depth; flags given on the command line win.

Mixed precision, XLA and data parallelism: `--mixed-precision`, `--jit`, `--distribute mirrored` (every local GPU),
`multiworker` (several machines, README "More than one machine") or `data_parallel` (JAX) (recipes.devices).
"""

import os
import sys
import time

import keras
import numpy as np

from keras_tfm.callbacks import AttentionMapCallback, TimeBudget
from keras_tfm.data import cifar10
from keras_tfm.insight import visualize
from keras_tfm.insight.attention_probe import attention_maps
from keras_tfm.insight.attribution import occlusion_map
from keras_tfm.models import ViT
from keras_tfm.models.vit_weights import checkpoint_arguments
from keras_tfm.presets import VIT_PRESETS
from keras_tfm.schedules import PlannedWarmupCosine

from recipes import common, devices, fast_paths, fitting, flags, runs
from recipes.progress import ExpectedTime

PRESETS = tuple(sorted(VIT_PRESETS))
PATCH_SIZES = {name: preset["patch_size"] for name, preset in VIT_PRESETS.items()}
# Held out for validation unless --validation-images says otherwise: this share of the training images, at most
# this many (CIFAR-10: 5,000 of 50,000).
VALIDATION_SHARE, MOST_VALIDATION_IMAGES = 0.1, 5000

# Flags that shape the model's weights: a stopped run resumes only with the values it was started with.
MODEL_FLAGS = ("preset", "patch_size", "image_size", "pretrained")


def parse_args(argv):
    parser = flags.recipe_parser(__doc__.splitlines()[0], epochs=100, batch_size=128, learning_rate=1e-3)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data-dir", default=None,
                        help="tensorflow-datasets folder with a prepared cifar10; None = ~/tensorflow_datasets")
    source.add_argument("--image-dir", default=None, metavar="PATH",
                        help="read PATH/{train,test}/<class>/*.png|jpg instead of tensorflow-datasets")
    parser.add_argument("--skip-bad-images", action="store_true",
                        help="with --image-dir: leave out image files that are corrupt or truncated (their count is "
                             "printed) instead of stopping with their names")
    parser.add_argument("--download", action="store_true",
                        help="download into --data-dir when it holds no copy (tfds' own folder is always filled)")
    parser.add_argument("--preset", choices=PRESETS, default=None,
                        help="model size; None = small, or tiny with --quick")
    parser.add_argument("--patch-size", type=flags.positive_int, default=None,
                        help="override the preset's patch size; must divide --image-size")
    parser.add_argument("--image-size", type=flags.positive_int, default=None,
                        help="images are resized to this size; default 32, or 112 with --pretrained")
    parser.add_argument("--drop-path", type=flags.fraction, default=None,
                        help="stochastic depth of the last block; default 0.1, or 0 with --pretrained")
    parser.add_argument("--weight-decay", type=flags.non_negative_float, default=0.05, help="AdamW weight decay")
    parser.add_argument("--label-smoothing", type=flags.fraction, default=0.1, help="label smoothing of the loss")
    parser.add_argument("--randaugment", type=flags.fraction, nargs="?", const=0.5, default=0.0, metavar="STRENGTH",
                        help="RandAugment, 2 operations per image, of this strength; given alone: 0.5; 0 = off")
    parser.add_argument("--mixup", type=flags.non_negative_float, nargs="?", const=0.8, default=0.0, metavar="ALPHA",
                        help="MixUp with this alpha; given alone: 0.8; 0 = off")
    parser.add_argument("--cutmix", type=flags.non_negative_float, nargs="?", const=1.0, default=0.0, metavar="FACTOR",
                        help="CutMix with this factor; given alone: 1.0; 0 = off")
    parser.add_argument("--pretrained", default=None, metavar="PATH",
                        help="fine-tune this ViT checkpoint (.npz, .safetensors, .pth, or a HuggingFace folder); the "
                             "model takes the checkpoint's sizes, the head is trained from scratch")
    parser.add_argument("--freeze-blocks", type=flags.non_negative_int, default=0, metavar="N",
                        help="with --pretrained: keep the patch embedding and the lowest N blocks as loaded")
    parser.add_argument("--train-samples", type=flags.positive_int, default=None, metavar="N",
                        help="use only N training images")
    parser.add_argument("--test-samples", type=flags.positive_int, default=None, metavar="N",
                        help="use only N test images")
    parser.add_argument("--validation-images", type=flags.non_negative_int, default=None, metavar="N",
                        help="hold out N training images (stratified, drawn with --seed) to validate on every epoch; "
                             "0 = no validation; default: 10%% of the training images, at most 5,000 (CIFAR-10: "
                             "5,000 of 50,000). The test images are only scored once, after training")
    parser.add_argument("--time-budget", type=flags.positive_float, default=None, metavar="MINUTES",
                        help="train for about MINUTES: the epochs that fit are estimated from the first one, the "
                             "learning-rate schedule is planned for them, and training stops after them; slower "
                             "epochs later shorten the plan (--epochs is then the most); None = exactly --epochs")
    args = parser.parse_args(argv)
    if args.quick:
        flags.apply_quick(args, epochs=1, train_samples=384, test_samples=128)
        if args.validation_images is not None:
            args.validation_images = min(args.validation_images, 64)
    if args.pretrained:
        check_pretrained_flags(parser, args, argv)
        return args
    if args.freeze_blocks:
        parser.error("--freeze-blocks keeps blocks of a pretrained checkpoint as loaded: give --pretrained PATH too")
    args.image_size = args.image_size or 32
    args.drop_path = 0.1 if args.drop_path is None else args.drop_path
    args.preset = args.preset or ("tiny" if args.quick else "small")
    patch_size = args.patch_size or PATCH_SIZES[args.preset]
    if args.image_size % patch_size:
        source = "--patch-size" if args.patch_size else f"the patch size of preset {args.preset!r}"
        parser.error(f"{source} ({patch_size}) must divide --image-size ({args.image_size})")
    return args


def check_pretrained_flags(parser, args, argv):
    """With `--pretrained`: the checkpoint sets the model's sizes, so the flags that would set them are errors;
    a path that is neither a file nor a folder is one too, said before anything is written. The fine-tuning
    defaults (`--epochs 3`, `--batch-size 64`, `--learning-rate 1e-4`, no stochastic depth, 112-pixel images)
    fill in the flags not given."""
    given = {argument.split("=")[0] for argument in (argv if argv is not None else sys.argv[1:])}
    if args.preset or args.patch_size:
        parser.error("--pretrained takes the model's sizes and patch size from the checkpoint: leave out --preset "
                     "and --patch-size")
    if not os.path.exists(args.pretrained):
        parser.error(f"--pretrained: no file or folder {args.pretrained}")
    defaults = dict(epochs=3, batch_size=64, learning_rate=1e-4)
    for name, value in defaults.items():  # --quick sets its own epochs and batch size
        if f"--{name.replace('_', '-')}" not in given and not (args.quick and name != "learning_rate"):
            setattr(args, name, value)
    args.image_size = args.image_size or 112
    args.drop_path = 0.0 if args.drop_path is None else args.drop_path
    args.preset = "pretrained"  # recorded in run.json; the sizes are the checkpoint's


def build_model(args, num_classes):
    """The preset's ViT for `args.image_size`; with `--pretrained`, the checkpoint's own ViT, loaded, with a fresh
    head for the `num_classes` and the lowest `--freeze-blocks` blocks frozen."""
    if args.pretrained:
        model = ViT.from_pretrained(args.pretrained, num_classes=num_classes, image_size=args.image_size,
                                    drop_path=args.drop_path)
        if args.freeze_blocks:
            model.freeze_lower_blocks(args.freeze_blocks)
        trainable = sum(int(np.prod(variable.shape)) for variable in model.trainable_weights)
        print(f"{args.pretrained}: a ViT of {model.depth} blocks of width {model.dim}, patch {model.patch_size}, "
              f"{model.count_params():,} weights, training {trainable:,}"
              + (f" (the patch embedding and the lowest {args.freeze_blocks} blocks frozen)" if args.freeze_blocks
                 else ""))
        return model
    overrides = dict(image_size=args.image_size, num_classes=num_classes, drop_path=args.drop_path)
    if args.patch_size:
        overrides["patch_size"] = args.patch_size
    return ViT.from_preset(args.preset, **overrides)


def check_checkpoint(args):
    """Reads the `--pretrained` checkpoint's shape before the run starts: a file that is not a ViT checkpoint,
    an image size its patches do not divide, or more frozen blocks than it has end the recipe with one line and
    status 2, leaving no run folder."""
    try:
        arguments = checkpoint_arguments(args.pretrained)
    except (ValueError, OSError) as error:
        common.exit_with_error(f"--pretrained {args.pretrained}: {error}")
    patch = arguments["patch_size"]
    if args.image_size % patch:
        common.exit_with_error(f"--image-size {args.image_size}: the checkpoint's patch size ({patch}) must divide "
                               f"it; try {max(1, round(args.image_size / patch)) * patch}")
    if args.freeze_blocks > arguments["depth"]:
        common.exit_with_error(f"--freeze-blocks {args.freeze_blocks}: the checkpoint has {arguments['depth']} "
                               "blocks")


def validation_count(args, training_images):
    """How many of the `training_images` to hold out: `--validation-images`, or VALIDATION_SHARE of them, at most
    MOST_VALIDATION_IMAGES (and at most 64 with `--quick`).

    Args:
        args: the parsed flags.
        training_images: the number of training images before the hold-out.

    Returns:
        The number to hold out (an int >= 0).

    Example:

    >>> validation_count(parse_args([]), 60)
    6
    """
    if args.validation_images is not None:
        return args.validation_images
    held = min(int(training_images * VALIDATION_SHARE), MOST_VALIDATION_IMAGES)
    return min(held, 64) if args.quick else held


def main(argv=None, extra_callbacks=()):
    args = parse_args(argv)
    started = time.time()
    strategy = common.setup(args, f"cifar10_vit --preset {args.preset}")  # presets differ in their fast path
    if args.pretrained:
        check_checkpoint(args)

    # Data: uint8 images; the test split is small enough to hold in memory, in a fixed order.
    download = args.download or args.data_dir is None  # never fill a folder the user named without being asked
    with common.exit_when_data_unavailable():
        train, test, class_names = cifar10.load(args.data_dir, args.image_dir, download=download, seed=args.seed,
                                                   skip_unreadable=args.skip_bad_images)
        training_images = cifar10.num_examples(train)
        args.validation_images = validation_count(args, training_images)  # summary.json records the number
        try:
            train, (validation_images, validation_labels) = cifar10.holdout(train, args.validation_images, args.seed)
        except ValueError as error:  # more held out than there are images: a usage error, not a traceback
            print(f"error: --validation-images {args.validation_images}: {error}", file=sys.stderr)
            raise SystemExit(2) from None
    share = args.validation_images / training_images
    print(f"validation: {args.validation_images:,} of the {training_images:,} training images held out "
          f"({'under 1%' if 0 < share < 0.005 else f'{share:.0%}'})")
    if args.train_samples:
        train = train.take(args.train_samples)
        if args.train_samples < training_images - args.validation_images:
            print(f"training on {args.train_samples:,} of the other {training_images - args.validation_images:,} "
                  "(--train-samples)")
    test_images, test_labels = cifar10.to_arrays(test.take(args.test_samples) if args.test_samples else test)
    num_classes = len(class_names)
    train_batches = cifar10.training_pipeline(
        train, args.batch_size, num_classes, args.image_size, randaugment=args.randaugment, mixup=args.mixup,
        cutmix=args.cutmix, seed=args.seed,
    )
    test_batches = cifar10.evaluation_pipeline(test_images, test_labels, args.batch_size, num_classes, args.image_size)
    validation_batches = cifar10.evaluation_pipeline(
        validation_images, validation_labels, args.batch_size, num_classes, args.image_size
    ) if args.validation_images else None
    output_dir = common.start_run("cifar10_vit", args, MODEL_FLAGS)

    # Model and optimiser. Labels are one-hot (label smoothing, MixUp, CutMix), hence the categorical loss.
    # With a time budget the schedule is planned after the first epoch for the epochs that fit (TimeBudget).
    steps = args.epochs * fitting.steps_per_epoch(cifar10.num_examples(train), args.batch_size)
    with devices.strategy_scope(strategy):
        model = build_model(args, num_classes)
        # A time budget plans the schedule's length; the schedule is otherwise the same.
        schedule = PlannedWarmupCosine(args.learning_rate, steps, args.warmup_fraction) if args.time_budget else None
        optimizer = fitting.adamw(args, steps, model=model, schedule=schedule)  # no decay: model.weight_decay_exempt_variables()
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=args.label_smoothing),
            metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
            **fast_paths.compile_options(args),
        )

    # Train, drawing the attention rollout of four fixed held-out images ten times over the run.
    sample = np.asarray(cifar10.resize((validation_images if args.validation_images else test_images)[:4],
                                       args.image_size))
    pictures = [AttentionMapCallback(sample, os.path.join(output_dir, "attention"), kind="image",
                                     class_names=class_names, every_n_epochs=max(1, args.epochs // 10), html=True)]
    # The budget's state is kept with the backup: a resumed run goes on with the rest of it and the same plan.
    budget_state = os.path.join(output_dir, runs.BACKUP, runs.BUDGET_STATE)
    budget = [TimeBudget(args.time_budget, schedule, state_path=budget_state)] if args.time_budget else []
    extra = budget + [ExpectedTime(steps)] + (pictures if args.attention_maps else []) + list(extra_callbacks)
    callbacks = fitting.standard_callbacks(output_dir, extra)
    fit_started = time.time()
    history = model.fit(**devices.fit_data(strategy, train_batches, validation_data=validation_batches),
                        epochs=args.epochs, callbacks=callbacks, verbose=fitting.fit_verbosity())  # the pipeline shuffles
    seconds_per_epoch = (time.time() - fit_started) / max(len(history.epoch), 1)

    # Evaluate, once: accuracy and confusion matrix on the whole test set, never seen during training.
    predicted = model.predict(test_batches, verbose=0).argmax(-1)
    metrics = {"test_accuracy": float(np.mean(predicted == test_labels)), "seconds_per_epoch": seconds_per_epoch,
               "epochs_trained": len(history.epoch)}
    if "val_accuracy" in history.history:
        metrics["validation_accuracy"] = history.history["val_accuracy"][-1]
    print(f"\ntest accuracy {metrics['test_accuracy']:.4f} on {len(test_labels)} images "
          f"({seconds_per_epoch:.0f} s per epoch)")
    visualize.save_figure(visualize.plot_confusion_matrix(test_labels, predicted, class_names),
                          os.path.join(output_dir, "confusion_matrix.png"))

    # Where the output looks, over eight fixed test images: the [CLS] token's attention rollout, or for a pooled
    # ViT (no [CLS] token; its rollout is mostly a position prior) how far the predicted class's score falls when
    # each patch is hidden. One picture per image, and all eight on one colour scale in where_it_looks.png.
    overlays = np.asarray(cifar10.resize(test_images[:8], args.image_size))
    titles = [f"true: {class_names[test_labels[i]]}, predicted: {class_names[predicted[i]]}"
              for i in range(len(overlays))]
    if model.pool == "cls":
        kind, label = "rollout", "share of the [CLS] token's rollout"
        rollout = visualize.attention_rollout(attention_maps(model, overlays))  # (images, tokens, tokens)
        relevance = visualize.rollout_relevance(rollout, num_prefix_tokens=1)  # (images, patches)
        figures = [visualize.plot_image_attention(overlays[i], rollout[i], title=titles[i])
                   for i in range(len(overlays))]
    else:
        kind, label = "occlusion", "share of the score drop when the patch is hidden"
        relevance = occlusion_map(model, overlays)  # (images, rows, columns)
        figures = [visualize.plot_occlusion(overlays[i], relevance[i], title=titles[i]) for i in range(len(overlays))]
    os.makedirs(os.path.join(output_dir, kind), exist_ok=True)
    for i, figure in enumerate(figures):
        visualize.save_figure(figure, os.path.join(output_dir, kind, f"{kind}_{i}.png"))
    grid = model.get_layer("patch_embedding").grid_size(args.image_size, args.image_size)
    visualize.save_figure(visualize.plot_relevance_grid(overlays, np.reshape(relevance, (len(overlays),) + grid),
                                                        titles, label), os.path.join(output_dir, "where_it_looks.png"))

    summary = common.finish(model, output_dir, args, metrics, started)
    print(f"wrote {output_dir} in {summary['wall_time_seconds']:.0f} s")
    if args.attention_maps:
        print(f"attention explorer (open in a browser): {pictures[0].html_path}")
    return summary


if __name__ == "__main__":
    sys.exit(runs.run_main(main))
