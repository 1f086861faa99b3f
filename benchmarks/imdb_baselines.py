"""The baselines an IMDB Transformer has to beat: TF-IDF unigrams + bigrams and logistic regression, a bidirectional
LSTM and a 1-D CNN (Kim 2014), the comparison our users' article asks for.

Reads the same review files as `recipes.imdb_classifier --imdb-dir` (an unpacked aclImdb folder), holds out a
stratified 10% of the training reviews as the recipe does (`keras_tfm.data.stratified_split`) to choose the
regularisation strength C, refits on the whole training split with the chosen C, and scores the test reviews once.
With `--runs`, it prints the Transformer runs' numbers beside it (their summary.json files).

`--neural` adds the two networks, built from Keras layers on the from-scratch `TextClassifier`'s word ids (the
recipe's `TextVectorization`: the 20,000 most frequent words of the training reviews, 400 words per review): each
trains with Adam on the recipe's 90% of the training reviews (its seeded order and split), keeps the weights of its
best epoch on the recipe's held-out 10% (at most `--epochs`), and scores the test reviews once.

    pip install scikit-learn        # a benchmark-only dependency
    python benchmarks/imdb_baselines.py --imdb-dir aclImdb
    python benchmarks/imdb_baselines.py --imdb-dir aclImdb --runs runs/imdb_classifier/scratch runs/imdb_classifier/pretrained

`--train-samples N --test-samples M` read the reviews as the recipe does with the same flags (its seeded order,
`keras_tfm.data.imdb.load_imdb`, the first N and M), so the baseline sees exactly the recipe's reviews; the
baseline fitted on all 25,000 training reviews is scored on those M test reviews too.
"""

import argparse
import glob
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared --quick flag
import timing  # noqa: E402

import numpy as np  # noqa: E402

from keras_tfm.data import stratified_split  # noqa: E402


def read_split(imdb_dir, split):
    """`(texts, labels)` of `imdb_dir/split/{neg,pos}/*.txt`, in sorted file order."""
    texts, labels = [], []
    for label, name in enumerate(("neg", "pos")):
        for path in sorted(glob.glob(os.path.join(imdb_dir, split, name, "*.txt"))):
            with open(path, encoding="utf-8") as file:
                texts.append(file.read())
            labels.append(label)
    if not texts:
        raise SystemExit(f"error: no reviews in {os.path.join(imdb_dir, split)}/{{neg,pos}}/*.txt")
    return texts, np.array(labels)


def clean(text):
    """Lower-case, `<br />` and punctuation to spaces: the recipe's standardisation (`imdb.standardize_review`)."""
    text = re.sub(r"<br\s*/?>", " ", text.lower())
    return re.sub(r"[^\w\s]", " ", text)


