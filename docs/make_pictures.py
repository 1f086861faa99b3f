"""Draws the learning path's pictures into docs/pictures/, from code and from small models trained here.

    python docs/make_pictures.py              # every picture, about 4 minutes on 2 CPU cores
    python docs/make_pictures.py architecture position_encoding   # only these (the fast ones: seconds)

Every picture comes from the toolkit's own functions on models built (and, where a picture shows what a model
learned, trained) by this script, with fixed seeds, so running it again redraws the same pictures:

    architecture.png            the encoder-decoder, boxes named after our files, shapes read from a real model
    position_encoding.png       the sinusoidal code over 128 positions and the similarity between positions
    reverse_alignment.png       a trained reverser's cross-attention: the anti-diagonal
    reverse_decoder_self_attention.png   its causal self-attention, a lower triangle (every head)
    reverse_curves.png          its loss, accuracy and gradient norm per epoch
    order_token_attention.png   a classifier trained on "is A before B?": which tokens its output reads
    vit_rollout.png             a small ViT trained to find a bright square: attention rollout over the image
    translate_alignment.png     a Multi30k translation's cross-attention, copied from a finished
                                `recipes.translate` run given with --translate-run (an hour or more of training:
                                not redone here; without the flag the committed picture is kept)

Nothing is downloaded; the data are generated (digit strings, token sequences, images with a square).
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run as a script from anywhere: keras_tfm and recipes import from the checkout

OUTPUT = os.path.join(ROOT, "docs", "pictures")
PICTURES = ("architecture", "position_encoding", "reverse", "order_token_attention", "vit_rollout",
            "translate_alignment")
FILES = {
    "architecture": ["architecture.png"],
    "position_encoding": ["position_encoding.png"],
    "reverse": ["reverse_alignment.png", "reverse_decoder_self_attention.png", "reverse_curves.png"],
    "order_token_attention": ["order_token_attention.png"],
    "vit_rollout": ["vit_rollout.png"],
    "translate_alignment": ["translate_alignment.png"],
}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pictures", nargs="*", metavar="PICTURE",
                        help=f"which pictures to draw, among {', '.join(PICTURES)} (default: all)")
    parser.add_argument("--output-dir", default=OUTPUT, help="where to write the PNGs")
    parser.add_argument("--translate-run", default=None,
                        help="a finished recipes.translate run folder: its alignment_0.png becomes "
                             "translate_alignment.png")
    args = parser.parse_args(argv)
    unknown = [name for name in args.pictures if name not in PICTURES]
    if unknown:
        parser.error(f"unknown pictures {unknown}: choose among {', '.join(PICTURES)}")
    args.pictures = args.pictures or list(PICTURES)
    return args


# ---------------------------------------------------------------------------------------------------------------
# The architecture: boxes and arrows, every box named after the file that implements it, every arrow labelled
# with the shape a real `Seq2SeqTransformer` gives (checked against the model, so the picture cannot drift).


def architecture(output_dir, preset="small", batch=32, source_length=20, target_length=24, vocab_size=8000):
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyBboxPatch

    from keras_tfm.models import SEQ2SEQ_PRESETS, Seq2SeqTransformer

    config = SEQ2SEQ_PRESETS[preset]
    d, heads, mlp = config["dim"], config["num_heads"], config["mlp_dim"]
    n_enc, n_dec = config["encoder_depth"], config["decoder_depth"]
    model = Seq2SeqTransformer.from_preset(preset, source_vocab_size=vocab_size, target_vocab_size=vocab_size,
                                           max_length=64)
    source = np.ones((batch, source_length), "int32")
    target = np.ones((batch, target_length), "int32")
    logits = model((source, target))
    encoded = model.encode(source)
    assert tuple(logits.shape) == (batch, target_length, vocab_size), logits.shape
    assert tuple(encoded.shape) == (batch, source_length, d), encoded.shape

    def source(path):
        """A box's file, relative to keras_tfm/: it must exist, so no box names a file that is gone."""
        assert os.path.isfile(os.path.join(ROOT, "keras_tfm", path)), path
        return path

    figure = Figure(figsize=(11, 10.5))
    ax = figure.subplots()
    ax.set(xlim=(0, 11), ylim=(0, 10.5))
    ax.axis("off")
    colours = {"embed": "#fde9c9", "attention": "#d7e8f7", "ffn": "#dff0d8", "norm": "#f2f2f2", "out": "#f7d9d9",
               "stack": "#fafafa"}

    def box(x, y, w, h, text, colour, file=None, size=9.5):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08", fc=colour,
                                    ec="#555555", lw=1.0))
        ax.text(x + w / 2, y + h / 2 + (0.1 if file else 0), text, ha="center", va="center", fontsize=size)
        if file:
            ax.text(x + w / 2, y + h / 2 - 0.17, file, ha="center", va="center", fontsize=7, family="monospace",
                    color="#444444")

    def arrow(x0, y0, x1, y1, label=None, side="right"):
        ax.annotate("", (x1, y1), (x0, y0), arrowprops=dict(arrowstyle="-|>", color="#333333", lw=1.1))
        if label:
            ax.text((x0 + x1) / 2 + (0.08 if side == "right" else -0.08), (y0 + y1) / 2, label, fontsize=7.5,
                    ha="left" if side == "right" else "right", va="center", color="#1f4e79", family="monospace")

    # Encoder column (left), decoder column (right); data flow bottom to top.
    ex, dx, w = 0.6, 6.0, 3.6
    ax.text(ex + w / 2, 10.15, "encoder", ha="center", fontsize=13, weight="bold")
    ax.text(dx + w / 2, 10.15, "decoder", ha="center", fontsize=13, weight="bold")
    ax.text(ex + w / 2, 0.25, "source ids", ha="center", fontsize=9)
    ax.text(dx + w / 2, 0.25, "target ids, shifted right (start token first)", ha="center", fontsize=9)
    arrow(ex + w / 2, 0.45, ex + w / 2, 1.0, f"(batch, S) = ({batch}, {source_length})")
    arrow(dx + w / 2, 0.45, dx + w / 2, 1.0, f"(batch, T) = ({batch}, {target_length})")
    embed = "embedding × √d  +  sinusoidal positions"
    box(ex, 1.0, w, 0.75, embed, colours["embed"], source("layers/token_embedding.py"))
    box(dx, 1.0, w, 0.75, embed, colours["embed"], source("layers/token_embedding.py"))
    arrow(ex + w / 2, 1.75, ex + w / 2, 2.35, f"(batch, S, d) = ({batch}, {source_length}, {d})")
    arrow(dx + w / 2, 1.75, dx + w / 2, 2.35, f"(batch, T, d) = ({batch}, {target_length}, {d})")

    # The encoder block (pre-norm, as our presets): norm -> self-attention -> add; norm -> feed-forward -> add.
    ax.add_patch(FancyBboxPatch((ex - 0.2, 2.3), w + 0.4, 4.1, boxstyle="round,pad=0.02", fc=colours["stack"],
                                ec="#999999", lw=1.0, ls="--"))
    ax.text(ex - 0.15, 6.2, f"EncoderBlock × {n_enc}", fontsize=10, weight="bold")
    ax.text(ex - 0.15, 5.95, source("layers/encoder_block.py"), fontsize=7, family="monospace",
            color="#444444")
    box(ex, 2.5, w, 0.45, "LayerNorm", colours["norm"], size=8.5)
    box(ex, 3.15, w, 0.8, f"multi-head self-attention ({heads} heads)", colours["attention"],
        source("layers/attention.py"))
    ax.text(ex + w + 0.05, 3.55, "+ residual", fontsize=7.5, color="#666666")
    box(ex, 4.2, w, 0.45, "LayerNorm", colours["norm"], size=8.5)
    box(ex, 4.85, w, 0.8, f"feed-forward {d} → {mlp} → {d}", colours["ffn"], source("layers/feed_forward.py"))
    ax.text(ex + w + 0.05, 5.25, "+ residual", fontsize=7.5, color="#666666")
    for y0, y1 in ((2.95, 3.15), (3.95, 4.2), (4.65, 4.85)):
        arrow(ex + w / 2, y0, ex + w / 2, y1)
    arrow(ex + w / 2, 5.65, ex + w / 2, 6.6)
    box(ex, 6.6, w, 0.45, "LayerNorm (encoder_norm)", colours["norm"], size=8.5)
    arrow(ex + w / 2, 7.05, ex + w / 2, 7.75, "encoder output (batch, S, d)")

    # The decoder block: causal self-attention, cross-attention over the encoder output, feed-forward.
    ax.add_patch(FancyBboxPatch((dx - 0.2, 2.3), w + 0.4, 5.6, boxstyle="round,pad=0.02", fc=colours["stack"],
                                ec="#999999", lw=1.0, ls="--"))
    ax.text(dx - 0.15, 7.7, f"DecoderBlock × {n_dec}", fontsize=10, weight="bold")
    ax.text(dx - 0.15, 7.45, source("layers/decoder_block.py"), fontsize=7, family="monospace",
            color="#444444")
    box(dx, 2.5, w, 0.45, "LayerNorm", colours["norm"], size=8.5)
    box(dx, 3.15, w, 0.8, "masked (causal) self-attention", colours["attention"],
        source("layers/masking.py") + ": causal_mask")
    box(dx, 4.2, w, 0.45, "LayerNorm", colours["norm"], size=8.5)
    box(dx, 4.85, w, 0.8, "cross-attention: Q from here, K, V from the encoder", colours["attention"],
        source("layers/attention.py"), size=8.5)
    box(dx, 5.9, w, 0.45, "LayerNorm", colours["norm"], size=8.5)
    box(dx, 6.55, w, 0.8, f"feed-forward {d} → {mlp} → {d}", colours["ffn"], source("layers/feed_forward.py"))
    for y in (3.55, 5.25, 6.95):
        ax.text(dx + w + 0.05, y, "+ residual", fontsize=7.5, color="#666666")
    for y0, y1 in ((2.95, 3.15), (3.95, 4.2), (4.65, 4.85), (5.65, 5.9), (6.35, 6.55)):
        arrow(dx + w / 2, y0, dx + w / 2, y1)
    # Encoder output into every decoder block's cross-attention.
    ax.annotate("", (dx, 5.25), (ex + w / 2, 7.75), arrowprops=dict(arrowstyle="-|>", color="#1f77b4", lw=1.6,
                                                                       connectionstyle="arc3,rad=-0.25"))
    ax.text(4.4, 7.75, "keys and values of every\ndecoder block's cross-attention", fontsize=8, color="#1f77b4",
            ha="center")
    ax.plot([ex + w / 2], [7.75], marker="o", color="#1f77b4")

    # Output: the vocabulary projection and the softmax, row t predicting token t + 1.
    arrow(dx + w / 2, 7.35, dx + w / 2, 8.15, "(batch, T, d)")
    box(dx, 8.15, w, 0.75, f"LayerNorm (decoder_norm), linear → V = {vocab_size}", colours["out"],
        source("models/seq2seq.py"), size=8.5)
    arrow(dx + w / 2, 8.9, dx + w / 2, 9.6, "logits (batch, T, V)")
    ax.text(dx + w / 2, 9.75, "softmax: row t predicts token t+1", ha="center", fontsize=9)
    ax.text(0.4, 9.55, f"Seq2SeqTransformer, preset '{preset}': d = {d}, {heads} heads (d_k = {d // heads}),\n"
            f"{n_enc} + {n_dec} blocks, feed-forward {mlp}; shapes for batch {batch}, S = {source_length}, "
            f"T = {target_length}.\nPre-norm blocks (norm_first=True); the paper's are post-norm (Add & Norm).",
            fontsize=8.5, va="top")
    figure.tight_layout()
    path = os.path.join(output_dir, "architecture.png")
    figure.savefig(path, dpi=110)
    return [path]


