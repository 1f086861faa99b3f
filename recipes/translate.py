"""Train a small Transformer to translate (Multi30k English -> German by default) and score it with BLEU.

The 2017 paper's own task, at laptop size. Subword vocabularies are learned on the training text with
SentencePiece (`keras_tfm.text.SubwordTokenizer`, one vocabulary shared by both languages unless
`--separate-vocab`); a `Seq2SeqTransformer` learns with teacher forcing, label smoothing and a warm-up + cosine
learning rate (or the paper's inverse square root, `--schedule inverse_sqrt`), in batches of `--batch-size` pairs
(or of `--tokens-per-batch` tokens, pairs of similar length together, as the paper batched). The model is chosen
on the validation set, never the test set: greedy validation BLEU after each epoch (`val_bleu` in history.csv),
the weights of the last `--average-last` epochs averaged (the 2017 paper's §6.1) and kept unless the best single
epoch scores higher (`--patience` stops early on it). The test set is translated with greedy and beam search and
scored with corpus BLEU the sacreBLEU way (detokenized output against the raw references).

Data, one of:
  * `--data-dir FOLDER` laid out like Multi30k (train.en.gz, val.en.gz, test_2016_flickr.en.gz and the .de
    files; `--source-lang/--target-lang` pick the direction);
  * `--train-src/--train-tgt` (+ `--valid-*`, `--test-*`): any line-aligned text files, plain or .gz;
  * `--tfds NAME` (+ `--tfds-dir FOLDER` for a prepared copy): a tensorflow-datasets translation set.

    python -m recipes.translate --data-dir multi30k --mixed-precision bfloat16   # 12 epochs
        # Multi30k en->de: test BLEU 37.3 (beam), 36.2 (greedy); about 5.5 min per epoch on 2 CPU cores
    python -m recipes.translate --data-dir multi30k --quick   # a tiny run: checks that everything runs
    python -m recipes.translate --translate runs/translate/RUN "A dog runs on the beach."   # use a finished run

Besides the files every recipe writes (see `recipes.common`), a run leaves `translator/` (the model with
its tokenizers: `keras_tfm.Translator.load(...)`), `translations.txt` (source, reference, greedy and
beam output of every test sentence) and `alignment_{i}.png` (cross-attention of a few test sentences).
"""

import os
import sys
import time

import keras

from keras_tfm.callbacks import AttentionMapCallback, CheckpointAverage
from keras_tfm.data import DataUnavailable, translation
from keras_tfm.insight import visualize
from keras_tfm.models import Seq2SeqTransformer
from keras_tfm.presets import SEQ2SEQ_PRESETS, SUBWORD_MODEL_TYPES
from keras_tfm.schedules import InverseSquareRootWarmup
from keras_tfm.text import SubwordTokenizer, Translator, ValidationBLEU, corpus_bleu

from recipes import common, devices, fast_paths, fitting, flags, runs

PRESETS = tuple(sorted(SEQ2SEQ_PRESETS))
TOKENIZERS = SUBWORD_MODEL_TYPES
SCHEDULES = ("cosine", "inverse_sqrt")

# Flags that shape the model's weights: a stopped run resumes only with the values it was started with.
MODEL_FLAGS = ("source_lang", "target_lang", "vocab_size", "tokenizer", "separate_vocab", "max_length", "preset")


