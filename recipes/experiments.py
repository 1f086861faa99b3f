"""Small controlled experiments that answer a learner's "why" about the Transformer, each a few minutes on a CPU.

Every experiment trains the same small model several times, changing one thing, with the same data, seed and
budget, then prints a table and saves a plot:

    position   no positional encoding vs sinusoidal vs learned, on digit reversal and on an order-dependent
               text task. Without positions attention sees a bag of tokens: it cannot reverse, and it cannot
               tell whether "A" came before "B".
    scaling    softmax(QKᵀ/√d_k) vs softmax(QKᵀ), at head sizes 16 and 128. Unscaled logits grow with √d_k, so
               the softmax starts saturated (one key gets all the weight) and learns slowly (§3.2.1).
    heads      1 vs 4 vs 8 heads at the same width (the per-head size shrinks as heads are added; §3.2.2).
    norm       pre-norm vs post-norm (the paper's) at growing learning rates without warm-up or clipping (Xiong
               et al., 2020, found post-norm needs the warm-up; `warmup` tests that here).
    warmup     post-norm at the rates where it failed in `norm`: a constant rate, cosine decay without warm-up,
               and the recipes' 10% warm-up then cosine decay.
    combine    adding the positional encoding to the token vectors (the paper) vs concatenating it (positions in
               their own channels, the token vector narrower) vs concatenating at full width and projecting back
               (the shorter article's advice: W·[e; p] = W_e·e + W_p·p, so this is adding, with a learned map on
               each), at a narrow width (8) and at 64, from 2,000 examples.
    softmax    the attention weights as the softmax of the scores (the paper) vs the raw scaled scores QKᵀ/√d_k
               used as weights (the shorter article's first pitfall).
    clipping   gradient clipping (global norm 1.0) on vs off, pre-norm, no warm-up, at learning rates up to 0.1:
               does any run blow up into NaN, and does clipping rescue it?
    norm_type  LayerNorm vs BatchNorm vs no normalisation in the blocks, on the "A before B?" text task; and how
               much a sample's output moves when its batch mates or the batch's padding change (LayerNorm: not
               at all).
    residual   blocks with vs without residual connections, 2 and 8 blocks deep, the gradient norm logged for
               the whole model and for each block's weights (where in the stack does the gradient fade?).
    decoding   greedy vs top-k vs top-p sampling vs beam search on an under-trained reverser: exact match and
               how often a token repeats the one before it.
    heads_lookup  1 vs 2 vs 4 heads in one narrow block on a task that needs two lookups at once ("is A before
               both B and C?"), with the mean attention distance of each head.

    python -m recipes.experiments position          # one experiment, <= 5 minutes on 2 CPU cores per seed
    python -m recipes.experiments all               # all of them, one after the other
    python -m recipes.experiments scaling --quick   # seconds: checks that it runs (numbers mean nothing)

Every variant is trained once per seed (`--seeds`, default 3: seeds `--seed`, `--seed`+1, ...); the table gives
the mean ± the standard deviation over the seeds. Each experiment writes `<name>.md` (the table), `<name>.json`
(every number, each seed's run and the validation curves included) and `<name>.png` into
`runs/experiments/<timestamp>/` (or `--output-dir`).
"""

import argparse
import json
import os
import sys
import time

import keras
import numpy as np
from keras import ops
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from keras_tfm.callbacks import GradientNormCallback
from keras_tfm.data import digits
from keras_tfm.insight import visualize
from keras_tfm.insight.attention_probe import attention_maps
from keras_tfm.layers import EncoderBlock, MultiHeadAttention, TokenEmbedding
from keras_tfm.models import Seq2SeqTransformer, TextClassifier

from recipes import common, fitting, flags

