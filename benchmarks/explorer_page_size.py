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
"""

import argparse
import os
import tempfile

import numpy as np

from keras_tfm.callbacks import AttentionMapCallback
from keras_tfm.data import digits
from keras_tfm.insight.explorer import AttentionHistory
from keras_tfm.models import Seq2SeqTransformer, ViT


def main():
    argparse.ArgumentParser(description=__doc__.strip().splitlines()[0]).parse_args()  # --help
    folder = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    history = AttentionHistory()
    for epoch in range(1, 11):
        history.add({f"block_{j}": rng.dirichlet(np.ones(65), size=(1, 8, 65)) for j in range(6)}, epoch=epoch)
    rows = [("6 layers x 8 heads x 65 tokens, 10 epochs", history.nbytes, len(history.html().encode()))]

    x_test, y_test = digits.make_dataset(1000, 10, "reverse", seed=1)  # the recipe's held-out set (--seed 0)
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=digits.VOCAB_SIZE,
                                           target_vocab_size=digits.VOCAB_SIZE, max_length=12, dropout=0.0)
    callback = AttentionMapCallback((x_test[:1], y_test[:1, :-1]), os.path.join(folder, "digits"),
                                    tokens=digits.VOCABULARY, html=True)
    callback.set_model(model)
    for epoch in range(1, 7):
        callback.draw(epoch)
    rows.append(("reverse_digits defaults, 6 epochs", callback._history.nbytes, os.path.getsize(callback.html_path)))

    vit = ViT.from_preset("small", num_classes=10)
    images = rng.integers(0, 256, (4, 32, 32, 3)).astype("uint8")
    callback = AttentionMapCallback(images, os.path.join(folder, "vit"), kind="image", html=True)
    callback.set_model(vit)
    for epoch in range(10, 101, 10):
        callback.draw(epoch)
    rows.append(("cifar10_vit defaults, 10 drawn epochs", callback._history.nbytes, os.path.getsize(callback.html_path)))

    print(f"{'page':45s} {'weights (bytes)':>16s} {'page (bytes)':>14s}")
    for name, weights, page in rows:
        print(f"{name:45s} {weights:16,d} {page:14,d}")


if __name__ == "__main__":
    main()
