"""The string-serving SavedModel on real reviews: are its word-piece ids the checkpoint tokenizer's, are its
probabilities the Python pipeline's, and how fast is each (reviews/s)?

A `TextClassifierPipeline` of a pretrained checkpoint (its encoder, a fresh head: the question is the same
numbers, not good ones) is exported with `keras_tfm.text.serving.export_saved_model` and loaded back with
`tf.saved_model.load`. On the first `--reviews` IMDB test reviews (the recipe's order), it compares
`StringTokenizer`'s ids with `PretrainedTokenizer`'s (all of them: token ids, padding mask, segment ids), and the
SavedModel's probabilities with `pipeline.predict`'s, then times both in alternating rounds (batches of 64).

    python benchmarks/string_serving.py --checkpoint all-MiniLM-L6-v2 --imdb-dir aclImdb
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the SavedModel's kernels)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
import timing  # noqa: E402

from keras_tfm.data import imdb  # noqa: E402
from keras_tfm.models import TextClassifier  # noqa: E402
from keras_tfm.text import PretrainedTokenizer, TextClassifierPipeline  # noqa: E402
from keras_tfm.text.serving import export_saved_model, tokenize_like_pretrained  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a BERT-style checkpoint folder (tokenizer.json)")
    parser.add_argument("--imdb-dir", required=True, help="the unpacked aclImdb folder")
    parser.add_argument("--reviews", type=int, default=1000, help="test reviews compared and timed")
    parser.add_argument("--max-length", type=int, default=256, help="word pieces per review (the recipe's)")
    parser.add_argument("--truncation", default="head_tail", choices=("head", "head_tail"))
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each")
    args = parser.parse_args(argv)

    _, test = imdb.load_folder(args.imdb_dir)
    texts, _ = imdb.texts_and_labels(test.take(args.reviews))
    texts = [str(text) for text in texts]
    tokenizer = PretrainedTokenizer(args.checkpoint, max_length=args.max_length, truncation=args.truncation)
    expected, ours = tokenizer(texts), tokenize_like_pretrained(tokenizer, texts)
    same = np.all([np.all(ours[name] == expected[name], axis=1) for name in expected], axis=0)
    print(f"{len(texts):,} IMDB test reviews, {args.max_length} pieces, truncation={args.truncation!r}: ids equal "
          f"on {same.sum():,} of {len(texts):,}")
    for row in np.flatnonzero(~same)[:3]:
        where = np.flatnonzero(ours["token_ids"][row] != expected["token_ids"][row])
        print(f"  review {row}: first differing piece at {where[0] if len(where) else '-'}: "
              f"{tokenizer.token_labels(expected['token_ids'][row][where[:5]])} vs "
              f"{tokenizer.token_labels(ours['token_ids'][row][where[:5]])}")

    model = TextClassifier.from_pretrained(args.checkpoint, num_classes=2)
    pipeline = TextClassifierPipeline(model, tokenizer, ["negative", "positive"])
    folder = export_saved_model(pipeline, os.path.join(tempfile.mkdtemp(), "served"))
    served = tf.saved_model.load(folder).signatures["serving_default"]

    def serve(batch):
        return np.concatenate([served(texts=tf.constant(batch[i:i + 64]))["probabilities"].numpy()
                               for i in range(0, len(batch), 64)])

    python_probabilities = pipeline.predict(texts, batch_size=64)
    graph_probabilities = serve(texts)
    print(f"probabilities: largest difference {np.abs(graph_probabilities - python_probabilities).max():.2e}; "
          f"labels equal on {np.sum(graph_probabilities.argmax(-1) == python_probabilities.argmax(-1)):,}")
    seconds = timing.interleaved(lambda kind: _timed(pipeline, serve, texts, kind), ["pipeline", "saved_model"],
                                 rounds=args.rounds)
    medians = timing.medians(seconds)
    for kind in ("pipeline", "saved_model"):
        print(f"{kind:<12} {len(texts) / medians[kind]:8.1f} reviews/s")
    return {"ids_equal": int(same.sum()), "reviews": len(texts), "seconds": medians}


def _timed(pipeline, serve, texts, kind):
    start = time.perf_counter()
    if kind == "pipeline":
        pipeline.predict(texts, batch_size=64)
    else:
        serve(texts)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