def parse_args(argv):
    parser = flags.recipe_parser(__doc__.splitlines()[0], epochs=12, batch_size=128, learning_rate=1e-3)
    data = parser.add_argument_group("data")
    data.add_argument("--data-dir", default=None, help="a folder in the Multi30k layout")
    data.add_argument("--source-lang", default="en", help="source language suffix of the files in --data-dir")
    data.add_argument("--target-lang", default="de", help="target language suffix of the files in --data-dir")
    for split in ("train", "valid", "test"):
        for side in ("src", "tgt"):
            data.add_argument(f"--{split}-{side}", default=None, help=f"{split} {side} file, one sentence per line")
    data.add_argument("--tfds", default=None, help="a tensorflow-datasets translation set, e.g. ted_hrlr_translate/pt_to_en")
    data.add_argument("--tfds-dir", default=None, help="a tensorflow-datasets folder already holding --tfds")
    data.add_argument("--train-samples", type=flags.positive_int, default=None, help="use only this many pairs")
    data.add_argument("--test-samples", type=flags.positive_int, default=None, help="translate only this many")
    data.add_argument("--tokens-per-batch", type=flags.positive_int, default=None,
                      help="count training batches in tokens (the 2017 paper's way): pairs of similar length "
                           "batched together, this many padded tokens of the longer side at most, --batch-size "
                           "pairs at most (default: batches of --batch-size pairs)")
    text = parser.add_argument_group("tokenizer")
    text.add_argument("--vocab-size", type=flags.positive_int, default=8000, help="subword vocabulary size")
    text.add_argument("--tokenizer", choices=TOKENIZERS, default="unigram", help="SentencePiece model type")
    text.add_argument("--separate-vocab", action="store_true", help="one vocabulary per language instead of a shared one")
    text.add_argument("--max-length", type=flags.positive_int, default=64,
                      help="longest sentence in tokens (longer training pairs are dropped)")
    model = parser.add_argument_group("model")
    model.add_argument("--preset", choices=PRESETS, default="small", help="model size")
    model.add_argument("--dropout", type=flags.fraction, default=0.1, help="dropout rate")
    model.add_argument("--label-smoothing", type=flags.fraction, default=0.1, help="label smoothing of the loss")
    model.add_argument("--weight-decay", type=flags.non_negative_float, default=1e-4, help="AdamW weight decay")
    model.add_argument("--schedule", choices=SCHEDULES, default="cosine",
                       help="learning rate: linear warm-up to --learning-rate over --warmup-fraction of the "
                            "steps, then cosine decay to 0 at the last step (cosine), or decay as 1/sqrt(step), "
                            "never reaching 0 (inverse_sqrt: the 2017 paper's schedule)")
    choose = parser.add_argument_group("choosing the model (on the validation set, never the test set)")
    choose.add_argument("--bleu-every", type=flags.non_negative_int, default=1,
                        help="greedy BLEU on the validation set every this many epochs, logged as val_bleu "
                             "(0: never; then --patience is off and the last epochs are averaged)")
    choose.add_argument("--average-last", type=flags.positive_int, default=5,
                        help="average the weights of the last N epochs (1: no averaging); the average is kept "
                             "unless the best single epoch scores a higher validation BLEU")
    choose.add_argument("--patience", type=flags.positive_int, default=None,
                        help="stop when val_bleu has not improved for this many scorings (default: never)")
    decode = parser.add_argument_group("decoding")
    decode.add_argument("--num-beams", type=flags.positive_int, default=4, help="beams for beam search")
    decode.add_argument("--length-penalty", type=flags.non_negative_float, default=1.0,
                        help="beam scores are divided by length ** this")
    decode.add_argument("--translate", nargs="+", metavar=("RUN_DIR", "SENTENCE"),
                        help="translate the sentences with the translator a finished run saved (RUN_DIR or "
                             "RUN_DIR/translator), with beam search (--num-beams, --length-penalty); nothing is "
                             "trained")
    args = parser.parse_args(argv)
    if args.translate is not None and len(args.translate) < 2:
        parser.error("--translate needs a run folder and at least one sentence: --translate RUN_DIR \"sentence\" ...")
    has_files = args.train_src or args.train_tgt
    if sum(bool(x) for x in (args.data_dir, has_files, args.tfds)) > 1:
        parser.error("give only one of --data-dir, --train-src/--train-tgt and --tfds")
    if bool(args.train_src) != bool(args.train_tgt):
        parser.error("--train-src and --train-tgt go together")
    if args.tokens_per_batch and args.distribute != "none":
        parser.error("--tokens-per-batch makes batches of different sizes, which a --distribute strategy cannot "
                     "split evenly over its replicas: leave one of them out")
    if args.max_length < 4:
        parser.error(f"argument --max-length: must be at least 4 (start, a token, end), got {args.max_length}")
    if args.quick:  # a smoke test: tiny model, a few hundred pairs, 2 epochs
        flags.apply_quick(args, epochs=lambda n: min(n, 2), preset="tiny", vocab_size=lambda n: min(n, 600),
                          train_samples=1000, test_samples=16, max_length=lambda n: min(n, 48),
                          num_beams=lambda n: min(n, 2), average_last=lambda n: min(n, 2))
    return args


