"""Classify IMDB movie reviews as positive or negative with a small Transformer encoder.

Keras' `TextVectorization` turns each review into word ids (lower-cased, `<br />` tags and punctuation removed,
cut to `--sequence-length` words); a `TextClassifier` reads the ids, mean-pools its token states and predicts
the sentiment. The vectorizer stays outside the model, so `model.keras` is the `TextClassifier` alone (word ids in);
`classifier/` pairs it with its vocabulary and standardisation, a `keras_tfm.text.TextClassifierPipeline` that
takes strings:

    TextClassifierPipeline.load("runs/imdb_classifier/RUN/classifier").predict(["A wonderful, moving film."])
    python -m recipes.imdb_classifier --predict runs/imdb_classifier/RUN "A wonderful, moving film." "Dull."

Data: `--imdb-dir path/to/aclImdb` (the unpacked original archive), or tensorflow-datasets `imdb_reviews`
(`--data-dir` = a folder already holding it; without either flag tfds tries to download it).

    python -m recipes.imdb_classifier --imdb-dir aclImdb   # 3 epochs, 86% test accuracy, ~14 min on 2 CPU cores
    python -m recipes.imdb_classifier --quick --imdb-dir aclImdb   # a few hundred reviews: checks that all runs

Besides the files every recipe writes (see `recipes.common`), a run leaves `vocabulary.txt`, `classifier/`, the
token attention of a few test reviews drawn every epoch (`attention/`) and, after training, `review_{i}.png`.
"""

import os
import sys
import time

from recipes import flags

PRESETS = ("base", "small", "tiny")  # keras_tfm.models.TEXT_CLASSIFIER_PRESETS
POOLS = ("cls", "mean")  # keras_tfm.models.text_classifier.POOLS


def parse_args(argv):
    parser = flags.recipe_parser(__doc__.splitlines()[0], epochs=3, batch_size=64, learning_rate=1e-3)
    parser.add_argument("--imdb-dir", default=None, help="an unpacked aclImdb folder (with train/ and test/)")
    parser.add_argument("--data-dir", default=None,
                        help="a tensorflow-datasets folder that already holds imdb_reviews (nothing is downloaded)")
    parser.add_argument("--vocab-size", type=flags.positive_int, default=20000, help="words kept, incl. pad/unknown")
    parser.add_argument("--sequence-length", type=flags.positive_int, default=400, help="words read per review")
    parser.add_argument("--preset", choices=PRESETS, default="tiny", help="model size")
    parser.add_argument("--pool", choices=POOLS, default="mean", help="how the token states become one vector")
    parser.add_argument("--dropout", type=flags.fraction, default=0.2, help="dropout rate of the model")
    parser.add_argument("--weight-decay", type=flags.non_negative_float, default=0.05, help="AdamW weight decay")
    parser.add_argument("--label-smoothing", type=flags.fraction, default=0.0, help="label smoothing of the loss")
    parser.add_argument("--train-samples", type=flags.positive_int, default=None, help="use only this many (None = all)")
    parser.add_argument("--test-samples", type=flags.positive_int, default=None, help="use only this many (None = all)")
    parser.add_argument("--predict", nargs="+", metavar=("RUN_DIR", "TEXT"),
                        help="classify the texts with the classifier a finished run saved (RUN_DIR or "
                             "RUN_DIR/classifier) and print the class probabilities; nothing is trained")
    args = parser.parse_args(argv)
    if args.predict is not None and len(args.predict) < 2:
        parser.error("--predict needs a run folder and at least one text: --predict RUN_DIR \"text\" [\"text\" ...]")
    if args.quick:
        args.epochs, args.preset, args.vocab_size, args.sequence_length = 1, "tiny", 2000, min(args.sequence_length, 64)
        args.train_samples, args.test_samples = min(args.train_samples or 400, 400), min(args.test_samples or 200, 200)
    return args


if __name__ == "__main__":
    flags.parse_early(parse_args, sys.argv[1:])  # --help and flag errors answer before TensorFlow loads

from recipes import common  # noqa: E402  (first: it imports TensorFlow, quietly)
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_tfm import visualize  # noqa: E402
from keras_tfm.attention_probe import attention_maps  # noqa: E402
from keras_tfm.callbacks import AttentionMapCallback  # noqa: E402
from keras_tfm.data import imdb  # noqa: E402
from keras_tfm.models import TextClassifier  # noqa: E402
from keras_tfm.text import TextClassifierPipeline  # noqa: E402

SENTIMENTS = ["negative", "positive"]  # label 0, label 1