def tfidf_logistic_regression(train, test, seed, validation_fraction=0.1, grid=(1.0, 3.0, 10.0, 30.0)):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    (x_train, y_train), (x_test, y_test) = train, test
    started = time.time()
    keep, held_out = stratified_split(y_train, validation_fraction, seed=seed)

    def fit(texts, labels, c):
        vectorizer = TfidfVectorizer(preprocessor=clean, ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        features = vectorizer.fit_transform(texts)
        return vectorizer, LogisticRegression(C=c, max_iter=2000).fit(features, labels)

    scores = {}
    for c in grid:  # chosen on the held-out training reviews
        vectorizer, model = fit([x_train[i] for i in keep], y_train[keep], c)
        scores[c] = model.score(vectorizer.transform([x_train[i] for i in held_out]), y_train[held_out])
    best = max(scores, key=scores.get)
    vectorizer, model = fit(x_train, y_train, best)
    return {
        "model": "TF-IDF 1-2 grams + logistic regression",
        "validation_accuracy": {str(c): round(float(s), 4) for c, s in scores.items()},
        "C": best,
        "test_accuracy": float(model.score(vectorizer.transform(x_test), y_test)),
        "wall_time_seconds": round(time.time() - started, 1),
    }


def bilstm(vocab_size, dim=128, units=64):
    """Word embeddings, a bidirectional LSTM over them (padding masked), its last states, a linear head."""
    import keras

    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(vocab_size, dim, mask_zero=True)(ids)
    x = keras.layers.Bidirectional(keras.layers.LSTM(units))(x)
    x = keras.layers.Dropout(0.5)(x)
    return keras.Model(ids, keras.layers.Dense(2)(x), name="bilstm")


def kim_cnn(vocab_size, dim=128, filters=100, widths=(3, 4, 5)):
    """Kim (2014): word embeddings, convolutions of 3, 4 and 5 words, the largest response of each filter over
    the review, dropout 0.5, a linear head."""
    import keras

    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(vocab_size, dim)(ids)
    pooled = [keras.layers.GlobalMaxPooling1D()(keras.layers.Conv1D(filters, w, activation="relu")(x)) for w in widths]
    x = keras.layers.Dropout(0.5)(keras.layers.Concatenate()(pooled))
    return keras.Model(ids, keras.layers.Dense(2)(x), name="kim_cnn")


def neural_baselines(train, test, seed, epochs=3, vocab_size=20000, sequence_length=400, validation_fraction=0.1):
    """Both networks on the recipe's word ids; `[result]` rows like `tfidf_logistic_regression`'s."""
    import keras

    from keras_tfm.data import imdb

    (x_train, y_train), (x_test, y_test) = train, test
    keep, held_out = stratified_split(y_train, validation_fraction, seed=seed)
    started = time.time()
    vectorizer = imdb.make_vectorizer(vocab_size, sequence_length)
    vectorizer.adapt(np.asarray([x_train[i] for i in keep], dtype=object), batch_size=1024)  # as the recipe learns it
    ids = imdb.vectorize(vectorizer, list(x_train))
    test_ids = imdb.vectorize(vectorizer, list(x_test))
    vectorize_seconds = time.time() - started
    results = []
    for build in (kim_cnn, bilstm):
        keras.utils.set_random_seed(seed)
        model = build(vocab_size)
        model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        started = time.time()
        best = keras.callbacks.EarlyStopping("val_accuracy", patience=epochs, restore_best_weights=True)
        history = model.fit(ids[keep], y_train[keep], validation_data=(ids[held_out], y_train[held_out]),
                            epochs=epochs, batch_size=64, callbacks=[best], verbose=2)
        trained = time.time() - started
        predicted = model.predict(test_ids, batch_size=256, verbose=0).argmax(-1)
        results.append({
            "model": f"{model.name}: {model.count_params():,} weights, {vocab_size} words, "
                     f"{sequence_length} per review",
            "validation_accuracy": [round(float(a), 4) for a in history.history["val_accuracy"]],
            "test_accuracy": float(np.mean(predicted == y_test)),
            "wall_time_seconds": round(vectorize_seconds + trained, 1),
            "training_seconds": round(trained, 1),
        })
    return results


def recipe_reviews(imdb_dir, seed, train_samples, test_samples):
    """`((texts, labels), (texts, labels))`: the training and test reviews `recipes.imdb_classifier` reads with
    the same `--seed`, `--train-samples` and `--test-samples`."""
    import keras

    from keras_tfm.data import imdb

    keras.utils.set_random_seed(seed)  # as the recipe does before it reads: the reviews' order depends on it
    train, test = imdb.load_imdb(imdb_dir, seed=seed)
    texts, labels = imdb.texts_and_labels(train.take(train_samples or -1))
    test_texts, test_labels = imdb.texts_and_labels(test.take(test_samples or -1))
    return (list(texts), np.asarray(labels)), (list(test_texts), np.asarray(test_labels))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imdb-dir", required=True, help="an unpacked aclImdb folder (with train/ and test/)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the held-out split (the recipe's --seed)")
    parser.add_argument("--runs", nargs="*", default=[],
                        help="imdb_classifier run folders whose test accuracy and wall time to print beside")
    parser.add_argument("--train-samples", type=int, default=None, help="the recipe's --train-samples")
    parser.add_argument("--test-samples", type=int, default=None, help="the recipe's --test-samples")
    parser.add_argument("--neural", action="store_true", help="also the BiLSTM and the CNN (Kim 2014)")
    parser.add_argument("--no-tfidf", action="store_true", help="leave out TF-IDF + logistic regression")
    parser.add_argument("--epochs", type=int, default=3, help="most epochs of the networks (the best one is kept)")
    args = timing.parse_args(parser, argv, quick=dict(epochs=1))
    if args.train_samples or args.test_samples:
        train, test = recipe_reviews(args.imdb_dir, args.seed, args.train_samples, args.test_samples)
        rows = []
        for name, training in (("the same training reviews", train), ("all training reviews", None)):
            training = training or read_split(args.imdb_dir, "train")
            baseline = tfidf_logistic_regression(training, test, args.seed)
            baseline["model"] += f", {len(training[1])} {name}, {len(test[1])} test reviews"
            print(json.dumps(baseline, indent=2))
            rows.append((baseline["model"], baseline["test_accuracy"], baseline["wall_time_seconds"]))
    else:
        train, test = read_split(args.imdb_dir, "train"), read_split(args.imdb_dir, "test")
        rows = []
        baselines = [] if args.no_tfidf else [tfidf_logistic_regression(train, test, args.seed)]
        if args.neural:  # the recipe's order of the reviews, so that the held-out 10% are the recipe's
            baselines += neural_baselines(*recipe_reviews(args.imdb_dir, args.seed, None, None), args.seed, args.epochs)
        for baseline in baselines:
            print(json.dumps(baseline, indent=2))
            rows.append((baseline["model"], baseline["test_accuracy"], baseline["wall_time_seconds"]))
    for run in args.runs:
        with open(os.path.join(run, "summary.json")) as file:
            summary = json.load(file)
        pretrained = summary.get("pretraining") or summary["flags"].get("encoder")
        label = f"{os.path.basename(os.path.normpath(run))} ({'pre-trained' if pretrained else 'from scratch'})"
        rows.append((label, summary["metrics"]["test_accuracy"], summary["wall_time_seconds"]))  # the whole run
    print(f"\n{'model':<60s} {'test accuracy':>13s} {'minutes':>8s}")
    for name, accuracy, seconds in rows:
        print(f"{name:<60s} {accuracy:>13.4f} {seconds / 60:>8.1f}")


if __name__ == "__main__":
    main()