EXPERIMENT_NAMES = ("position", "scaling", "heads", "norm", "warmup", "combine", "softmax", "clipping", "norm_type",
                    "residual", "decoding", "heads_lookup")  # the keys of EXPERIMENTS below


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=flags.HelpFormatter)
    parser.add_argument("experiment", choices=[*EXPERIMENT_NAMES, "all"], help="which experiment to run")
    parser.add_argument("--epochs", type=flags.positive_int, default=5, help="epochs per training run")
    parser.add_argument("--train-samples", type=flags.positive_int, default=8000, help="training examples")
    parser.add_argument("--test-samples", type=flags.positive_int, default=1000, help="held-out examples")
    parser.add_argument("--batch-size", type=flags.positive_int, default=64, help="batch size of every training run")
    parser.add_argument("--max-digits", type=flags.positive_int, default=8, help="longest digit string")
    parser.add_argument("--seed", type=int, default=0, help="first random seed (data and initial weights)")
    parser.add_argument("--seeds", type=flags.positive_int, default=3,
                        help="runs per variant, with seeds --seed, --seed+1, ...; tables give mean ± sd")
    parser.add_argument("--output-dir", default=None, help="where to write the tables and plots "
                        "(default: runs/experiments/<timestamp>)")
    parser.add_argument("--quick", action="store_true", help="a few seconds per experiment: checks that it runs")
    args = parser.parse_args(argv)
    if args.quick:  # tiny data, and no graph tracing: eager steps are faster than compiling for a few batches
        flags.apply_quick(args, epochs=1, train_samples=128, test_samples=32, max_digits=5,
                          seeds=lambda n: min(n, 2))  # two seeds: enough to exercise the mean and spread
    return args


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


def make_two_lookup_task(samples, length=16, vocab_size=32, seed=0):
    """Like `make_order_task`, plus one "C" (id 3): the label is 1 if A comes before both B and C. The A token
    has to find two other tokens at once, a job for two heads."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, vocab_size, size=(samples, length)).astype("int32")
    labels = np.zeros(samples, "int32")
    for row in range(samples):
        a, b, c = rng.choice(length, size=3, replace=False)
        ids[row, a], ids[row, b], ids[row, c] = 1, 2, 3
        labels[row] = int(a < b and a < c)
    return ids, labels


# Two block variants for the ablations, written out here rather than as options of the library's blocks.

class EncoderBlockWithNorm(EncoderBlock):
    """An `EncoderBlock` whose two norms are LayerNorm ("layer", the Transformer's), BatchNorm ("batch": mean and
    variance over the batch and the positions, so a token's output depends on the other samples in its batch)
    or absent ("none", an identity)."""

    def __init__(self, num_heads, mlp_dim, normalization="layer", **kwargs):
        if normalization not in ("layer", "batch", "none"):
            raise ValueError(f"`normalization` must be 'layer', 'batch' or 'none'. Received: {normalization!r}")
        self.normalization = normalization  # before super().__init__, which makes the norms
        super().__init__(num_heads, mlp_dim, **kwargs)

    def _norm(self, name):
        if self.normalization == "batch":
            return keras.layers.BatchNormalization(epsilon=self.layer_norm_epsilon, name=name)
        if self.normalization == "none":
            return keras.layers.Identity(name=name)
        return super()._norm(name)


class EncoderBlockWithoutResidual(EncoderBlock):
    """A pre-norm `EncoderBlock` without its two residual connections: each sublayer's output replaces its input
    instead of being added to it."""

    def call(self, x, mask=None, x_mask=None, attention_mask=None, return_attention_scores=False, training=None):
        padding = mask if mask is not None else x_mask  # (batch, length) or None
        h = self.attention_norm(x)
        x = self.attention(h, h, query_mask=padding, value_mask=padding, training=training)  # no "x +"
        return self.feed_forward(self.feed_forward_norm(x), training=training)  # no "x +"


class AttentionWithoutSoftmax(MultiHeadAttention):
    """The shorter article's first pitfall: the scaled scores QKᵀ/√d_k used as the weights as they are, without
    the softmax (masked keys get weight 0). The weights are then neither positive nor a distribution: a row can
    sum to anything, and the output's size grows with the scores."""

    def compute_attention(self, query, key, value, mask=None, training=None):
        scores = ops.einsum("bqhd,bkhd->bhqk", query, key) * ops.cast(self.logit_scale, query.dtype)
        if mask is not None:
            scores = ops.where(mask[:, None, :, :], scores, ops.zeros_like(scores))
        weights = ops.cast(scores, value.dtype)  # (batch, heads, query_len, key_len): no softmax
        return ops.einsum("bhqk,bkhd->bqhd", weights, value), weights


class EncoderBlockWithoutSoftmax(EncoderBlock):
    """An `EncoderBlock` whose attention is `AttentionWithoutSoftmax`."""

    def _attention(self, name, locality=False):
        return AttentionWithoutSoftmax.from_config(super()._attention(name, locality).get_config())


class ConcatThenProject(keras.layers.Layer):
    """The shorter article's advice for positions: the token vector e and the position code p side by side,
    [e; p] (`dim` channels each), then a linear map back to `dim`. Since W·[e; p] = W_e·e + W_p·p, this is the
    paper's sum with a learned linear map on each part, not something else."""

    def __init__(self, vocab_size, dim, max_length, **kwargs):
        super().__init__(**kwargs)
        self.embedding = TokenEmbedding(vocab_size, 2 * dim, max_length=max_length, combine="concat")  # [e; p]
        self.project = keras.layers.Dense(dim, name="project")
        self.supports_masking = True

    def call(self, ids):
        return self.project(self.embedding(ids))  # (batch, length, 2 dim) -> (batch, length, dim)

    def compute_mask(self, ids, mask=None):
        return self.embedding.compute_mask(ids)


def encoder_classifier(block, depth, dim=64, num_heads=4, vocab_size=32, length=16, combine="add", **block_kwargs):
    """Token ids -> embedding with positions (added, concatenated, or concatenated then projected:
    `combine="project"`) -> `depth` blocks -> mean over real tokens -> 2 logits."""
    ids = keras.Input((None,), dtype="int32")  # any length up to 2 x `length`: room to add padding
    if combine == "project":
        x = ConcatThenProject(vocab_size, dim, max_length=2 * length)(ids)
    else:
        x = TokenEmbedding(vocab_size, dim, max_length=2 * length, combine=combine)(ids)  # (batch, length, dim) + mask
    for i in range(depth):
        x = block(num_heads, 2 * dim, name=f"block_{i}", **block_kwargs)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)  # (batch, dim)
    return keras.Model(ids, keras.layers.Dense(2)(x))


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


