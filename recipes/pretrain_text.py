"""Pre-train a Transformer text encoder on unlabelled text, BERT-style (masked language model).

Every document is cut to `--sequence-length` words (Keras' `TextVectorization`, the same word ids the IMDB
classifier reads: lower-cased, punctuation removed); 15% of the words of each document are hidden (80% [MASK],
10% a random word, 10% unchanged; new ones every epoch) and a `MaskedLanguageModel` learns to predict them. The
encoder it learns (`token_embedding`, `block_i`, `encoder_norm`) is where a classifier starts fine-tuning:
`python -m recipes.imdb_classifier --encoder RUN_DIR` (or `TextClassifier.from_encoder` in your own code).

Documents: `--text-dir FOLDER` (every `*.txt` file below it is one document) and/or `--text-file FILE` (one
document per line). A share of them (`--validation-fraction`) is held out to measure the masked-word loss and
accuracy on text the model did not train on.

    python -m recipes.pretrain_text --text-dir aclImdb/train/unsup --epochs 2
    python -m recipes.pretrain_text --quick --text-file my_corpus.txt     # a few hundred documents

A run folder (`recipes.common` lists the files every recipe writes) is an encoder folder: `model.keras` (the
`MaskedLanguageModel`) with `vocabulary.txt` (line i = word id i; id 2 is [MASK]).
"""

import argparse
import os
import sys
import time

import keras
import numpy as np

from keras_tfm.data import DataUnavailable, word_ids
from keras_tfm.data.mlm import masked_lm_dataset, max_predictions_for, vocabulary_with_mask
from keras_tfm.models import MaskedLanguageModel
from keras_tfm.presets import TEXT_CLASSIFIER_PRESETS

from recipes import common, devices, fast_paths, fitting, flags, runs

PRESETS = tuple(sorted(TEXT_CLASSIFIER_PRESETS))  # shared with MaskedLanguageModel
ENCODER_FILE, VOCABULARY_FILE = "model.keras", "vocabulary.txt"

# Flags that shape the model's weights: a stopped run resumes only with the values it was started with.
MODEL_FLAGS = ("vocab_size", "sequence_length", "preset")


def parse_args(argv):
    parser = flags.recipe_parser(__doc__.splitlines()[0], epochs=3, batch_size=64, learning_rate=1e-3)
    parser.add_argument("--text-dir", default=None, help="a folder: every *.txt file below it is one document")
    parser.add_argument("--text-file", default=None, help="a text file: every non-empty line is one document")
    parser.add_argument("--vocab-size", type=flags.positive_int, default=20000, help="words kept, incl. pad/unknown/[MASK]")
    parser.add_argument("--sequence-length", type=flags.positive_int, default=256, help="words read per document")
    parser.add_argument("--preset", choices=PRESETS, default="small", help="encoder size")
    parser.add_argument("--dropout", type=flags.fraction, default=0.1, help="dropout rate of the encoder")
    parser.add_argument("--weight-decay", type=flags.non_negative_float, default=0.01,
                        help="AdamW weight decay (never on biases, norms or position tables)")
    parser.add_argument("--mask-rate", type=flags.share, default=0.15,
                        help="share of each document's words hidden and predicted (BERT: 0.15)")
    parser.add_argument("--validation-fraction", type=flags.share, default=0.02,
                        help="share of the documents held out to measure the masked-word loss")
    parser.add_argument("--max-documents", type=flags.positive_int, default=None,
                        help="read at most this many documents (None = all)")
    args = parser.parse_args(argv)
    if args.text_dir is None and args.text_file is None:
        parser.error("give the text to pre-train on: --text-dir FOLDER and/or --text-file FILE")
    if args.quick:
        flags.apply_quick(args, epochs=1, preset="tiny", vocab_size=2000, sequence_length=lambda n: min(n, 64),
                          max_documents=400)
    return args


def main(argv=None, extra_callbacks=()):
    args = parse_args(argv)
    started = time.time()
    strategy = common.setup(args, "pretrain_text")
    with common.exit_when_data_unavailable():
        documents = read_documents(args.text_dir, args.text_file, args.max_documents)
    output_dir = common.start_run("pretrain_text", args, MODEL_FLAGS)
    rng = np.random.default_rng(args.seed)
    held_out = rng.permutation(len(documents))[: max(1, round(len(documents) * args.validation_fraction))]
    is_held_out = np.zeros(len(documents), bool)
    is_held_out[held_out] = True
    train = [doc for doc, out in zip(documents, is_held_out) if not out]
    validation = [doc for doc, out in zip(documents, is_held_out) if out]
    _, summary = pretrain(train, validation, args, output_dir, strategy, started=started,
                          extra_callbacks=extra_callbacks)
    return summary


def read_documents(text_dir=None, text_file=None, limit=None):
    """The documents as a list of strings: each `*.txt` file below `text_dir` (sorted by path), then each non-empty
    line of `text_file`. Raises `DataUnavailable` when there is nothing to read."""
    documents = []
    if text_dir is not None:
        if not os.path.isdir(text_dir):
            raise DataUnavailable(f"--text-dir {text_dir!r} is not a folder.")
        paths = sorted(os.path.join(root, name) for root, _, names in os.walk(text_dir)
                       for name in names if name.endswith(".txt"))
        for path in paths[:limit]:
            with open(path, encoding="utf-8", errors="replace") as file:
                documents.append(file.read())
    if text_file is not None:
        if not os.path.isfile(text_file):
            raise DataUnavailable(f"--text-file {text_file!r} is not a file.")
        with open(text_file, encoding="utf-8", errors="replace") as file:
            documents.extend(line.strip() for line in file if line.strip())
    documents = documents[:limit]
    if not documents:
        raise DataUnavailable(f"No text found in --text-dir {text_dir!r} / --text-file {text_file!r}.")
    return documents


