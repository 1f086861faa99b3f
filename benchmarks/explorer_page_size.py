"""Size of the attention explorer's page (`attention.html`) for the shapes the README quotes.

The size depends only on the shapes (8 bits per weight, base64) and the image, not on training, so the recipes'
pages are measured by letting `AttentionMapCallback(html=True)` draw untrained models of the recipes' defaults as
many times as a default run would:

* 6 layers x 8 heads x 65 tokens over 10 epochs (random attention maps);
* `reverse_digits`: preset "tiny" (2 + 2 blocks, 4 heads), `--max-digits 10`, the held-out string the recipe
  draws, 6 epochs drawn;
* `cifar10_vit`: preset "small" (6 blocks, 4 heads, 64 patches + [CLS]), 100 epochs drawn every 10; a noise image
  stands in for the CIFAR-10 test image (its PNG is at least as large as a photo's).

    python benchmarks/explorer_page_size.py
    python benchmarks/explorer_page_size.py --quick   # 2 epochs of each, the ViT preset "tiny": a check that it runs
"""

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: --quick
import timing  # noqa: E402

from keras_tfm.callbacks import AttentionMapCallback  # noqa: E402
from keras_tfm.data import digits  # noqa: E402
from keras_tfm.insight.explorer import AttentionHistory  # noqa: E402
from keras_tfm.models import Seq2SeqTransformer, ViT  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10, help="epochs of the random maps (6 layers x 8 heads)")
    parser.add_argument("--digits-epochs", type=int, default=6, help="epochs reverse_digits draws")
    parser.add_argument("--vit-preset", default="small", help="the ViT preset (cifar10_vit's default: small)")
    parser.add_argument("--vit-draws", type=int, default=10, help="epochs cifar10_vit draws (every 10th of 100)")
    args = timing.parse_args(parser, argv, {"epochs": 2, "digits_epochs": 2, "vit_preset": "tiny", "vit_draws": 2})
    folder = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    history = AttentionHistory()
    for epoch in range(1, args.epochs + 1):
        history.add({f"block_{j}": rng.dirichlet(np.ones(65), size=(1, 8, 65)) for j in range(6)}, epoch=epoch)
    rows = [(f"6 layers x 8 heads x 65 tokens, {args.epochs} epochs", history.nbytes, len(history.html().encode()))]

    x_test, y_test = digits.make_dataset(1000, 10, "reverse", seed=1)  # the recipe's held-out set (--seed 0)
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=digits.VOCAB_SIZE,
                                           target_vocab_size=digits.VOCAB_SIZE, max_length=12, dropout=0.0)
    callback = AttentionMapCallback((x_test[:1], y_test[:1, :-1]), os.path.join(folder, "digits"),
                                    tokens=digits.VOCABULARY, html=True)
    callback.set_model(model)
    for epoch in range(1, args.digits_epochs + 1):
        callback.draw(epoch)
    rows.append((f"reverse_digits defaults, {args.digits_epochs} epochs", callback.attention_history.nbytes,
                 os.path.getsize(callback.html_path)))

    vit = ViT.from_preset(args.vit_preset, num_classes=10)
    images = rng.integers(0, 256, (4, 32, 32, 3)).astype("uint8")
    callback = AttentionMapCallback(images, os.path.join(folder, "vit"), kind="image", html=True)
    callback.set_model(vit)
    for epoch in range(10, 10 * args.vit_draws + 1, 10):
        callback.draw(epoch)
    rows.append((f"cifar10_vit {args.vit_preset}, {args.vit_draws} drawn epochs", callback.attention_history.nbytes,
                 os.path.getsize(callback.html_path)))

    print(f"{'page':45s} {'weights (bytes)':>16s} {'page (bytes)':>14s}")
    for name, weights, page in rows:
        print(f"{name:45s} {weights:16,d} {page:14,d}")


if __name__ == "__main__":
    main()
