"""How close a checkpoint loaded by keras_tfm is to the same checkpoint in HuggingFace `transformers`: the largest
difference of the hidden states, the pooler output and every layer's attention weights at real tokens of padded
batches, the tokenizer's ids, and the loading time.

    python benchmarks/pretrained_parity.py --pretrained all-MiniLM-L6-v2 --imdb-dir aclImdb

Texts: sentences of its own, plus `--reviews N` IMDB reviews (cut at `--length` word pieces) with `--imdb-dir`.
Needs `pip install transformers torch`.
"""

import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared --quick flag
import timing  # noqa: E402

import numpy as np  # noqa: E402

SENTENCES = ["A wonderful, moving film.", "Dull and far too long; I left after an hour and never looked back.", "ok",
             "The actors were great but the plot made no sense at all.", "Café naïve — résumé!", "I loved it!!!"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrained", required=True)
    parser.add_argument("--imdb-dir", default=None)
    parser.add_argument("--reviews", type=int, default=64)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    args = timing.parse_args(parser, argv, quick=dict(reviews=4, length=32, batch_size=4))

    import keras
    import torch
    import transformers

    import keras_tfm
    from keras_tfm.models import TextEncoder
    from keras_tfm.text import PretrainedTokenizer

    texts = list(SENTENCES)
    if args.imdb_dir:
        paths = sorted(glob.glob(os.path.join(args.imdb_dir, "test", "*", "*.txt")))[:: 25000 // args.reviews]
        from keras_tfm.data.imdb import without_line_breaks

        for path in paths[: args.reviews]:
            with open(path, encoding="utf-8") as file:
                texts.append(without_line_breaks(file.read()))
    started = time.time()
    encoder = TextEncoder.from_pretrained(args.pretrained)
    load_seconds = time.time() - started
    reference = transformers.AutoModel.from_pretrained(args.pretrained, attn_implementation="eager").eval()
    reference_tokenizer = transformers.AutoTokenizer.from_pretrained(args.pretrained)
    tokenizer = PretrainedTokenizer(args.pretrained, max_length=args.length)

    ours_ids = tokenizer(texts)
    theirs_ids = reference_tokenizer(texts, truncation=True, max_length=args.length, padding="max_length",
                                     return_tensors="np")
    same_ids = bool(np.array_equal(ours_ids["token_ids"], theirs_ids["input_ids"]))

    worst = {"hidden_states": 0.0, "pooled_output": 0.0, "attention_weights": 0.0}
    for start in range(0, len(texts), args.batch_size):
        batch = {name: values[start:start + args.batch_size] for name, values in ours_ids.items()}
        longest = int(batch["padding_mask"].sum(1).max())  # padded to the batch's longest text
        batch = {name: values[:, :longest] for name, values in batch.items()}
        real = batch["padding_mask"].astype(bool)
        with torch.no_grad():
            out = reference(input_ids=torch.tensor(batch["token_ids"], dtype=torch.long),
                            attention_mask=torch.tensor(batch["padding_mask"], dtype=torch.long),
                            token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long), output_attentions=True)
        ours = encoder(batch)
        states = keras.ops.convert_to_numpy(ours["sequence_output"] if isinstance(ours, dict) else ours)
        worst["hidden_states"] = max(worst["hidden_states"], float(np.abs(states - out.last_hidden_state.numpy())[real].max()))
        if isinstance(ours, dict):
            pooled = keras.ops.convert_to_numpy(ours["pooled_output"])
            worst["pooled_output"] = max(worst["pooled_output"], float(np.abs(pooled - out.pooler_output.numpy()).max()))
        maps = keras_tfm.attention_maps(encoder, batch)
        for weights, theirs in zip(maps.values(), out.attentions):  # (batch, heads, queries, keys)
            difference = np.abs(weights - theirs.numpy()).transpose(0, 2, 1, 3)[real]
            worst["attention_weights"] = max(worst["attention_weights"], float(difference.max()))
    report = {"texts": len(texts), "word_pieces": args.length, "tokenizer_ids_identical": same_ids,
              "load_seconds": round(load_seconds, 2), "weights": int(encoder.count_params()),
              "max_abs_difference_at_real_tokens": worst}
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