def init_max_weight(model, source, target):
    """How peaked a Seq2SeqTransformer's encoder attention is (before training): the largest weight of each real
    query's row, averaged over the rows, heads and encoder blocks (1.0 = all weight on one key)."""
    maps = attention_maps(model, (source, target[:, :-1]))
    encoder = [record.weights for record in maps.of_kind("encoder")]
    mask = source > 0
    return float(np.mean([m.max(-1).mean(1)[mask].mean() for m in encoder]))


def learning_rate_schedule(learning_rate, steps, warmup):
    """`warmup`: True = 10% linear warm-up then cosine decay over `steps`, a number = that warm-up fraction (0:
    cosine decay alone), False = the constant `learning_rate`."""
    if warmup is False:
        return learning_rate
    return fitting.warmup_cosine(learning_rate, steps, 0.1 if warmup is True else float(warmup))


def train_seq2seq(settings, task="reverse", learning_rate=3e-3, warmup=True, clipnorm=1.0, measure_init=False,
                  keep_model=False, **model_kwargs):
    """Trains a tiny Seq2SeqTransformer on a digit task; returns its held-out exact match (greedy decoding),
    final training loss and validation token-accuracy curve."""
    x_train, y_train = digits.make_dataset(settings.train_samples, settings.max_digits, task, seed=settings.seed)
    x_test, y_test = digits.make_dataset(settings.test_samples, settings.max_digits, task, seed=settings.seed + 1)
    keras.utils.set_random_seed(settings.seed)  # the same initial weights for every variant of the same shape
    vocab = digits.VOCAB_SIZE
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=vocab, target_vocab_size=vocab,
                                           max_length=settings.max_digits + 2, dropout=0.0, **model_kwargs)
    result = {"init_max_weight": init_max_weight(model, x_test[:64], y_test[:64])} if measure_init else {}
    steps = settings.epochs * fitting.steps_per_epoch(len(x_train), settings.batch_size)
    schedule = learning_rate_schedule(learning_rate, steps, warmup)
    model.compile_for_training(keras.optimizers.Adam(schedule, clipnorm=clipnorm), run_eagerly=settings.quick)
    started = time.time()
    history = model.fit((x_train, y_train[:, :-1]), y_train[:, 1:], batch_size=settings.batch_size,
                        epochs=settings.epochs, validation_data=((x_test, y_test[:, :-1]), y_test[:, 1:]), verbose=0,
                        callbacks=[GradientNormCallback()])
    loss = history.history["loss"][-1]
    if keep_model:
        result["model"] = model
    result.update({
        "gradient_norm": [float(v) for v in history.history["gradient_norm"]],
        "exact_match": greedy_exact_match(model, x_test, y_test),
        "final_loss": float(loss),
        "diverged": bool(not np.isfinite(loss)),
        "curve": [float(v) for v in history.history["val_accuracy"]],
        "seconds": round(time.time() - started, 1),
    })
    return result


