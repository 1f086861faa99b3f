"""Train a GPT-style language model (TransformerLM) on one text, character by character or in subwords.

The text is a file (`--text-file`) or tensorflow-datasets `tiny_shakespeare`; its first 90% trains, the last 10%
validates (nanoGPT's split). Training reads random windows of `max_length + 1` tokens; an "epoch" here is
`--steps-per-epoch` steps, after which the whole validation text is scored (nats per token, perplexity). At the
end the run writes samples continued from `--prompt`, every head of the first and last block for a piece of
validation text, the curves and `summary.json`.

    python -m recipes.language_model --text-file input.txt      # nanoGPT's CPU setting: 4 layers, 2,000 steps
    python -m recipes.language_model --tokenizer subword --vocab-size 1000 --text-file input.txt
    python -m recipes.language_model --quick --text-file input.txt   # seconds: checks that everything runs
"""

import os
import sys
import time

import numpy as np

from keras_tfm import load_model
from keras_tfm.data import text_corpus
from keras_tfm.insight import visualize
from keras_tfm.insight.attention_probe import attention_maps
from keras_tfm.models import TransformerLM
from keras_tfm.presets import LANGUAGE_MODEL_PRESETS
from keras_tfm.text import SubwordTokenizer
from keras_tfm.text.tokenizer import END

from recipes import common, devices, fast_paths, fitting, flags, runs

PRESETS = tuple(sorted(LANGUAGE_MODEL_PRESETS))

# Flags that shape the model's weights: a stopped run resumes only with the values it was started with.
MODEL_FLAGS = ("tokenizer", "vocab_size", "preset", "text_file")


def parse_args(argv):
    parser = flags.recipe_parser(__doc__.splitlines()[0], epochs=8, batch_size=12, learning_rate=1e-3)
    parser.set_defaults(warmup_fraction=0.05)  # nanoGPT: 100 warm-up steps of 2,000
    data = parser.add_argument_group("data")
    data.add_argument("--text-file", default=None,
                      help="a UTF-8 text file (default: tensorflow-datasets tiny_shakespeare)")
    data.add_argument("--data-dir", default=None, help="a prepared tensorflow-datasets folder (no download)")
    data.add_argument("--tokenizer", choices=("char", "subword"), default="char", help="characters or SentencePiece")
    data.add_argument("--vocab-size", type=flags.positive_int, default=1000, help="subword vocabulary size")
    model = parser.add_argument_group("model and training")
    model.add_argument("--preset", choices=PRESETS, default="shakespeare_char_cpu",
                       help="model size (nanoGPT's CPU size by default)")
    model.add_argument("--dropout", type=flags.fraction, default=None, help="dropout rate (default: the preset's)")
    model.add_argument("--steps-per-epoch", type=flags.positive_int, default=250,
                       help="training steps between validations (epochs x this = iterations)")
    model.add_argument("--weight-decay", type=flags.non_negative_float, default=0.1,
                       help="AdamW weight decay (not on biases and norms)")
    sample = parser.add_argument_group("samples")
    sample.add_argument("--prompt", default="\n", help="text the samples continue")
    sample.add_argument("--sample-tokens", type=flags.positive_int, default=500, help="tokens per sample")
    sample.add_argument("--num-samples", type=flags.positive_int, default=3, help="samples to write")
    sample.add_argument("--temperature", type=flags.positive_float, default=0.8, help="sampling temperature")
    sample.add_argument("--top-k", type=flags.positive_int, default=200, help="sample among the k most likely")
    sample.add_argument("--sample", nargs="+", metavar=("RUN_DIR", "PROMPT"),
                        help="continue the prompts with the model and tokenizer a finished run saved (samples as "
                             "--sample-tokens, --temperature, --top-k, --num-samples); nothing is trained")
    args = parser.parse_args(argv)
    if args.sample is not None and len(args.sample) < 2:
        parser.error("--sample needs a run folder and at least one prompt: --sample RUN_DIR \"prompt\" ...")
    if args.quick:  # a smoke test of the whole pipeline: a tiny model, a few steps, short samples
        flags.apply_quick(args, preset="tiny", epochs=lambda n: min(n, 2), steps_per_epoch=lambda n: min(n, 20),
                          sample_tokens=lambda n: min(n, 80), num_samples=1)
    return args