def position_encoding(output_dir, length=128, dim=64):
    import keras

    from keras_tfm.insight import visualize
    from keras_tfm.layers import sinusoidal_position_encoding

    table = keras.ops.convert_to_numpy(sinusoidal_position_encoding(length, dim))
    figure = visualize.plot_position_encoding(table, title=f"sinusoidal positional encoding ({length} positions x "
                                              f"{dim} channels): fast waves on the left, slow on the right")
    return [visualize.save_figure(figure, os.path.join(output_dir, "position_encoding.png"))]


def reverse(output_dir):
    """The reverse_digits recipe itself (its default model, 4 epochs), its pictures copied here."""
    import shutil
    import tempfile

    from recipes import reverse_digits

    with tempfile.TemporaryDirectory() as folder:
        run = os.path.join(folder, "run")
        summary = reverse_digits.main(["--epochs", "4", "--train-samples", "12000", "--seed", "0",
                                       "--no-attention-maps", "--output-dir", run])
        print(f"reverser: exact match greedy {summary['metrics']['exact_match_greedy']:.3f}")
        written = []
        for name in ("alignment", "decoder_self_attention", "curves"):
            written.append(shutil.copy(os.path.join(run, f"{name}.png"),
                                       os.path.join(output_dir, f"reverse_{name}.png")))
    return written