def load_corpus(args):
    """`{split: (source, target)}` from the flags; raises DataUnavailable with instructions when there is none."""
    if args.tfds:
        return translation.load_tfds(args.tfds, args.tfds_dir)
    if args.data_dir:
        return translation.load_files(translation.multi30k_files(args.data_dir, args.source_lang, args.target_lang))
    if args.train_src:
        pairs = {"train": (args.train_src, args.train_tgt)}
        for split, flag in (("validation", "valid"), ("test", "test")):
            source, target = getattr(args, f"{flag}_src"), getattr(args, f"{flag}_tgt")
            if bool(source) != bool(target):
                raise SystemExit(f"error: --{flag}-src and --{flag}-tgt go together")
            pairs[split] = (source, target) if source else None
        return translation.load_files(pairs)
    raise DataUnavailable("Translation: no data given. " + translation.HOW_TO_PROVIDE)


def training_batches(args, source, target):
    """The shuffled training pipeline (batches of `--batch-size` pairs, or of `--tokens-per-batch` tokens) and
    its number of batches per epoch, which the learning-rate schedule needs before training starts."""
    dataset = translation.make_dataset(source, target, args.batch_size, shuffle=True, seed=args.seed,
                                       tokens_per_batch=args.tokens_per_batch)
    return dataset, translation.batch_count(source, target, args.batch_size, args.tokens_per_batch)


def learning_rate_schedule(args, steps):
    """`--schedule inverse_sqrt`: warm-up over `--warmup-fraction` of the run's `steps`, then 1/sqrt(step) decay
    from `--learning-rate`; None for `cosine`, the recipes' warm-up + cosine decay (`fitting.adamw`'s)."""
    if args.schedule == "inverse_sqrt":
        return InverseSquareRootWarmup(args.learning_rate, max(1, round(args.warmup_fraction * steps)))
    return None


def tokenizers(args, train_source, train_target, output_dir):
    """The run's (source, target) tokenizers: read from `output_dir/tokenizers` when resuming, else learned."""
    paths = [os.path.join(output_dir, "tokenizers", f"{side}.model") for side in ("source", "target")]
    if all(os.path.exists(path) for path in paths):
        return tuple(SubwordTokenizer.load(path) for path in paths)
    if args.separate_vocab:
        pair = (SubwordTokenizer.train(train_source, args.vocab_size, args.tokenizer),
                SubwordTokenizer.train(train_target, args.vocab_size, args.tokenizer))
    else:
        shared = SubwordTokenizer.train(train_source + train_target, args.vocab_size, args.tokenizer)
        pair = (shared, shared)
    for tokenizer, path in zip(pair, paths):
        tokenizer.save(path)
    return pair