def learn_vectorizer(texts, vocab_size, sequence_length):
    """A `TextVectorization` with the `vocab_size - 1` most frequent words of `texts` and [MASK] (id 2)."""
    vectorizer = word_ids.make_vectorizer(vocab_size, sequence_length)
    vectorizer.adapt(np.asarray(texts, dtype=object), batch_size=1024)
    vocabulary, _ = vocabulary_with_mask(vectorizer.get_vocabulary(), vocab_size)
    return word_ids.make_vectorizer(vocab_size, sequence_length, vocabulary=vocabulary)


def vectorize(vectorizer, texts, batch_size=1024):
    """Word ids `(len(texts), sequence_length)` int32 (`keras_tfm.data.word_ids.vectorize`: on every backend)."""
    return word_ids.vectorize(vectorizer, list(texts), batch_size)


def pretrain(train_texts, validation_texts, args, output_dir, strategy=None, started=None, extra_callbacks=(),
             vectorizer=None):
    """Pre-trains a `MaskedLanguageModel` on `train_texts` and writes an encoder folder (a complete run folder:
    `model.keras`, `vocabulary.txt`, history, curves, summary) in `output_dir`. Returns `(model, summary)`.

    Uses `args.vocab_size`, `sequence_length`, `preset`, `weight_decay`, `mask_rate`, `seed`, `jit`, and `epochs`,
    `batch_size`, `learning_rate`, `dropout` (or their `pretrain_` versions when the args have them).
    """
    started = time.time() if started is None else started
    epochs = getattr(args, "pretrain_epochs", args.epochs)
    batch_size = getattr(args, "pretrain_batch_size", args.batch_size)
    learning_rate = getattr(args, "pretrain_learning_rate", args.learning_rate)
    dropout = getattr(args, "pretrain_dropout", args.dropout)
    vectorizer = vectorizer or learn_vectorizer(train_texts, args.vocab_size, args.sequence_length)
    vocabulary = vectorizer.get_vocabulary()
    mask_token_id = vocabulary.index("[MASK]")
    word_ids.save_vocabulary(vocabulary, os.path.join(output_dir, VOCABULARY_FILE))
    x_train, x_validation = vectorize(vectorizer, train_texts), vectorize(vectorizer, validation_texts)
    words = int((x_train != 0).sum())
    print(f"pre-training on {len(x_train)} documents ({words:,} words, vocabulary {len(vocabulary)}), "
          f"{len(x_validation)} held out")

    masking = dict(mask_token_id=mask_token_id, vocab_size=len(vocabulary), rate=args.mask_rate,
                   max_predictions=max_predictions_for(args.sequence_length, args.mask_rate))
    batch_size = min(batch_size, len(x_train))
    train = masked_lm_dataset(x_train, batch_size, seed=args.seed, **masking)
    validation = masked_lm_dataset(x_validation, min(batch_size, len(x_validation)), seed=args.seed + 1,
                                   shuffle=False, repeat=False, **masking)
    steps = len(x_train) // batch_size
    with devices.strategy_scope(strategy):
        model = MaskedLanguageModel.from_preset(args.preset, vocab_size=len(vocabulary),
                                                max_length=args.sequence_length, dropout=dropout)
        optimizer = fitting.adamw(argparse.Namespace(**{**vars(args), "learning_rate": learning_rate}),
                                 epochs * steps, model=model)
        model.compile_for_training(optimizer=optimizer, **fast_paths.compile_options(args))
    model.fit(**devices.fit_data(strategy, train, validation_data=validation), epochs=epochs, steps_per_epoch=steps,
              callbacks=fitting.standard_callbacks(output_dir, list(extra_callbacks)), verbose=fitting.fit_verbosity())
    metrics = dict(zip(["validation_loss", "validation_accuracy"],
                       model.evaluate(validation, verbose=0, return_dict=False)))
    print(f"masked words: validation loss {metrics['validation_loss']:.3f}, "
          f"accuracy {metrics['validation_accuracy']:.3f}")
    summary = common.finish(model, output_dir, args, metrics, started,
                            extra={"documents": len(x_train), "words": words})
    print(f"wrote the encoder to {output_dir} in {summary['wall_time_seconds']:.0f} s")
    return model, summary


def load_encoder(folder):
    """`(MaskedLanguageModel, vocabulary)` from an encoder folder (a finished `pretrain_text` run, or the
    `encoder/` folder of an `imdb_classifier --pretrain-epochs` run). Raises `ValueError` naming what is missing."""
    missing = [name for name in (ENCODER_FILE, VOCABULARY_FILE) if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise ValueError(
            f"--encoder {folder!r} is not an encoder folder: missing {', '.join(missing)}. Give the folder of a "
            "finished `python -m recipes.pretrain_text` run, or RUN_DIR/encoder of an imdb_classifier "
            "--pretrain-epochs run."
        )
    model = keras.saving.load_model(os.path.join(folder, ENCODER_FILE))
    if not isinstance(model, MaskedLanguageModel):
        raise ValueError(f"--encoder {folder!r}: {ENCODER_FILE} holds a {type(model).__name__}, not a "
                         "MaskedLanguageModel.")
    return model, word_ids.load_vocabulary(os.path.join(folder, VOCABULARY_FILE))


if __name__ == "__main__":
    sys.exit(runs.run_main(main))
