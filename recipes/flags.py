"""The recipes' command-line flags: the argparse types and the flags every recipe shares, and
`import_tensorflow_quietly`, which `recipes/__init__.py` calls before any recipe imports Keras.
"""

import argparse
import os
import sys

DISTRIBUTE = ("none", "mirrored", "multiworker", "data_parallel")
PRECISIONS = ("auto", "off", "float16", "bfloat16")  # --mixed-precision


def _argument_type(name, convert, accept, expected):
    """An argparse `type`: `convert(text)`, rejected with "must be {expected}" unless `accept(value)`."""

    def parse(text):
        value = convert(text)
        if not accept(value):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text}")
        return value

    parse.__name__ = name  # argparse names the type in its "invalid ... value" message
    return parse


# argparse types for the recipes' flags (argparse turns the errors into usage errors).
positive_int = _argument_type("positive_int", int, lambda v: v >= 1, "a positive integer")
non_negative_int = _argument_type("non_negative_int", int, lambda v: v >= 0, "an integer >= 0")
positive_float = _argument_type("positive_float", float, lambda v: v > 0, "a positive number")
non_negative_float = _argument_type("non_negative_float", float, lambda v: not v < 0, ">= 0")
fraction = _argument_type("fraction", float, lambda v: 0.0 <= v < 1.0, "in [0, 1)")
share = _argument_type("share", float, lambda v: 0.0 < v < 1.0, "in (0, 1)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: ...)" only where it informs: not for on/off switches, nor for unset options."""

    def _get_help_string(self, action):
        if isinstance(action.default, bool) or action.default is None or action.default == argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


class RecipeParser(argparse.ArgumentParser):
    """Keeps the command-line arguments it parsed as `args.argv` (the command that resumes a run repeats them)."""

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        parsed.argv = list(sys.argv[1:] if args is None else args)
        return parsed


def recipe_parser(description, epochs, batch_size, learning_rate):
    """An ArgumentParser with the flags every training recipe shares."""
    parser = RecipeParser(description=description, formatter_class=HelpFormatter)
    parser.add_argument("--epochs", type=positive_int, default=epochs, help="training epochs")
    parser.add_argument("--batch-size", type=positive_int, default=batch_size, help="global batch size")
    parser.add_argument("--learning-rate", type=positive_float, default=learning_rate, help="peak learning rate")
    parser.add_argument("--warmup-fraction", type=fraction, default=0.1,
                        help="fraction of the steps with a linear learning-rate warm-up (then cosine decay)")
    parser.add_argument("--clipnorm", type=float, default=1.0, help="gradient clipping norm (0 turns it off)")
    parser.add_argument("--decay-all-weights", action="store_true",
                        help="apply weight decay to every weight, biases, norms, position tables and learned tokens "
                             "included (to compare with the default, which exempts model.weight_decay_exempt_variables())")
    parser.add_argument("--accumulate-steps", type=positive_int, default=1, metavar="N",
                        help="average the gradients of N batches before each update (the optimizer's "
                             "gradient_accumulation_steps): the update of an N times larger batch, in the memory "
                             "of one; the learning-rate schedule still counts batches")
    parser.add_argument("--output-dir", default=None,
                        help="where to write the run (default: runs/<recipe>/<timestamp>). An interrupted run in "
                             "that folder resumes; a finished one is left as it is (see --overwrite)")
    parser.add_argument("--overwrite", action="store_true",
                        help="delete a finished run in --output-dir and train again from scratch")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny run on a few hundred examples that checks the whole pipeline runs")
    parser.add_argument("--mixed-precision", nargs="?", const="float16", choices=PRECISIONS, default="auto",
                        help="auto: on a CPU of a measured kind (AMX-BF16, AVX512-BF16, AVX2 only), the path "
                             "benchmarks/fast_path.py measured fastest for this recipe's model and backend on such "
                             "a CPU; elsewhere, and for --quick's tiny model, mixed_bfloat16 where this backend's "
                             "bfloat16 matrix products, run as the training step runs them, are measured at least "
                             "twice as fast as float32 ones (recent GPUs), else float32. off: float32; float16 "
                             "(GPUs; the flag alone) or bfloat16: compute in that type, keeping float32 weights")
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction, default="auto",
                        help="--jit compiles the training step with XLA (TensorFlow), jax.jit (JAX) or "
                             "torch.compile (PyTorch); --no-jit runs it without a compiler (TensorFlow: a graph, "
                             "JAX: op by op). The default: on a CPU of a measured kind, the measured fast path "
                             "(--mixed-precision auto); elsewhere, and with --quick, Keras' jit_compile='auto': "
                             "jax.jit on JAX, XLA on TensorFlow with a GPU and a graph on a CPU, eager on PyTorch")
    parser.add_argument("--steps-per-execution", type=positive_int, default=None, metavar="N",
                        help="training steps per call into the compiled step (Keras' steps_per_execution): "
                             "callbacks and logs see every Nth step. Default: 8 on TensorFlow and JAX, 1 on "
                             "PyTorch (the only value it supports)")
    parser.add_argument("--distribute", choices=DISTRIBUTE, default="none",
                        help="data-parallel training. TensorFlow: mirrored = every local GPU (or CPU device), "
                             "multiworker = one process per machine, the cluster read from TF_CONFIG (the chief "
                             "writes the run). JAX: data_parallel = keras.distribution.DataParallel over the local "
                             "devices")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--no-attention-maps", dest="attention_maps", action="store_false",
                        help="do not draw attention maps during training (they are drawn by default)")
    return parser


def import_tensorflow_quietly():
    """Imports TensorFlow with file descriptor 2 pointed at /dev/null, when a recipe starts (`recipes/__init__.py`).

    Some of its C++ start-up lines (absl's "All log messages before absl::InitializeLog()", the CUDA probe's)
    bypass both Python and `TF_CPP_MIN_LOG_LEVEL`. Python errors still surface after the import. Nothing is
    hidden when TensorFlow is already imported, or when the environment sets `KERAS_TFM_SHOW_TF_LOGS`; without
    TensorFlow installed (another Keras backend) there is nothing to quiet.

    Example:

    >>> import_tensorflow_quietly()  # doctest: +SKIP
    >>> "tensorflow" in sys.modules  # doctest: +SKIP
    True
    """
    if "tensorflow" in sys.modules or os.environ.get("KERAS_TFM_SHOW_TF_LOGS"):
        return
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        import tensorflow as tf

        tf.config.list_physical_devices()  # the CUDA probe logs here, once
    except ImportError:
        pass  # another Keras backend without TensorFlow: nothing to quiet
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def given(args, name):
    """Whether the flag of `args.<name>` was written on the command line (`--train-samples 5`, `--epochs=3`)."""
    flag = "--" + name.replace("_", "-")
    return any(word == flag or word.startswith(flag + "=") for word in getattr(args, "argv", []))


def apply_quick(args, **sizes):
    """`--quick`: sets each `args.<name>` to its quick value (a value, or a function of the current one), except
    the flags written on the command line, which are honoured; prints what it set and what it kept, so that
    `--quick --epochs 6` runs 6 epochs and says so."""
    kept = {name: getattr(args, name) for name in sizes if given(args, name)}
    for name, value in sizes.items():
        if name not in kept:
            setattr(args, name, value(getattr(args, name)) if callable(value) else value)
    changed = ", ".join(f"{name}={getattr(args, name)}" for name in sizes if name not in kept)
    print(f"--quick: {changed}" + (f"; as given: {', '.join(f'{n}={v}' for n, v in kept.items())}" if kept else ""))