def order_token_attention(output_dir):
    """A 2-block classifier learns "is A before B?"; the picture shows the mean-pooled output's attention in the
    last block (the mean of its rows) over one held-out sequence."""
    import keras
    import numpy as np

    from keras_tfm.insight import visualize
    from keras_tfm.insight.attention_probe import attention_maps
    from keras_tfm.models import TextClassifier
    from recipes.experiments import make_order_task

    keras.utils.set_random_seed(0)
    x, y = make_order_task(8000, seed=0)
    x_test, y_test = make_order_task(200, seed=1)
    model = TextClassifier.from_preset("tiny", vocab_size=32, max_length=16, num_classes=2, dim=64, depth=2,
                                       num_heads=4, mlp_dim=128, pool="mean", dropout=0.0)
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=4, verbose=0)
    accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
    print(f"order classifier: held-out accuracy {accuracy:.3f}")
    sample = x_test[:1, : int((x_test[0] > 0).sum())]
    weights = attention_maps(model, sample).records[-1].weights[0].mean(0)  # (q, k), mean of heads
    names = ["A" if t == 1 else "B" if t == 2 else f"w{t}" for t in sample[0]]
    answer = "A before B" if model.predict(sample, verbose=0).argmax() == 1 else "B before A"
    figure = visualize.plot_token_attention(names, weights.mean(0), title=f"'is A before B?' ({accuracy:.0%} held "
                                            f"out), predicted: {answer}\nshade: the mean-pooled output's "
                                            "attention in the last block")
    return [visualize.save_figure(figure, os.path.join(output_dir, "order_token_attention.png"))]


