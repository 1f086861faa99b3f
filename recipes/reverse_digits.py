"""Teach a Transformer to reverse (or copy, or sort) digit strings: the default keras_tfm demo.

No download. A small encoder-decoder `Seq2SeqTransformer` learns the task with teacher forcing, then generates
answers for held-out strings with greedy and beam search. Its cross-attention is drawn every epoch: for
reversal it becomes the anti-diagonal, each output digit looking at its mirror image in the input. It also
draws the sinusoidal positional encoding it adds to the digits (`position_encoding.png`) and the decoder's
causal self-attention, a lower triangle (`decoder_self_attention.png`), and logs the gradient norm per epoch
(`gradient_norm` in `history.csv` and `curves.png`).

    python -m recipes.reverse_digits                 # about 2 minutes on 2 CPU cores, >= 99% exact match
    python -m recipes.reverse_digits --task sort --epochs 10
    python -m recipes.reverse_digits --quick         # under half a minute: checks that everything runs
"""

import os
import sys
import time

import keras
import numpy as np

from keras_tfm.callbacks import AttentionMapCallback, GradientNormCallback
from keras_tfm.data import digits
from keras_tfm.data.digits import TASKS
from keras_tfm.insight import visualize
from keras_tfm.insight.attention_probe import attention_maps
from keras_tfm.layers import sinusoidal_position_encoding
from keras_tfm.models import Seq2SeqTransformer
from keras_tfm.presets import SEQ2SEQ_PRESETS

from recipes import common, devices, fast_paths, fitting, flags, runs

PRESETS = tuple(sorted(SEQ2SEQ_PRESETS))

# Flags that shape the model's weights: a stopped run resumes only with the values it was started with.
MODEL_FLAGS = ("task", "max_digits", "preset")


def parse_args(argv):
    parser = flags.recipe_parser(__doc__.splitlines()[0], epochs=6, batch_size=64, learning_rate=3e-3)
    parser.add_argument("--task", choices=TASKS, default="reverse", help="what to do with the digits")
    parser.add_argument("--max-digits", type=flags.positive_int, default=10, help="longest digit string")
    parser.add_argument("--train-samples", type=flags.positive_int, default=20000,
                        help="generated training strings")
    parser.add_argument("--test-samples", type=flags.positive_int, default=1000,
                        help="generated held-out strings (exact match is measured on them)")
    parser.add_argument("--preset", choices=PRESETS, default="tiny", help="model size")
    args = parser.parse_args(argv)
    if args.quick:  # a smoke test of the whole pipeline: tiny data, at most 2 epochs
        flags.apply_quick(args, epochs=lambda n: min(n, 2), train_samples=512, test_samples=64,
                          max_digits=lambda n: min(n, 6))
    return args