def train_classifier(settings, build=None, task=make_order_task, learning_rate=1e-3, probe=None,
                     gradient_groups=None, **model_kwargs):
    """Trains a tiny TextClassifier (or the model `build()` returns) on the order task (or `task`); returns
    held-out accuracy, the validation curve and the gradient norm per epoch. `probe(model, x_test)` may add
    numbers measured on the trained model."""
    x_train, y_train = task(settings.train_samples, seed=settings.seed)
    x_test, y_test = task(settings.test_samples, seed=settings.seed + 1)
    keras.utils.set_random_seed(settings.seed)
    if build is None:
        model = TextClassifier.from_preset("tiny", vocab_size=32, max_length=16, num_classes=2, dim=64, depth=2,
                                           num_heads=4, mlp_dim=128, pool="mean", dropout=0.0, **model_kwargs)
    else:
        model = build()
    steps = settings.epochs * fitting.steps_per_epoch(len(x_train), settings.batch_size)
    model.compile(keras.optimizers.Adam(fitting.warmup_cosine(learning_rate, steps, 0.1), clipnorm=1.0),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                  run_eagerly=settings.quick)
    started = time.time()
    history = model.fit(x_train, y_train, batch_size=settings.batch_size, epochs=settings.epochs,
                        validation_data=(x_test, y_test), verbose=0,
                        callbacks=[GradientNormCallback(groups=gradient_groups)])
    per_group = {"block_gradient_norms": [float(history.history[f"gradient_norm_{name}"][0])
                                          for name in gradient_groups]} if gradient_groups else {}
    return {
        **per_group,
        "accuracy": float(history.history["val_accuracy"][-1]),
        "final_loss": float(history.history["loss"][-1]),
        "diverged": bool(not np.isfinite(history.history["loss"][-1])),
        "curve": [float(v) for v in history.history["val_accuracy"]],
        "gradient_norm": [float(v) for v in history.history["gradient_norm"]],
        "seconds": round(time.time() - started, 1),
        **(probe(model, x_test) if probe else {}),
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


def warmup(settings):
    rows = []
    for learning_rate in (3e-3, 1e-2):
        # The warm-up against a constant rate, and against the same cosine decay without the warm-up: which of
        # the two parts of the recipes' schedule does the work?
        for name, use_warmup in (("constant rate", False), ("cosine decay, no warm-up", 0.0),
                                 ("warm-up 10% + cosine decay", True)):
            result = train_seq2seq(settings, learning_rate=learning_rate, warmup=use_warmup, clipnorm=None,
                                   norm_first=False)
            rows.append({"task": "reverse digits", "variant": f"post-norm, lr {learning_rate:g}, {name}", **result})
    return rows


def combine(settings):
    rows = [{"task": "reverse digits", "variant": f"{name} positions, width 64",
             **train_seq2seq(settings, position_combine=name)} for name in ("add", "concat")]
    # The two-lookup task from a quarter of the training examples, at width 8 (2 heads of 4: tokens and positions
    # crowd each other; at width 16 with all 8,000 examples every way reached 1.000) and at width 64.
    short = argparse.Namespace(**{**vars(settings), "train_samples": max(1, settings.train_samples // 4)})
    for dim, num_heads in ((8, 2), (64, 4)):
        for name, how in (("add", "add"), ("concat (half the channels each)", "concat"),
                          ("concat at full width, then project", "project")):
            result = train_classifier(short, build=lambda: encoder_classifier(
                EncoderBlock, depth=2, dim=dim, num_heads=num_heads, combine=how), task=make_two_lookup_task,
                learning_rate=3e-3)
            rows.append({"task": "A before B and C?", "variant": f"{name}, width {dim}", **result})
    return rows


def softmax(settings):
    rows = []
    for task, name in ((make_order_task, "A before B?"), (make_two_lookup_task, "A before B and C?")):
        for variant, block in (("softmax", EncoderBlock), ("raw scores, no softmax", EncoderBlockWithoutSoftmax)):
            result = train_classifier(settings, build=lambda: encoder_classifier(block, depth=2), task=task)
            rows.append({"task": name, "variant": variant, **result})
    return rows


def clipping(settings):
    rows = []
    for learning_rate in (1e-2, 3e-2, 1e-1):
        for name, clipnorm in (("no clipping", None), ("clipnorm 1.0", 1.0)):
            result = train_seq2seq(settings, learning_rate=learning_rate, warmup=False, clipnorm=clipnorm)
            rows.append({"task": "reverse digits", "variant": f"pre-norm, lr {learning_rate:g}, {name}", **result})
    return rows


def batch_dependence(model, x_test):
    """How far sample 0's logits move when its 7 batch mates are swapped for others, with the batch statistics of
    training (`training=True`) and at inference; and how far they move in training when the batch gets 16 more
    padding positions. LayerNorm normalises each token alone: 0 every way."""
    def logits(batch, training):
        return keras.ops.convert_to_numpy(model(batch, training=training))[0]

    batch_a = x_test[:8]
    batch_b = np.concatenate([x_test[:1], x_test[8:15]])
    result = {}
    for name, training in (("batch_dependence_training", True), ("batch_dependence_inference", False)):
        result[name] = float(np.abs(logits(batch_a, training) - logits(batch_b, training)).max())
    padded = np.pad(batch_a, ((0, 0), (0, batch_a.shape[1])))  # the same tokens, twice the padding
    result["padding_dependence_training"] = float(np.abs(logits(batch_a, True) - logits(padded, True)).max())
    return result


def norm_type(settings):
    rows = []
    for name in ("layer", "batch", "none"):
        result = train_classifier(settings, build=lambda: encoder_classifier(EncoderBlockWithNorm, depth=2,
                                                                             normalization=name),
                                  probe=batch_dependence)
        rows.append({"task": "A before B?", "variant": f"{name} norm", **result})
    return rows


def residual(settings):
    rows = []
    for depth in (2, 8):
        for name, block in (("with", EncoderBlock), ("without", EncoderBlockWithoutResidual)):
            # The first epoch's gradient norm of each block's weights, first block first: where does it fade?
            result = train_classifier(settings, build=lambda: encoder_classifier(block, depth=depth),
                                      gradient_groups={f"block_{i}": f"block_{i}/" for i in range(depth)})
            rows.append({"task": "A before B?", "variant": f"{depth} blocks, {name} residuals", **result})
    return rows


def repeat_rate(tokens):
    """Fraction of generated tokens (before the end token) equal to the token just before them."""
    repeats = total = 0
    for row in np.asarray(tokens):
        answer = row[: list(row).index(digits.END)] if digits.END in row else row[row > 0]
        repeats += int(np.sum(answer[1:] == answer[:-1]))
        total += max(len(answer) - 1, 0)
    return repeats / max(total, 1)


def decoding(settings):
    # Under-trained on purpose, so the decoders have mistakes to make: a quarter of the training strings for a
    # fifth of the epochs (at least one). 8,000 strings for one epoch already give 0.77 greedy exact match.
    short = argparse.Namespace(**{**vars(settings), "epochs": max(1, settings.epochs // 5),
                                  "train_samples": max(1, settings.train_samples // 4)})
    trained = train_seq2seq(short, keep_model=True)
    model = trained.pop("model")
    x_test, y_test = digits.make_dataset(settings.test_samples, settings.max_digits, "reverse", seed=settings.seed + 1)
    reference_rate = repeat_rate(y_test[:, 1:])
    rows = []
    for name, options in (("greedy", dict(strategy="greedy")), ("top-k (k=3)", dict(strategy="top_k", k=3)),
                          ("top-p (p=0.9)", dict(strategy="top_p", p=0.9)),
                          ("beam (4 beams)", dict(strategy="beam", num_beams=4))):
        started = time.time()
        tokens = model.generate(x_test, max_new_tokens=settings.max_digits + 1, start_id=digits.START,
                                end_id=digits.END, seed=settings.seed, **options)
        rows.append({"task": "reverse digits, under-trained", "variant": name,
                     "exact_match": digits.exact_match(tokens, y_test), "repeat_rate": repeat_rate(tokens),
                     "reference_repeat_rate": reference_rate, "curve": trained["curve"],
                     "seconds": round(time.time() - started, 1)})
    return rows


def heads_lookup(settings):
    def distances(model, x_test):  # (layers=1, heads) -> one number per head
        maps = attention_maps(model, x_test[:128])
        return {"mean_attention_distance": [float(d) for d in visualize.mean_attention_distance(
            maps, grid=(1, x_test.shape[1]), num_prefix_tokens=0)[0]]}

    rows = []
    for h in (1, 2, 4):
        result = train_classifier(settings, build=lambda: encoder_classifier(EncoderBlock, depth=1, dim=32,
                                                                             num_heads=h),
                                  task=make_two_lookup_task, learning_rate=3e-3, probe=distances)
        rows.append({"task": "A before B and C?", "variant": f"{h} head{'s' if h > 1 else ''} x {32 // h}",
                     **result})
    return rows


EXPERIMENTS = {"position": position, "scaling": scaling, "heads": heads, "norm": norm, "warmup": warmup,
               "combine": combine, "softmax": softmax, "clipping": clipping, "norm_type": norm_type,
               "residual": residual, "decoding": decoding, "heads_lookup": heads_lookup}
# Table columns, when present: means ± standard deviations over the seeds.
METRICS = ("exact_match", "accuracy", "repeat_rate", "reference_repeat_rate", "init_max_weight",
           "batch_dependence_training", "batch_dependence_inference", "padding_dependence_training",
           "first_gradient_norm", "last_gradient_norm",
           "final_loss", "seconds")


def run_seeds(experiment, args):
    """Runs the experiment once per seed and averages each variant's numbers: `<metric>` is the mean,
    `<metric>_sd` the standard deviation over the seeds (ddof=1), lists (curves) are averaged element-wise, and
    `runs` keeps every seed's own numbers."""
    per_seed = []
    for i in range(args.seeds):
        rows = experiment(argparse.Namespace(**{**vars(args), "seed": args.seed + i}))
        for row in rows:
            if "gradient_norm" in row:
                row["first_gradient_norm"] = row["gradient_norm"][0]
                row["last_gradient_norm"] = row["gradient_norm"][-1]
        per_seed.append(rows)
    averaged = []
    for runs in zip(*per_seed):  # the same variant under each seed
        row = {"task": runs[0]["task"], "variant": runs[0]["variant"],
               "seeds": [args.seed + i for i in range(len(runs))]}
        for key, value in runs[0].items():
            values = [run[key] for run in runs]
            if key in ("task", "variant"):
                continue
            if isinstance(value, bool):
                row[f"{key}_runs"] = int(sum(values))  # e.g. how many seeds diverged
                row[key] = bool(any(values))
            elif isinstance(value, (int, float)):
                row[key] = float(np.mean(values))
                row[f"{key}_sd"] = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
            elif isinstance(value, list):
                row[key] = [float(v) for v in np.mean(np.asarray(values, dtype="float64"), axis=0)]
        row["runs"] = [{k: v for k, v in run.items() if k not in ("task", "variant")} for run in runs]
        averaged.append(row)
    return averaged


# ---------------------------------------------------------------------------------------------------------------
# Reporting.


def _cell(row, column):
    if column not in row:
        return ""
    if column == "final_loss" and row.get("diverged"):
        return f"diverged ({row['diverged_runs']}/{len(row['runs'])} seeds)" if "runs" in row else "diverged"
    if column == "seconds":
        return f"{row[column]:.0f}"
    spread = f" ± {row[column + '_sd']:.3f}" if f"{column}_sd" in row else ""
    return f"{row[column]:.3f}{spread}"


def table(rows):
    """The rows as a Markdown table (mean ± sd over the seeds)."""
    columns = [m for m in METRICS if any(m in row for row in rows)]
    distances = any("mean_attention_distance" in row for row in rows)
    blocks = any("block_gradient_norms" in row for row in rows)
    lines = ["| task | variant | " + " | ".join(columns) + (" | attention distance per head" if distances else "")
             + (" | first-epoch gradient norm per block, first to last" if blocks else "") + " |",
             "|---|---|" + "---|" * (len(columns) + distances + blocks)]
    for row in rows:
        cells = [_cell(row, c) for c in columns]
        if distances:
            cells.append(" / ".join(f"{d:.1f}" for d in row.get("mean_attention_distance", [])))
        if blocks:
            cells.append(" / ".join(f"{d:.2f}" for d in row.get("block_gradient_norms", [])))
        lines.append(f"| {row['task']} | {row['variant']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(name, rows, path):
    """Validation-accuracy curves, one panel per task (the mean over seeds), and the gradient norm per epoch
    below them when it was logged."""
    tasks = list(dict.fromkeys(row["task"] for row in rows))
    norms = any("gradient_norm" in row for row in rows)
    figure = Figure(figsize=(6 * len(tasks), 4 * (1 + norms)))
    axes = np.asarray(figure.subplots(1 + norms, len(tasks))).reshape(1 + norms, len(tasks))
    if norms:
        for ax, task in zip(axes[1], tasks):
            for row in (r for r in rows if r["task"] == task and "gradient_norm" in r):
                ax.plot(np.arange(1, len(row["gradient_norm"]) + 1), row["gradient_norm"], marker="o",
                        label=row["variant"])
            ax.set(title=f"{name}: {task}", xlabel="epoch", ylabel="gradient norm (mean over steps)", yscale="log")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.legend(fontsize=8)
    for ax, task in zip(axes[0], tasks):
        for row in (r for r in rows if r["task"] == task):
            ax.plot(np.arange(1, len(row["curve"]) + 1), row["curve"], marker="o", label=row["variant"])
        ax.set(title=f"{name}: {task}", xlabel="epoch", ylabel="validation accuracy", ylim=(0, 1.02))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8)
    figure.tight_layout()
    return visualize.save_figure(figure, path)


def main(argv=None):
    args = parse_args(argv)
    output_dir = common.output_directory("experiments", args.output_dir)
    keras.config.set_dtype_policy("float32")
    results = {}
    for name in EXPERIMENTS if args.experiment == "all" else [args.experiment]:
        started = time.time()
        rows = run_seeds(EXPERIMENTS[name], args)
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
