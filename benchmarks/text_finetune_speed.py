"""Fine-tuning step time of a pretrained BERT checkpoint: keras_tfm's `TextClassifier.from_pretrained` against the
same checkpoint in HuggingFace `transformers` (PyTorch), side by side in one process, interleaved rounds.

Both train the same batches (batch 16 x 256 word pieces of random ids, a padding share like IMDB's) with AdamW and
gradient clipping, from the same checkpoint folder; ours runs on the backend `KERAS_BACKEND` selects, in the
precision `--precision` selects (`float32`, `mixed_bfloat16`, or `auto`: the one the recipe would choose, by
measuring matrix products here), with and without `jit_compile`. Prints the median seconds per step and ours /
theirs (below 1.0 = ours faster).

    python benchmarks/text_finetune_speed.py --pretrained all-MiniLM-L6-v2
    KERAS_BACKEND=torch python benchmarks/text_finetune_speed.py --pretrained all-MiniLM-L6-v2

Needs `pip install transformers torch`.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared timing loop
import timing  # noqa: E402

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrained", required=True)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="steps per round per implementation")
    parser.add_argument("--precision", choices=("auto", "float32", "mixed_bfloat16"), default="auto")
    parser.add_argument("--attention-dropout", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=None, help="threads of each framework (default: all cores)")
    parser.add_argument("--variants", nargs="+", choices=("full", "frozen_table", "lower_blocks", "lora"),
                        default=["full"],
                        help="ours fine-tuning every weight, with the word-piece table frozen, with the embeddings "
                             "and the lowest --freeze-blocks blocks frozen, and/or LoRA rank 8 on the query and value "
                             "projections (the head trains in every variant)")
    parser.add_argument("--freeze-blocks", type=int, default=3, help="blocks the lower_blocks variant freezes")
    parser.add_argument("--jit", choices=("both", "on", "off"), default=None,
                        help="ours with jit_compile True and/or False (default: both; off on PyTorch, where it means "
                             "torch.compile)")
    args = timing.parse_args(parser, argv, quick=dict(batch_size=2, length=16, rounds=1, steps=1))

    import keras
    import torch
    import transformers

    from keras_tfm.models import TextClassifier

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.precision == "auto":
        from keras_tfm.hardware import choose_precision

        args.precision, why = choose_precision()
        print(f"{keras.backend.backend()} backend, {why}")
    bf16 = args.precision == "mixed_bfloat16"

    rng = np.random.default_rng(0)
    b, n = args.batch_size, args.length
    lengths = np.minimum(rng.integers(n // 3, 2 * n, b), n)  # IMDB at 256 pieces: about 40% of reviews are cut
    with open(os.path.join(args.pretrained, "config.json"), encoding="utf-8") as file:
        vocab_size = json.load(file)["vocab_size"]
    ids = rng.integers(min(1000, vocab_size // 2), min(30000, vocab_size), (b, n)).astype("int32")
    ids[:, 0] = min(101, vocab_size - 1)  # [CLS] in BERT's vocabulary
    mask = (np.arange(n)[None, :] < lengths[:, None]).astype("int32")
    ids = ids * mask
    labels = rng.integers(0, 2, b)

    steps = {}
    keras.config.set_dtype_policy(args.precision)
    if args.jit is None:
        args.jit = "off" if keras.backend.backend() == "torch" else "both"
    for jit in {"both": (False, True), "on": (True,), "off": (False,)}[args.jit]:
        for variant in args.variants:
            model = TextClassifier.from_pretrained(args.pretrained, num_classes=2,
                                                   attention_dropout=args.attention_dropout)
            if variant == "lora":
                model.enable_lora(8)
            if variant == "frozen_table":
                model.freeze_token_embedding()
            if variant == "lower_blocks":
                model.freeze_lower_blocks(args.freeze_blocks)
            model.compile(keras.optimizers.AdamW(2e-5, weight_decay=0.01, clipnorm=1.0),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
            batch = {"token_ids": ids, "padding_mask": mask}
            what = ("" if variant == "full" else f", lowest {args.freeze_blocks} blocks frozen"
                    if variant == "lower_blocks" else f", {variant.replace('_', ' ')}")
            steps[f"keras_tfm ({keras.backend.backend()}, {args.precision}{', jit' if jit else ''}{what})"] = (
                lambda model=model, batch=batch: model.train_on_batch(batch, labels))
    keras.config.set_dtype_policy("float32")

    reference = transformers.AutoModelForSequenceClassification.from_pretrained(
        args.pretrained, num_labels=2, attention_probs_dropout_prob=args.attention_dropout)
    reference.train()
    optimizer = torch.optim.AdamW(reference.parameters(), 2e-5, weight_decay=0.01)
    t_ids, t_mask, t_labels = (torch.tensor(a, dtype=torch.long) for a in (ids, mask, labels))

    def reference_step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = reference(input_ids=t_ids, attention_mask=t_mask, labels=t_labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()

    theirs = f"transformers {transformers.__version__} (torch {torch.__version__}{', bf16 autocast' if bf16 else ''})"
    steps[theirs] = reference_step

    for step in steps.values():  # compile / warm up
        step()
        step()
    times = timing.timed_rounds(steps, args.rounds, repeats=args.steps, warmup=False)

    reference_seconds = np.median(times[theirs])
    print(f"\nbatch {b} x {n} word pieces, {os.cpu_count()} cores, median of {args.rounds} rounds of {args.steps} steps")
    print(f"{'implementation':58s} {'s/step':>8s} {'reviews/s':>10s} {'ours/theirs':>12s}")
    for name, values in times.items():
        seconds = np.median(values)
        print(f"{name:58s} {seconds:8.2f} {b / seconds:10.2f} {seconds / reference_seconds:11.2f}x")
    return times


if __name__ == "__main__":
    main()