class Subwords:
    """A `SubwordTokenizer` over running text: lines are encoded one by one and joined by the end token, which
    therefore stands for the newline (SentencePiece itself keeps no line breaks)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.vocab_size

    def encode(self, text):
        ids = []
        for line in self.tokenizer.encode(text.split("\n")):
            ids.extend(line + [END])
        return np.asarray(ids[:-1], "int32")

    def decode(self, ids):
        ids = [int(i) for i in np.asarray(ids).reshape(-1) if int(i) != 0]
        lines, line = [], []
        for token in ids + [END]:
            if token == END:
                lines.append(self.tokenizer.decode([line])[0] if line else "")
                line = []
            else:
                line.append(token)
        return "\n".join(lines)

    def labels(self):
        return [self.tokenizer.id_to_piece(i) if i != END else "\\n" for i in range(self.vocab_size)]


CHARACTERS, SUBWORDS = "vocabulary.json", "tokenizer.model"  # a run's tokenizer, one of the two


def make_tokenizer(args, train_text, output_dir):
    """Characters or subwords, learned from the training text; kept in `output_dir` so a resumed run reads the
    same ids."""
    if args.tokenizer == "char":
        if not os.path.exists(os.path.join(output_dir, CHARACTERS)):
            text_corpus.CharacterVocabulary.from_text(train_text).save(os.path.join(output_dir, CHARACTERS))
    elif not os.path.exists(os.path.join(output_dir, SUBWORDS)):
        lines = [line for line in train_text.split("\n") if line.strip()]
        SubwordTokenizer.train(lines, vocab_size=args.vocab_size).save(os.path.join(output_dir, SUBWORDS))
    return load_tokenizer(output_dir)


def load_tokenizer(run_dir):
    """The tokenizer a run keeps in its folder (characters or subwords), or None if there is none."""
    if os.path.exists(os.path.join(run_dir, CHARACTERS)):
        return text_corpus.CharacterVocabulary.load(os.path.join(run_dir, CHARACTERS))
    if os.path.exists(os.path.join(run_dir, SUBWORDS)):
        return Subwords(SubwordTokenizer.load(os.path.join(run_dir, SUBWORDS)))
    return None


SPACE = "\u2423"  # "␣": a space's label in pictures, where a blank tick would say nothing


def labels_of(tokenizer):
    """A label per token id (for pictures): the character or subword piece; newlines shown as \\n, a space as ␣."""
    if isinstance(tokenizer, Subwords):
        return tokenizer.labels()
    return ["<pad>"] + [SPACE if c == " " else repr(c)[1:-1] for c in tokenizer.characters]


def continue_text(model, prompt_ids, new_tokens, seed, temperature, k):
    """`new_tokens` sampled after `prompt_ids`, longer than the context if need be: when the context is full,
    generation continues from the last half of it (as nanoGPT crops its input to the context)."""
    ids = list(prompt_ids[-(model.max_length - 1):])
    produced = 0
    while produced < new_tokens:
        window = ids[-(model.max_length // 2):] if len(ids) + 1 > model.max_length else ids
        chunk = min(new_tokens - produced, model.max_length - len(window))
        out = model.generate(np.asarray([window], "int32"), chunk, strategy="top_k", k=k, temperature=temperature,
                             seed=seed + produced)
        ids.extend(out[0, len(window):].tolist())
        produced += chunk
    return ids[len(prompt_ids[-(model.max_length - 1):]):]


def sample_from_run(args):
    """`--sample RUN_DIR PROMPT...`: prints `--num-samples` continuations of each prompt by a finished run's model
    and returns them."""
    run_dir, prompts = args.sample[0], args.sample[1:]
    tokenizer = load_tokenizer(run_dir)
    if tokenizer is None or not os.path.exists(os.path.join(run_dir, "model.keras")):
        print(f"error: --sample: {run_dir!r} is not a finished language_model run: it needs model.keras and "
              f"{CHARACTERS} or {SUBWORDS}.", file=sys.stderr)
        raise SystemExit(2)
    model = load_model(run_dir, compile=False)
    samples = []
    for prompt in prompts:
        try:
            prompt_ids = tokenizer.encode(prompt)
        except ValueError as error:  # a character the run never saw
            print(f"error: --sample: {error} (prompt {prompt!r})", file=sys.stderr)
            raise SystemExit(2) from None
        if len(prompt_ids) == 0:
            print("error: --sample: a prompt must contain at least one token", file=sys.stderr)
            raise SystemExit(2)
        for i in range(args.num_samples):
            new = continue_text(model, prompt_ids, args.sample_tokens, seed=args.seed + 1000 * i,
                                temperature=args.temperature, k=args.top_k)
            samples.append(prompt + tokenizer.decode(new))
            print(f"--- {prompt!r}, sample {i}\n{samples[-1]}")
    return {"samples": samples}


def main(argv=None, extra_callbacks=()):
    args = parse_args(argv)
    if args.sample:
        return sample_from_run(args)
    started = time.time()
    strategy = common.setup(args, "language_model")

    # Data: one text, split 90/10 in file order; tokens learned from the training part.
    with common.exit_when_data_unavailable():
        text = text_corpus.load_text(args.text_file, args.data_dir)
    output_dir = common.start_run("language_model", args, MODEL_FLAGS)
    train_text, validation_text = text_corpus.split(text)
    tokenizer = make_tokenizer(args, train_text, output_dir)
    train_ids, validation_ids = tokenizer.encode(train_text), tokenizer.encode(validation_text)
    preset = LANGUAGE_MODEL_PRESETS[args.preset]
    context = preset["max_length"]
    x_valid, y_valid = text_corpus.consecutive_windows(validation_ids, context)
    print(f"{len(text):,} characters -> {len(train_ids):,} training and {len(validation_ids):,} validation tokens; "
          f"vocabulary {tokenizer.vocab_size} ({args.tokenizer}); context {context}")

    # Model: nanoGPT's settings by default (AdamW, beta_2 0.99, weight decay 0.1 on matrices and tables, warm-up
    # then cosine decay, gradients clipped at norm 1).
    steps = args.epochs * args.steps_per_epoch
    with devices.strategy_scope(strategy):
        overrides = {} if args.dropout is None else {"dropout": args.dropout}
        model = TransformerLM.from_preset(args.preset, vocab_size=tokenizer.vocab_size, **overrides)
        optimizer = fitting.adamw(args, steps, model=model, beta_2=0.99)
        model.compile_for_training(optimizer=optimizer, **fast_paths.compile_options(args))
    print(f"TransformerLM '{args.preset}': {model.count_params():,} parameters; "
          f"{steps} steps of {args.batch_size} x {context} tokens")

    training = text_corpus.random_windows(train_ids, context, args.batch_size, seed=args.seed)
    callbacks = fitting.standard_callbacks(output_dir, list(extra_callbacks))
    fit_started = time.time()
    data = devices.fit_data(strategy, training, validation_data=(x_valid, y_valid), validation_batch_size=64)
    model.fit(**data, steps_per_epoch=args.steps_per_epoch, epochs=args.epochs, callbacks=callbacks,
              verbose=fitting.fit_verbosity())
    fit_seconds = time.time() - fit_started

    # Evaluate: the whole validation text, every token predicted once from its window.
    validation_loss = float(model.evaluate(x_valid, y_valid, batch_size=64, verbose=0))
    metrics = {"validation_loss": validation_loss, "validation_perplexity": float(np.exp(validation_loss)),
               "steps": steps, "fit_seconds": fit_seconds}
    print(f"\nvalidation loss {validation_loss:.4f} nats/token, perplexity {np.exp(validation_loss):.2f} "
          f"({len(validation_ids):,} tokens); training took {fit_seconds:.0f} s")

    # Samples continued from the prompt (top-k with temperature, as nanoGPT's sample.py).
    prompt_ids = tokenizer.encode(args.prompt)
    if len(prompt_ids) == 0:
        raise SystemExit("error: --prompt must contain at least one token")
    with open(os.path.join(output_dir, "samples.txt"), "w", encoding="utf-8") as file:
        for i in range(args.num_samples):
            new = continue_text(model, prompt_ids, args.sample_tokens, seed=args.seed + 1000 * i,
                                temperature=args.temperature, k=args.top_k)
            sample = args.prompt + tokenizer.decode(new)
            file.write(f"--- sample {i}\n{sample}\n")
            if i == 0:
                print(f"sample:\n{sample[:400]}")

    # Every head of the first and last block on a piece of validation text.
    if args.attention_maps:
        piece = x_valid[:1, : min(context, 48)]
        names = [str(label) for label in np.asarray(labels_of(tokenizer))[piece[0]]]
        records = attention_maps(model, piece).of_kind("self")  # one per block, in order
        for block in sorted({0, model.depth - 1}):
            figure = visualize.plot_attention_heads(records[block].weights, names, names,
                                                    title=f"block {block} self-attention, validation text",
                                                    query_label=visualize.DECODER_ROWS)
            visualize.save_figure(figure, os.path.join(output_dir, f"heads_block_{block}.png"))

    summary = common.finish(model, output_dir, args, metrics, started, extra={"vocab_size": tokenizer.vocab_size})
    print(f"wrote {output_dir} in {summary['wall_time_seconds']:.0f} s")
    return summary


if __name__ == "__main__":
    sys.exit(runs.run_main(main))