def main(argv=None, extra_callbacks=()):
    args = parse_args(argv)
    if args.predict:
        return predict(args.predict[0], args.predict[1:])
    started = time.time()
    strategy = common.setup(args)

    # Data: reviews as text, then word ids from a vocabulary learned on the training reviews only.
    with common.exit_when_data_unavailable():
        train_text, test_text = imdb.load_imdb(args.imdb_dir, args.data_dir, seed=args.seed)
        train_text, test_text = train_text.take(args.train_samples or -1), test_text.take(args.test_samples or -1)
        vectorizer = imdb.make_vectorizer(args.vocab_size, args.sequence_length)
        vectorizer.adapt(imdb.texts(train_text).batch(1024))
        x_train, y_train, _ = imdb.to_arrays(train_text, vectorizer)
        x_test, y_test, test_reviews = imdb.to_arrays(test_text, vectorizer)
    output_dir = common.output_directory("imdb_classifier", args.output_dir, args.overwrite)
    vocabulary = vectorizer.get_vocabulary()
    imdb.save_vocabulary(vocabulary, os.path.join(output_dir, "vocabulary.txt"))
    print(f"{len(x_train)} training and {len(x_test)} test reviews, {len(vocabulary)} words, "
          f"{np.mean(x_test[:, -1] != 0):.0%} of test reviews cut at {args.sequence_length} words")

    # Model: trains on word ids; labels are one-hot so that label smoothing can apply.
    steps = args.epochs * common.steps_per_epoch(len(x_train), args.batch_size)
    with common.strategy_scope(strategy):
        model = TextClassifier.from_preset(
            args.preset, vocab_size=len(vocabulary), max_length=args.sequence_length, num_classes=2,
            pool=args.pool, dropout=args.dropout,
        )
        optimizer = common.adamw(args, steps)
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=args.label_smoothing),
            metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
            jit_compile=args.jit,
        )
    y_train_onehot, y_test_onehot = keras.utils.to_categorical(y_train, 2), keras.utils.to_categorical(y_test, 2)

    # Train, drawing which words the model attends to in a few short test reviews at every epoch.
    sample = _short_reviews(x_test, y_test, per_class=2)
    pictures = [AttentionMapCallback(x_test[sample], os.path.join(output_dir, "attention"), kind="text",
                                     tokens=vocabulary, class_names=SENTIMENTS, html=True)]
    callbacks = common.standard_callbacks(output_dir, (pictures if args.attention_maps else []) + list(extra_callbacks))
    data = common.fit_data(strategy, x_train, y_train_onehot, args.batch_size, validation_data=(x_test, y_test_onehot),
                           seed=args.seed)
    model.fit(**data, epochs=args.epochs, callbacks=callbacks, verbose=common.fit_verbosity())

    # Evaluate on the test reviews.
    probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(model.predict(x_test, batch_size=256, verbose=0)))
    predicted = probabilities.argmax(-1)
    metrics = {"test_accuracy": float(np.mean(predicted == y_test))}
    print(f"\ntest accuracy {metrics['test_accuracy']:.4f} on {len(y_test)} reviews")

    # Pictures: each sample review as a heat map of the attention its words receive in the last block.
    last = list(attention_maps(model, x_test[sample]).values())[-1]  # (samples, heads, queries, keys)
    for i, row in enumerate(sample):
        real = x_test[row] != 0
        if args.pool == "cls":
            weights = last[i, :, 0, 1:].mean(0)  # (length,): what [CLS] reads from each word
        else:
            weights = last[i][:, real].mean(axis=(0, 1))  # (length,): what each word receives, on average
        weights = weights[real]  # (words,)
        words = [vocabulary[t] for t in x_test[row][real]]
        title = (f"true: {SENTIMENTS[y_test[row]]}, predicted: {SENTIMENTS[predicted[row]]} "
                 f"(p = {probabilities[row, predicted[row]]:.2f})")
        visualize.save_figure(visualize.plot_token_attention(words, weights, title=title),
                              os.path.join(output_dir, f"review_{i}.png"))
        print(f"  [{SENTIMENTS[predicted[row]]:>8s}] {test_reviews[row][:100]}")

    # Strings in, probabilities out: the model with its vocabulary and standardisation, loadable in one call.
    TextClassifierPipeline(model, vocabulary, SENTIMENTS, sequence_length=args.sequence_length).save(
        os.path.join(output_dir, "classifier"))

    summary = common.finish(model, output_dir, args, metrics, started)
    print(f"wrote {output_dir} in {summary['wall_time_seconds']:.0f} s")
    if args.attention_maps:
        print(f"attention explorer (open in a browser): {pictures[0].html_path}")
    return summary


def predict(run_dir, texts):
    """Prints the class probabilities of `texts` under the classifier saved in `run_dir` and returns them."""
    folder = os.path.join(run_dir, "classifier")
    if not os.path.isfile(os.path.join(folder, "classifier.json")):
        folder = run_dir  # the pipeline's own folder was given
    try:
        pipeline = TextClassifierPipeline.load(folder)
    except ValueError as error:
        print(f"error: --predict: {error} A finished imdb_classifier run keeps it in RUN_DIR/classifier.",
              file=sys.stderr)
        sys.exit(2)
    probabilities = pipeline.predict(texts)  # (texts, classes)
    for text, row in zip(texts, probabilities):
        scores = "  ".join(f"{name} {p:.3f}" for name, p in zip(pipeline.class_names, row))
        print(f"{scores}  {text}")
    return {"class_names": pipeline.class_names, "probabilities": probabilities.tolist()}


def _short_reviews(ids, labels, per_class=2, most_words=60):
    """Rows of the first `per_class` reviews of each class with at most `most_words` words (or the shortest)."""
    lengths = (ids != 0).sum(1)
    rows = []
    for label in (0, 1):
        candidates = np.flatnonzero((labels == label) & (lengths <= most_words))
        if len(candidates) < per_class:  # few short reviews: the shortest ones of the class instead
            candidates = np.flatnonzero(labels == label)[np.argsort(lengths[labels == label], kind="stable")]
        rows.extend(candidates[:per_class].tolist())
    return np.array(rows)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
