"""Scoring the IMDB test reviews (#57's "a quarter of the run"): how much of it is padding, and would sorting the
reviews by length into tight batches, or compiling the forward pass with XLA, make it faster?

The recipe (`imdb_classifier --pretrained`) scores in batches of 64 padded to the training buckets' lengths, the
last one the full `--max-length`. This prints the word-piece positions the model computes for all test reviews
three ways: padded to `--max-length`, in the recipe's buckets, and sorted by length into batches of 64 each padded
to its longest review (rounded up to 8): the last is the floor that any sorting can reach. Then it times the
recipe's scoring (`LengthBuckets.predict`, batch 64) of `--reviews` test reviews (every n-th, so their lengths
are the test set's) with the forward pass as a TensorFlow graph (the recipe's `--no-jit`, Keras' "auto" on a CPU)
and with XLA (`jit_compile=True`), in alternating rounds, after one untimed round that compiles each shape.
The encoder is the checkpoint's and the head fresh: the question is speed, not accuracy.

    python benchmarks/imdb_scoring.py --checkpoint all-MiniLM-L6-v2 --imdb-dir aclImdb
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
import timing  # noqa: E402

from keras_tfm.data import imdb  # noqa: E402
from keras_tfm.data.buckets import LengthBuckets  # noqa: E402
from keras_tfm.models import TextClassifier  # noqa: E402
from keras_tfm.text import PretrainedTokenizer  # noqa: E402


def tight_positions(lengths, batch_size=64, multiple=8):
    """Positions computed when the texts, sorted by length, are cut into batches each padded to its longest."""
    ordered = np.sort(lengths)
    batches = [ordered[i:i + batch_size] for i in range(0, len(ordered), batch_size)]
    return sum(len(b) * int(np.ceil(b.max() / multiple) * multiple) for b in batches)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a BERT-style checkpoint folder (tokenizer.json)")
    parser.add_argument("--imdb-dir", required=True, help="the unpacked aclImdb folder")
    parser.add_argument("--reviews", type=int, default=512, help="test reviews timed (every n-th of the 25,000)")
    parser.add_argument("--max-length", type=int, default=256, help="word pieces per review (the recipe's)")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds of each")
    args = parser.parse_args(argv)

    tokenizer = PretrainedTokenizer(args.checkpoint, max_length=args.max_length, truncation="head_tail")
    train, test = imdb.load_folder(args.imdb_dir)
    x_train = tokenizer([imdb.without_line_breaks(t) for t in imdb.texts_and_labels(train)[0]])
    x_test = tokenizer([imdb.without_line_breaks(t) for t in imdb.texts_and_labels(test)[0]])
    lengths = x_test["padding_mask"].sum(axis=1)
    # The recipe's scoring lengths: the training buckets', the last one the full length.
    training_buckets = LengthBuckets(x_train, batch_size=32, padding_id=tokenizer.padding_id).bucket_lengths
    scoring_lengths = training_buckets[:-1] + (args.max_length,)
    recipe = LengthBuckets(x_test, batch_size=64, shuffle=False, bucket_lengths=scoring_lengths)
    positions = {"real": int(lengths.sum()), f"padded to {args.max_length}": args.max_length * len(lengths),
                 f"buckets {scoring_lengths} (the recipe)": recipe.padded_tokens(),
                 "sorted, tight batches of 64": tight_positions(lengths)}
    print(f"{len(lengths):,} test reviews; median {np.median(lengths):.0f} word pieces, "
          f"{np.mean(lengths == args.max_length):.0%} cut at {args.max_length}")
    for name, count in positions.items():
        print(f"  {name:<42} {count:>10,} positions ({count / positions['real']:.3f}x the real ones)")

    rows = np.linspace(0, len(lengths) - 1, args.reviews).astype(int)
    sample = LengthBuckets({name: values[rows] for name, values in x_test.items()}, batch_size=64, shuffle=False,
                           bucket_lengths=scoring_lengths)
    models = {jit: TextClassifier.from_pretrained(args.checkpoint, num_classes=2) for jit in (False, True)}
    models[True].set_weights(models[False].get_weights())  # the same fresh head in both
    for jit, model in models.items():
        model.compile(jit_compile=jit)
    outputs = {}

    def score(jit):
        start = time.perf_counter()
        outputs[jit] = sample.predict(models[jit], verbose=0)
        return time.perf_counter() - start

    seconds = timing.medians(timing.interleaved(score, [False, True], rounds=args.rounds))
    print(f"scoring {len(rows)} reviews in the recipe's batches; largest difference of the two's logits "
          f"{np.abs(outputs[False] - outputs[True]).max():.1e}")
    for jit, name in ((False, "graph (the recipe)"), (True, "XLA")):
        print(f"  {name:<20} {len(rows) / seconds[jit]:7.1f} reviews/s")
    print(f"  XLA / graph: {seconds[False] / seconds[True]:.2f}x")
    return {"positions": positions, "reviews_per_second": {
        "graph": len(rows) / seconds[False], "xla": len(rows) / seconds[True]}}


if __name__ == "__main__":
    main()
