"""What fine-tuning changed in a pretrained encoder, two ways side by side: how far each layer's weights moved
from the checkpoint (mean |Δw| / mean |w| over the block's matrices) and how far its attention moved
(`keras_tfm.insight.visualize.attention_change`, the explorer's change view) on held-out reviews. Writes the change
view and the most-changed head's [CLS] row before and after as pictures.

    python benchmarks/imdb_attention_change.py --pretrained all-MiniLM-L6-v2 \
        --run runs/imdb_classifier/RUN --imdb-dir aclImdb --output docs/pictures

The run is an `imdb_classifier --pretrained` run folder (its `classifier/`); the reviews are its held-out ones
(the same seed and split), cut as the run cut them. `--quick` compares 4 reviews (CI runs it on the quick
fine-tune of a tiny BERT, tests/recipes/test_imdb_classifier.py).
"""

import argparse
import json
import os

import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: --quick
import timing  # noqa: E402


def layer_weight_change(before, after):
    """`{block name: mean |Δw| / mean |w|}` over each encoder block's kernels (biases and norms left out)."""
    old = {v.path: np.asarray(v.numpy()) for v in before.encoder.weights}
    out = {}
    for v in after.encoder.weights:
        block = v.path.split("/")[0] if v.path.startswith("block_") else None
        if block is None or not v.path.endswith("kernel") or v.path not in old:
            continue
        delta, base = np.abs(np.asarray(v.numpy()) - old[v.path]).sum(), np.abs(old[v.path]).sum()
        total = out.setdefault(block, [0.0, 0.0])
        total[0] += delta
        total[1] += base
    return {block: d / b for block, (d, b) in sorted(out.items())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrained", required=True, help="the checkpoint folder the run fine-tuned")
    parser.add_argument("--run", required=True, help="the imdb_classifier --pretrained run folder")
    parser.add_argument("--imdb-dir", required=True)
    parser.add_argument("--reviews", type=int, default=64, help="held-out reviews the attention is compared on")
    parser.add_argument("--output", default=None, help="folder for the pictures (default: RUN/attention)")
    parser.add_argument("--page", default=None,
                        help="also write the run's explorer page (RUN/attention/attention.json) here, built by this "
                             "version of the explorer (a run made before the change view gets it)")
    args = timing.parse_args(parser, argv, {"reviews": 4})

    import keras

    from keras_tfm import attention_maps
    from keras_tfm.data import imdb, stratified_split
    from keras_tfm.insight import visualize
    from keras_tfm.models import TextClassifier
    from keras_tfm.text import TextClassifierPipeline

    with open(os.path.join(args.run, "run.json")) as file:  # the flags the run was started with
        flags = json.load(file)["segments"][-1]["flags"]
    pipeline = TextClassifierPipeline.load(os.path.join(args.run, "classifier"))
    tuned, tokenizer = pipeline.model, pipeline.tokenizer
    before = TextClassifier.from_pretrained(args.pretrained, num_classes=2)

    keras.utils.set_random_seed(flags["seed"])
    train, _ = imdb.load_imdb(args.imdb_dir, seed=flags["seed"])
    reviews, labels = imdb.texts_and_labels(train.take(flags["train_samples"] or -1))
    _, held_out = stratified_split(labels, flags["validation_fraction"], seed=flags["seed"])
    rows = held_out[: args.reviews]
    x = tokenizer([imdb.without_line_breaks(reviews[i]) for i in rows])
    real = x["padding_mask"].astype(bool)

    names, change = visualize.attention_change(attention_maps(before, x), attention_maps(tuned, x), query_mask=real)
    weights = layer_weight_change(before, tuned)
    print(f"{'layer':<10s} {'weights moved (mean |Δw| / mean |w|)':>38s} {'attention moved (mean of heads)':>32s}")
    for name, row in zip(names, change):
        print(f"{name:<10s} {weights.get(name, float('nan')):>38.4f} {row.mean():>32.3f}")
    order_w = np.argsort([-weights[n] for n in names])
    order_a = np.argsort(-change.mean(1))
    print(f"layers by weights moved: {[names[i] for i in order_w]}")
    print(f"layers by attention moved: {[names[i] for i in order_a]}")
    layer, head = np.unravel_index(np.argmax(change), change.shape)
    print(f"most changed head: {names[layer]}, head {head} ({change[layer, head]:.3f})")

    checkpoint = os.path.basename(os.path.normpath(args.pretrained))
    output = args.output or os.path.join(args.run, "attention")
    os.makedirs(output, exist_ok=True)
    visualize.save_figure(visualize.plot_attention_change(
        names, change, title=f"{checkpoint} on IMDB: how far each head moved in fine-tuning ({len(rows)} "
                             "held-out reviews)"), os.path.join(output, "imdb_change.png"))
    # The most-changed head's [CLS] row on the shortest of the reviews, before and after.
    shortest = int(np.argmin(real.sum(1)))
    tokens = tokenizer.token_labels(x["token_ids"][shortest][real[shortest]])
    row_before = attention_maps(before, {k: v[shortest:shortest + 1] for k, v in x.items()})[names[layer]]
    row_after = attention_maps(tuned, {k: v[shortest:shortest + 1] for k, v in x.items()})[names[layer]]
    special = [i for i, t in enumerate(tokens) if t in ("[CLS]", "[SEP]")]
    figure = visualize.plot_row_before_after(
        tokens, row_before[0, head, 0][: len(tokens)], row_after[0, head, 0][: len(tokens)],
        title=f"{names[layer]}, head {head}: what [CLS] reads, before and after fine-tuning "
              f"(true: {'positive' if labels[rows[shortest]] else 'negative'})",
        labels=("before fine-tuning", "after one epoch"), scale_without=special)
    visualize.save_figure(figure, os.path.join(output, "imdb_change_row.png"))
    print(f"wrote {output}/imdb_change.png and imdb_change_row.png")
    if args.page:
        from keras_tfm.insight.explorer._page import build_page

        with open(os.path.join(args.run, "attention", "attention.json"), encoding="utf-8") as file:
            data = json.load(file)
        if len(data["epochs"]) > 1 and "change" not in data["views"]:
            data["views"].append("change")
        with open(args.page, "w", encoding="utf-8") as file:
            file.write(build_page(data, data["title"]))
        print(f"wrote {args.page}")


if __name__ == "__main__":
    main()
