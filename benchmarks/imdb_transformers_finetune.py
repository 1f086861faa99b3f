"""The reference for `recipes.imdb_classifier --pretrained`: the same checkpoint fine-tuned on the same IMDB reviews
by HuggingFace `transformers` + PyTorch, with the same tokens, head, steps and optimizer settings.

The reviews, the split and the word pieces are exactly the recipe's (`keras_tfm.data.imdb`, `stratified_split`,
`PretrainedTokenizer`, whose ids equal transformers' tokenizer's); the model is transformers'
`AutoModelForSequenceClassification` (for BERT: pooler -> dropout -> linear, as `TextClassifier.from_pretrained`);
the optimizer is PyTorch's AdamW with weight decay 0.01 except biases and layer norms, clipping at norm 1, and
`get_linear_schedule_with_warmup` over the same number of steps. Writes the accuracies and times as JSON.

    python benchmarks/imdb_transformers_finetune.py --imdb-dir aclImdb --pretrained all-MiniLM-L6-v2 \\
        --train-samples 3334 --test-samples 5000 --output transformers_finetune.json

Needs `pip install transformers torch`. `--bf16` runs the steps under `torch.autocast(bfloat16)` (fast on CPUs
with AMX-BF16 units and on GPUs; on CPUs without bf16 units it is emulated and far slower than float32).
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared --quick flag
import timing  # noqa: E402

import numpy as np  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imdb-dir", required=True)
    parser.add_argument("--pretrained", required=True)
    parser.add_argument("--train-samples", type=int, default=None)
    parser.add_argument("--test-samples", type=int, default=None)
    parser.add_argument("--validation-fraction", type=float, default=0.1)
    parser.add_argument("--sequence-length", type=int, default=256)
    parser.add_argument("--truncation", choices=("head", "head_tail"), default="head_tail")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--warmup-fraction", type=float, default=0.1)
    parser.add_argument("--attention-dropout", type=float, default=0.0)
    parser.add_argument("--parts-per-epoch", type=int, default=4, help="the recipe's parts: the same step count")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--bf16", action="store_true", help="torch.autocast(bfloat16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="transformers_finetune.json")
    args = timing.parse_args(parser, argv, quick=dict(train_samples=24, test_samples=8, sequence_length=32,
                                                      batch_size=8, parts_per_epoch=1))

    import torch
    import transformers

    from keras_tfm.data import imdb, stratified_split
    from keras_tfm.text import PretrainedTokenizer

    import keras

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    keras.utils.set_random_seed(args.seed)  # as the recipe does before it reads: the reviews' order depends on it
    started = time.time()
    train_text, test_text = imdb.load_imdb(args.imdb_dir, seed=args.seed)
    reviews, labels = imdb.texts_and_labels(train_text.take(args.train_samples or -1))
    test_reviews, y_test = imdb.texts_and_labels(test_text.take(args.test_samples or -1))
    training, held_out = stratified_split(labels, args.validation_fraction, seed=args.seed)
    tokenizer = PretrainedTokenizer(args.pretrained, max_length=args.sequence_length, truncation=args.truncation)
    x_all = tokenizer([imdb.without_line_breaks(t) for t in reviews])  # as the recipe gives them to the tokenizer
    x_test = tokenizer([imdb.without_line_breaks(t) for t in test_reviews])

    def tensors(x, rows=None):
        rows = slice(None) if rows is None else rows
        return (torch.tensor(x["token_ids"][rows], dtype=torch.long),
                torch.tensor(x["padding_mask"][rows], dtype=torch.long),
                torch.tensor(x["segment_ids"][rows], dtype=torch.long))

    train_ids, train_mask, train_segments = tensors(x_all, training)
    y_train = torch.tensor(labels[training], dtype=torch.long)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        args.pretrained, num_labels=2, attention_probs_dropout_prob=args.attention_dropout)
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=args.learning_rate)
    steps_per_epoch = math.ceil(len(y_train) / args.batch_size)
    total = args.epochs * args.parts_per_epoch * math.ceil(steps_per_epoch / args.parts_per_epoch)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, int(args.warmup_fraction * total), total)
    generator = torch.Generator().manual_seed(args.seed)

    model.train()
    step, step_times, losses = 0, [], []
    training_started = time.time()
    while step < total:
        order = torch.randperm(len(y_train), generator=generator)
        for start in range(0, len(order), args.batch_size):
            if step == total:
                break
            rows = order[start:start + args.batch_size]
            tick = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                out = model(input_ids=train_ids[rows], attention_mask=train_mask[rows],
                            token_type_ids=train_segments[rows], labels=y_train[rows])
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step_times.append(time.perf_counter() - tick)
            losses.append(float(out.loss.detach()))
            step += 1
            if step % 20 == 0:
                print(f"step {step}/{total}  loss {np.mean(losses[-20:]):.4f}  {np.median(step_times[-20:]):.2f} s/step",
                      flush=True)
    training_seconds = time.time() - training_started

    model.eval()

    def accuracy(ids, mask, segments, y):
        correct = 0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            for start in range(0, len(y), 64):
                part = slice(start, start + 64)
                logits = model(input_ids=ids[part], attention_mask=mask[part], token_type_ids=segments[part]).logits
                correct += int((logits.argmax(-1).numpy() == y[part]).sum())
        return correct / len(y)

    validation = accuracy(*tensors(x_all, held_out), labels[held_out])
    scoring = time.time()
    test = accuracy(*tensors(x_test), y_test)
    report = {
        "implementation": f"transformers {transformers.__version__} + torch {torch.__version__}",
        "validation_accuracy": validation, "test_accuracy": test,
        "training_reviews": int(len(y_train)), "validation_reviews": int(len(held_out)),
        "test_reviews": int(len(y_test)), "steps": step, "median_step_seconds": float(np.median(step_times)),
        "training_seconds": round(training_seconds, 1), "test_scoring_seconds": round(time.time() - scoring, 1),
        "wall_time_seconds": round(time.time() - started, 1), "flags": vars(args),
    }
    with open(args.output, "w") as file:
        json.dump(report, file, indent=2)
    print(json.dumps({k: v for k, v in report.items() if k != "flags"}, indent=2))
    return report


if __name__ == "__main__":
    main()