def main(argv=None, extra_callbacks=()):
    args = parse_args(argv)
    started = time.time()
    strategy = common.setup(args, "reverse_digits")
    output_dir = common.start_run("reverse_digits", args, MODEL_FLAGS)

    # Data: generated on the fly from three seeds: training strings, validation strings (watched during training)
    # and test strings (scored once, at the end).
    x_train, y_train = digits.make_dataset(args.train_samples, args.max_digits, args.task, seed=args.seed)
    x_test, y_test = digits.make_dataset(args.test_samples, args.max_digits, args.task, seed=args.seed + 1)
    x_valid, y_valid = digits.make_dataset(args.test_samples, args.max_digits, args.task, seed=args.seed + 2)

    # Model.
    steps = args.epochs * fitting.steps_per_epoch(len(x_train), args.batch_size)
    with devices.strategy_scope(strategy):
        model = Seq2SeqTransformer.from_preset(
            args.preset, source_vocab_size=digits.VOCAB_SIZE, target_vocab_size=digits.VOCAB_SIZE,
            max_length=args.max_digits + 2, dropout=0.0,
        )
        optimizer = keras.optimizers.Adam(
            fitting.warmup_cosine(args.learning_rate, steps, args.warmup_fraction), **fitting.optimizer_options(args)
        )
        model.compile_for_training(optimizer=optimizer, **fast_paths.compile_options(args))

    # Train, drawing the cross-attention of a few held-out strings at every epoch.
    sample = (x_valid[:1], y_valid[:1, :-1])  # one validation string, drawn at every epoch
    pictures = [AttentionMapCallback(sample, os.path.join(output_dir, "attention"), tokens=digits.VOCABULARY,
                                     html=True)]
    # The gradient norm goes first, so the CSV logger sees it (a climbing norm is the sign of divergence).
    callbacks = [GradientNormCallback()] + fitting.standard_callbacks(
        output_dir, (pictures if args.attention_maps else []) + list(extra_callbacks))
    data = devices.fit_data(strategy, (x_train, y_train[:, :-1]), y_train[:, 1:], args.batch_size,
                           validation_data=((x_valid, y_valid[:, :-1]), y_valid[:, 1:]), seed=args.seed,
                           epochs=args.epochs, first_epoch=runs.finished_epochs(output_dir))
    model.fit(**data, epochs=args.epochs, callbacks=callbacks, verbose=fitting.fit_verbosity())

    # Evaluate by generating: greedy and beam search, exact match of the whole answer.
    new_tokens = args.max_digits + 1
    greedy = model.generate(x_test, max_new_tokens=new_tokens, start_id=digits.START, end_id=digits.END)
    beam = model.generate(x_test, max_new_tokens=new_tokens, start_id=digits.START, end_id=digits.END, strategy="beam")
    metrics = {"exact_match_greedy": digits.exact_match(greedy, y_test), "exact_match_beam": digits.exact_match(beam, y_test)}
    print(f"\nheld-out exact match: greedy {metrics['exact_match_greedy']:.4f}, beam {metrics['exact_match_beam']:.4f}")
    for i in range(5):
        print(f"  {digits.decode(x_test[i]):>12s} -> greedy {digits.decode(greedy[i]):<12s} beam {digits.decode(beam[i]):<12s}"
              f" (expected {digits.decode(y_test[i])})")

    # The alignment of the model's own answers: target input = start + generated tokens.
    answer_input = np.concatenate([np.full((4, 1), digits.START, "int32"), greedy[:4, :-1]], axis=1)
    maps = attention_maps(model, (x_test[:4], answer_input))
    cross = [record.weights for record in maps.of_kind("cross")]
    source_tokens = [digits.VOCABULARY[t] for t in x_test[0] if t]
    answer_tokens = ["<s>"] + [digits.VOCABULARY[t] for t in greedy[0] if t]  # the decoder's inputs
    predicted = answer_tokens[1:]  # row i reads input i and predicts answer token i
    figure = visualize.plot_alignment(source_tokens, predicted, cross[-1][0].mean(0),
                                      title=f"{args.task}: cross-attention of the last decoder block",
                                      ylabel="predicted token")
    visualize.save_figure(figure, os.path.join(output_dir, "alignment.png"))
    # The decoder's masked self-attention: each answer token sees only itself and the tokens before it.
    causal = maps.of_kind("self")[-1].weights
    figure = visualize.plot_attention_heads(causal, answer_tokens, answer_tokens, query_label=visualize.DECODER_ROWS,
                                            title="decoder self-attention (causal: nothing above the diagonal)")
    visualize.save_figure(figure, os.path.join(output_dir, "decoder_self_attention.png"))
    # The positions the model adds to the digit embeddings: one row per position, one column per channel.
    embedding = model.get_layer("source_embedding")
    table = keras.ops.convert_to_numpy(sinusoidal_position_encoding(args.max_digits + 2, embedding.position_dim))
    figure = visualize.plot_position_encoding(table, title=f"sinusoidal positional encoding ({table.shape[0]} "
                                              f"positions x {table.shape[1]} channels)")
    visualize.save_figure(figure, os.path.join(output_dir, "position_encoding.png"))

    summary = common.finish(model, output_dir, args, metrics, started)
    print(f"wrote {output_dir} in {summary['wall_time_seconds']:.0f} s")
    if args.attention_maps:
        print(f"attention explorer (open in a browser): {pictures[0].html_path}")
    return summary


if __name__ == "__main__":
    sys.exit(runs.run_main(main))
