"""The validation-BLEU ablation of `recipes.translate`: one row per change from a baseline, each row a whole run.

Every training row runs `python -m recipes.translate` with the baseline's flags and one change, in its own folder
under --output-dir, and is scored by the greedy validation BLEU of the weights the run chose (the average of its last
epochs, or its best epoch): never by the test set. The decoding rows (beam size, length penalty) train nothing: they
translate the validation set with the baseline run's saved translator. A finished row is read back, not run again
(the recipe never overwrites a finished run), so a stopped ablation goes on where it stopped; a row stopped halfway
resumes from its last epoch.

    python benchmarks/translate_ablation.py --data-dir multi30k --output-dir runs/ablation
    python benchmarks/translate_ablation.py --data-dir multi30k --output-dir runs/ablation \\
        --rows baseline dropout_0.3 inverse_sqrt -- --mixed-precision bfloat16 --epochs 12

Flags after `--` go to every training run. Writes `ablation.md` (the table for docs/results.md) and `ablation.json`.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from recipes import flags  # noqa: E402  (after sys.path names the repository)

# Each training row: what it changes from the baseline (the recipe's defaults), as translate flags. The issue's
# list: vocabulary type and size, dropout, schedule, batches in tokens, checkpoint averaging, label smoothing.
TRAINING_ROWS = {
    "baseline": [],
    "bpe": ["--tokenizer", "bpe"],
    "vocab_2000": ["--vocab-size", "2000"],
    "vocab_4000": ["--vocab-size", "4000"],
    "separate_vocab": ["--separate-vocab"],
    "dropout_0.3": ["--dropout", "0.3"],
    "inverse_sqrt": ["--schedule", "inverse_sqrt"],
    "tokens_4096": ["--tokens-per-batch", "4096"],
    "no_averaging": ["--average-last", "1"],
    "label_smoothing_0": ["--label-smoothing", "0"],
}
DECODING_ROWS = ("decoding",)  # beam size x length penalty on the baseline's translator


def parse_args(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    forwarded = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="a folder in the Multi30k layout (recipes.translate's)")
    parser.add_argument("--output-dir", required=True, help="one run folder per row is made in it")
    parser.add_argument("--rows", nargs="+", default=[*TRAINING_ROWS, *DECODING_ROWS],
                        choices=[*TRAINING_ROWS, *DECODING_ROWS], help="the rows to run (default: all)")
    parser.add_argument("--beams", type=flags.positive_int, nargs="+", default=[1, 4, 5, 8],
                        help="decoding rows: beam sizes")
    parser.add_argument("--length-penalties", type=flags.non_negative_float, nargs="+", default=[0.6, 1.0, 1.4],
                        help="decoding rows: length penalties (beam sizes above 1)")
    args = parser.parse_args(own)
    # The runs start in the repository (python -m recipes.translate): folders given relative to here stay right.
    args.data_dir, args.output_dir = os.path.abspath(args.data_dir), os.path.abspath(args.output_dir)
    if "decoding" in args.rows and "baseline" not in args.rows and not finished(row_dir(args, "baseline")):
        parser.error("the decoding rows translate with the baseline's translator: add baseline to --rows")
    args.forwarded = forwarded
    check_forwarded(forwarded)
    return args


def check_forwarded(forwarded):
    """The flags for the runs must parse for every row: a typo fails here, not after hours of training."""
    from recipes import translate

    for change in TRAINING_ROWS.values():
        translate.parse_args(["--data-dir", "unused", *forwarded, *change])


def row_dir(args, name):
    return os.path.join(args.output_dir, name)


def finished(folder):
    return os.path.isfile(os.path.join(folder, "summary.json"))


def run_row(args, name):
    """Trains one row with `python -m recipes.translate` (its own process: nothing carries over between rows)."""
    command = [sys.executable, "-m", "recipes.translate", "--data-dir", args.data_dir,
               "--output-dir", row_dir(args, name), *args.forwarded, *TRAINING_ROWS[name]]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def chosen_validation_bleu(summary):
    """The greedy validation BLEU of the weights a translate run kept (`summary.json`'s `weights_chosen`)."""
    chosen = summary.get("weights_chosen", {})
    if chosen.get("chosen") == "average":
        return chosen["val_bleu_average"]
    if str(chosen.get("chosen", "")).startswith("epoch"):
        return chosen["val_bleu_best_epoch"]
    raise ValueError(f"the run chose its weights without validation BLEU ({chosen!r}): it needs --bleu-every >= 1")


def training_row(args, name):
    with open(os.path.join(row_dir(args, name), "summary.json")) as file:
        summary = json.load(file)
    return {"row": name, "change": " ".join(TRAINING_ROWS[name]) or "the recipe's defaults",
            "val_bleu": chosen_validation_bleu(summary), "chosen": summary["weights_chosen"]["chosen"],
            "epochs": summary["flags"]["epochs"], "wall_time_seconds": summary["wall_time_seconds"]}


def decoding_rows(translator, source, target, beams, length_penalties):
    """Validation BLEU of `translator` for each beam size (1 = greedy) and length penalty, scored as the training
    runs score their epochs (`keras_tfm.text.ValidationBLEU`)."""
    from keras_tfm.text import ValidationBLEU

    rows = []
    for num_beams in beams:
        for penalty in ([1.0] if num_beams == 1 else length_penalties):
            started = time.time()
            if num_beams == 1:
                scorer, change = ValidationBLEU(translator, source, target), "greedy"
            else:
                scorer = ValidationBLEU(translator, source, target, strategy="beam", num_beams=num_beams,
                                        length_penalty=penalty)
                change = f"--num-beams {num_beams} --length-penalty {penalty:g}"
            rows.append({"row": "decoding", "change": change, "val_bleu": scorer.score(),
                         "wall_time_seconds": round(time.time() - started, 1)})
    return rows


def markdown(rows):
    """The table: one line per row, with its difference from the baseline's validation BLEU."""
    baseline = next((r["val_bleu"] for r in rows if r["row"] == "baseline"), None)
    lines = ["| row | change | validation BLEU (greedy) | vs baseline | minutes |", "|---|---|---|---|---|"]
    for row in rows:
        delta = "" if baseline is None or row["row"] == "baseline" else f"{row['val_bleu'] - baseline:+.2f}"
        lines.append(f"| {row['row']} | {row['change']} | {row['val_bleu']:.2f} | {delta} | "
                     f"{row['wall_time_seconds'] / 60:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None, run=run_row):
    args = parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    rows = []
    for name in (r for r in args.rows if r in TRAINING_ROWS):
        if finished(row_dir(args, name)):
            print(f"== {name}: finished before, read back", flush=True)
        else:
            run(args, name)
        rows.append(training_row(args, name))
    if "decoding" in args.rows:
        from keras_tfm.data import translation
        from keras_tfm.text import Translator

        translator = Translator.load(os.path.join(row_dir(args, "baseline"), "translator"))
        with open(os.path.join(row_dir(args, "baseline"), "summary.json")) as file:
            baseline_flags = json.load(file)["flags"]
        files = translation.multi30k_files(args.data_dir, baseline_flags["source_lang"], baseline_flags["target_lang"])
        source, target = translation.fill_missing_splits(translation.load_files(files))["validation"]
        rows += decoding_rows(translator, source, target, args.beams, args.length_penalties)
    table = markdown(rows)
    with open(os.path.join(args.output_dir, "ablation.json"), "w") as file:
        json.dump({"rows": rows, "forwarded_flags": args.forwarded}, file, indent=1)
    with open(os.path.join(args.output_dir, "ablation.md"), "w") as file:
        file.write(table)
    print(table)
    return rows


if __name__ == "__main__":
    main()
