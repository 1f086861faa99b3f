"""Screenshots of the attention explorer's three views for the README: `python -m tests.visualization.explorer_screenshots`.

Trains two small models on toy tasks that need no download (about two minutes on 2 CPU cores), records their
attention at every epoch with `AttentionMapCallback(html=True)`, opens the pages in headless Chromium (see
`browser.py`) and writes `docs/explorer_head_view.png`, `docs/explorer_model_view.png`,
`docs/explorer_image_view.png`; the pages stay in `--work-dir` (`runs/explorer_screenshots/`).

* reverse digits: a `Seq2SeqTransformer` (preset "tiny") learns to reverse digit strings; its cross-attention
  becomes an anti-diagonal.
* coloured square: a small ViT must name the colour of an 8x8 square placed at random on grey noise; its [CLS]
  token learns to look at the square.
"""

import argparse
import os

import keras
import numpy as np

from keras_tfm.callbacks import AttentionMapCallback
from keras_tfm.data import digits
from keras_tfm.models import ViT
from tests.helpers import reverse_digits, small_reverser
from tests.visualization.browser import Browser, why_no_browser

COLOURS = np.array([[220, 40, 40], [40, 170, 60], [50, 90, 230]], "uint8")  # red, green, blue


def coloured_squares(samples, seed):
    """32x32 grey noise with one 8x8 square of a random colour at a random place; the label is the colour."""
    rng = np.random.default_rng(seed)
    images = rng.integers(90, 170, (samples, 32, 32, 1)).repeat(3, axis=-1).astype("uint8")
    labels = rng.integers(0, 3, samples)
    for image, label, (row, column) in zip(images, labels, rng.integers(0, 25, (samples, 2))):
        image[row:row + 8, column:column + 8] = COLOURS[label]
    return images, labels


def reverse_digits_page(folder):
    keras.utils.set_random_seed(0)
    source, target = reverse_digits(12000, seed=0)
    test_source, test_target = reverse_digits(1, seed=7)
    model = small_reverser()
    steps = 4 * (len(source) // 64)
    schedule = keras.optimizers.schedules.CosineDecay(0.0, steps, warmup_target=3e-3, warmup_steps=200)
    model.compile_for_training(optimizer=keras.optimizers.Adam(schedule, clipnorm=1.0))
    callback = AttentionMapCallback((test_source, test_target[:, :-1]), os.path.join(folder, "reverse_digits"),
                                    tokens=digits.VOCABULARY, html=True)
    model.fit((source, target[:, :-1]), target[:, 1:], batch_size=64, epochs=4, verbose=2, callbacks=[callback])
    return callback.html_path


def coloured_square_page(folder):
    keras.utils.set_random_seed(0)
    images, labels = coloured_squares(6000, seed=0)
    test_images, _ = coloured_squares(1, seed=11)
    model = ViT(image_size=32, patch_size=4, num_classes=3, dim=64, depth=3, num_heads=4, mlp_dim=128, dropout=0.0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    callback = AttentionMapCallback(test_images, os.path.join(folder, "coloured_square"), kind="image", html=True)
    model.fit(images, labels, batch_size=64, epochs=5, verbose=2, callbacks=[callback])
    return callback.html_path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="docs")
    parser.add_argument("--work-dir", default="runs/explorer_screenshots", help="where the trained pages go")
    args = parser.parse_args(argv)
    reason = why_no_browser()
    if reason:
        parser.error(reason)
    text_page, image_page = reverse_digits_page(args.work_dir), coloured_square_page(args.work_dir)
    os.makedirs(args.output_dir, exist_ok=True)
    with Browser() as browser:
        page = browser.open(open(text_page, encoding="utf-8").read(), os.path.join(args.work_dir, "text.html"),
                            width=1000, height=560)
        last_cross = page.eval_on_selector_all("#head-layer option", "o => o.map(x => x.textContent)").index(
            "decoder_block_1/cross_attention")
        page.select_option("#head-layer", str(last_cross))
        page.hover("text.query-token[data-index='3']")
        page.screenshot(path=os.path.join(args.output_dir, "explorer_head_view.png"))
        page.mouse.move(0, 0)
        page.click("#tab-model")
        page.click(f"canvas.thumb[data-layer='{last_cross}'][data-head='0']")
        page.screenshot(path=os.path.join(args.output_dir, "explorer_model_view.png"), full_page=True)
        page = browser.open(open(image_page, encoding="utf-8").read(), os.path.join(args.work_dir, "image.html"),
                            width=1000, height=560)
        page.wait_for_function("document.getElementById('image-overlay').dataset.weights !== undefined")
        page.screenshot(path=os.path.join(args.output_dir, "explorer_image_view.png"))
        errors = page.errors
    print("wrote", ", ".join(os.path.join(args.output_dir, f"explorer_{v}_view.png") for v in ("head", "model", "image")))
    if errors:
        raise SystemExit(f"console errors: {errors}")


if __name__ == "__main__":
    main()