def main(argv=None, extra_callbacks=()):
    args = parse_args(argv)
    if args.translate:
        return translate(args.translate[0], args.translate[1:], args.num_beams, args.length_penalty)
    started = time.time()
    strategy = common.setup(args, "translate")

    # Data: raw sentence pairs. The validation split stands in for a missing test split and vice versa; with
    # neither, the last training pairs are held out.
    with common.exit_when_data_unavailable():
        corpus = translation.fill_missing_splits(load_corpus(args))
    train_source, train_target = (side[: args.train_samples] for side in corpus["train"])
    test_source, test_target = (side[: args.test_samples] for side in corpus["test"])
    output_dir = common.start_run("translate", args, MODEL_FLAGS)

    # Subword vocabularies, learned on the training text only, and kept in the output folder so that a resumed
    # run reads its token ids exactly as before.
    source_tokenizer, target_tokenizer = tokenizers(args, train_source, train_target, output_dir)

    def to_ids(source, target):
        return translation.keep_fitting(source_tokenizer.encode(source),
                                        target_tokenizer.encode(target, add_start=True, add_end=True), args.max_length)

    x_train, y_train, dropped = to_ids(train_source, train_target)
    x_valid, y_valid, _ = to_ids(*corpus["validation"])
    validation = len(corpus["validation"][0])  # BLEU translates them all; the loss sees the pairs that fit
    print(f"{len(x_train)} training pairs ({dropped} longer than {args.max_length} tokens dropped), "
          + (f"{len(x_valid)} validation" if len(x_valid) == validation else
             f"{len(x_valid)} of the {validation} validation pairs for the loss (BLEU translates all)")
          + f", {len(test_source)} test; vocabulary {source_tokenizer.vocab_size}"
          + (f" / {target_tokenizer.vocab_size}" if args.separate_vocab else " (shared)"))

    # Model: tied output embedding (the paper's §3.4); AdamW with the paper's betas (0.9, 0.98), warm-up then
    # cosine decay (or the paper's inverse square root, §5.3); label smoothing 0.1 (§5.4).
    batches, batches_per_epoch = training_batches(args, x_train, y_train)
    steps = args.epochs * batches_per_epoch
    with devices.strategy_scope(strategy):
        model = Seq2SeqTransformer.from_preset(
            args.preset, source_vocab_size=source_tokenizer.vocab_size, target_vocab_size=target_tokenizer.vocab_size,
            max_length=args.max_length, dropout=args.dropout, tie_embeddings=True,
        )
        optimizer = fitting.adamw(args, steps, model=model, schedule=learning_rate_schedule(args, steps), beta_2=0.98)
        model.compile_for_training(optimizer=optimizer, label_smoothing=args.label_smoothing, **fast_paths.compile_options(args))

    pieces = [target_tokenizer.id_to_piece(i) for i in range(target_tokenizer.vocab_size)]
    source_pieces = [source_tokenizer.id_to_piece(i) for i in range(source_tokenizer.vocab_size)]
    sample = (x_valid[:1, : int((x_valid[0] > 0).sum())], y_valid[:1, : int((y_valid[0] > 0).sum()) - 1])
    pictures = [AttentionMapCallback(sample, os.path.join(output_dir, "attention"), tokens=(source_pieces, pieces),
                                     html=True)]
    # Choosing the model on the validation set: greedy BLEU written into the epoch logs (so history.csv, the
    # curves, the averaging and the early stop all see it), the weights of the last epochs kept for averaging,
    # and those of the best-scoring epoch. Both kept on disk, so a resumed run still has the earlier epochs.
    translator = Translator(model, source_tokenizer, target_tokenizer)
    valid_source, valid_target = corpus["validation"]
    validation_bleu = ValidationBLEU(translator, valid_source, valid_target, every_n_epochs=max(args.bleu_every, 1))
    choosing = [validation_bleu] if args.bleu_every else []
    averaging = os.path.join(output_dir, "averaging")
    last = CheckpointAverage(args.average_last, directory=os.path.join(averaging, "last"), apply=False)
    best = CheckpointAverage(1, monitor="val_bleu", directory=os.path.join(averaging, "best"), apply=False) \
        if args.bleu_every else None
    choosing += [c for c in (last, best) if c is not None]
    if args.patience and args.bleu_every:
        choosing.append(keras.callbacks.EarlyStopping(monitor="val_bleu", mode="max", patience=args.patience))
    # The BLEU first: Keras hands one logs dict down the list, so the checkpoint, backup and CSV row see it too.
    callbacks = choosing[:1] + fitting.standard_callbacks(
        output_dir, choosing[1:] + (pictures if args.attention_maps else []) + list(extra_callbacks))
    data = devices.fit_data(strategy, batches,
                           validation_data=translation.make_dataset(x_valid, y_valid, args.batch_size))
    model.fit(**data, epochs=args.epochs, callbacks=callbacks, verbose=fitting.fit_verbosity())
    choice = choose_weights(validation_bleu, last, best)

    # Evaluate: translate the test set with greedy and beam search; BLEU against the raw references.
    evaluating = time.time()
    greedy = translator.generate(test_source, strategy="greedy")
    greedy_seconds = time.time() - evaluating
    beam = translator.generate(test_source, strategy="beam", num_beams=args.num_beams, length_penalty=args.length_penalty)
    beam_seconds = time.time() - evaluating - greedy_seconds
    bleu_greedy, signature = corpus_bleu(greedy, test_target)
    bleu_beam, _ = corpus_bleu(beam, test_target)
    metrics = {"bleu_greedy": bleu_greedy, "bleu_beam": bleu_beam, "test_sentences": len(test_source),
               "translate_seconds_greedy": greedy_seconds, "translate_seconds_beam": beam_seconds}
    print(f"\ntest BLEU ({len(test_source)} sentences): greedy {bleu_greedy:.2f}, beam ({args.num_beams}) "
          f"{bleu_beam:.2f}   [sacreBLEU {signature}]")
    with open(os.path.join(output_dir, "translations.txt"), "w", encoding="utf-8") as file:
        for i, row in enumerate(zip(test_source, test_target, greedy, beam)):
            file.write(f"[{i}]\nsource:    {row[0]}\nreference: {row[1]}\ngreedy:    {row[2]}\nbeam:      {row[3]}\n\n")
    for i in range(min(3, len(test_source))):
        print(f"  {test_source[i]}\n    -> {beam[i]}\n       (reference: {test_target[i]})")

    # Alignment pictures: which source pieces each generated piece looked at.
    for i in range(min(3, len(test_source))):
        source_labels, target_labels, weights = translator.alignment(test_source[i], beam[i])
        figure = visualize.plot_alignment(source_labels, target_labels, weights,
                                          title="cross-attention of the last decoder block (mean of heads)")
        visualize.save_figure(figure, os.path.join(output_dir, f"alignment_{i}.png"))

    translator.save(os.path.join(output_dir, "translator"))
    summary = common.finish(model, output_dir, args, metrics, started,
                            extra={"bleu_signature": signature, "weights_chosen": choice}, scratch=["averaging"])
    print(f"wrote {output_dir} in {summary['wall_time_seconds']:.0f} s")
    if args.attention_maps:
        print(f"attention explorer (open in a browser): {pictures[0].html_path}")
    return summary