def squares(samples, seed, size=32, square=8):
    """Images of noise with one bright square; the label is the quadrant it is in (0..3)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    images = rng.integers(0, 90, (samples, size, size, 3)).astype("uint8")
    labels = rng.integers(0, 4, samples)
    for image, label in zip(images, labels):
        top = rng.integers(0, size // 2 - square + 1) + (size // 2) * (label // 2)
        left = rng.integers(0, size // 2 - square + 1) + (size // 2) * (label % 2)
        image[top : top + square, left : left + square] = (250, 220, 60)
    return images, labels


def vit_rollout(output_dir):
    import keras
    import numpy as np

    from keras_tfm.insight import visualize
    from keras_tfm.insight.attention_probe import attention_maps
    from keras_tfm.models import ViT

    keras.utils.set_random_seed(0)
    x, y = squares(6000, seed=0)
    x_test, y_test = squares(200, seed=1)
    model = ViT.from_preset("tiny", num_classes=4, dropout=0.0)
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=3, verbose=0)
    accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
    print(f"square-finding ViT: held-out accuracy {accuracy:.3f}")
    rollout = visualize.attention_rollout(attention_maps(model, x_test[:1]))[0]
    quadrant = ["top left", "top right", "bottom left", "bottom right"][int(y_test[0])]
    figure = visualize.plot_image_attention(x_test[0], rollout, title=f"ViT tiny trained to find the square "
                                            f"({accuracy:.0%} held out): attention rollout of [CLS]; "
                                            f"the square is {quadrant}")
    return [visualize.save_figure(figure, os.path.join(output_dir, "vit_rollout.png"))]


def translate_alignment(output_dir, run=None):
    import shutil

    if run is None:
        print("translate_alignment: kept as it is (give --translate-run RUN_DIR to copy a run's alignment_0.png)")
        return []
    return [shutil.copy(os.path.join(run, "alignment_0.png"), os.path.join(output_dir, "translate_alignment.png"))]


def main(argv=None):
    args = parse_args(argv)
    import keras

    keras.config.set_dtype_policy("float32")
    os.makedirs(args.output_dir, exist_ok=True)
    written = []
    for name in args.pictures:
        if name == "translate_alignment":
            written += translate_alignment(args.output_dir, args.translate_run)
        else:
            written += globals()[name](args.output_dir)
    for path in written:
        print(f"wrote {os.path.relpath(path, ROOT)}")
    return written


if __name__ == "__main__":
    main()