def choose_weights(validation_bleu, last, best):
    """Sets the model's weights to the better, by greedy validation BLEU (`validation_bleu.score()`), of the
    average of the last epochs and the best single epoch (with `--bleu-every 0`, the average); returns what was
    compared and chosen."""
    if not last.kept:  # no epoch snapshot at all (nothing was trained): keep the weights as they are
        return {"chosen": "as trained"}
    last.apply_average()
    average_bleu = validation_bleu.score()
    choice = {"averaged_epochs": [e + 1 for e in last.averaged_epochs], "val_bleu_average": average_bleu,
              "chosen": "average"}
    if best is not None and best.kept:
        (epoch, bleu), = best.kept
        choice.update(best_epoch=epoch + 1, val_bleu_best_epoch=bleu)
        if bleu > average_bleu:
            best.apply_average()
            choice["chosen"] = f"epoch {epoch + 1}"
    best_text = (f", best epoch ({choice['best_epoch']}) {choice['val_bleu_best_epoch']:.2f}"
                 if "best_epoch" in choice else "")
    print(f"validation BLEU (greedy): average of epochs {choice['averaged_epochs']} {average_bleu:.2f}{best_text}; "
          f"translating with the {choice['chosen']}")
    return choice


def translate(run_dir, sentences, num_beams, length_penalty):
    """Prints the beam-search translations of `sentences` by the translator saved in `run_dir`; returns them."""
    folder = os.path.join(run_dir, "translator")
    if not os.path.isfile(os.path.join(folder, "translator.json")):
        folder = run_dir  # the translator's own folder was given
    try:
        translator = Translator.load(folder)
    except ValueError as error:
        print(f"error: --translate: {error} A finished translate run keeps it in RUN_DIR/translator.", file=sys.stderr)
        raise SystemExit(2) from None
    outputs = translator.generate(sentences, strategy="beam", num_beams=num_beams, length_penalty=length_penalty)
    for sentence, output in zip(sentences, outputs):
        print(f"{sentence}\n  -> {output}")
    return {"translations": outputs}


if __name__ == "__main__":
    sys.exit(runs.run_main(main))
