"""Screenshots of the attention explorer's three views for the README: `python -m tests.insight.explorer_screenshots`.

Trains two small models on toy tasks that need no download (about two minutes on 2 CPU cores), records their
attention at every epoch with `AttentionMapCallback(html=True)`, opens the pages in headless Chromium (see
`browser.py`) and writes `docs/explorer_head_view.png`, `docs/explorer_model_view.png`,
`docs/explorer_image_view.png`; the pages stay in `--work-dir` (`runs/explorer_screenshots/`).

* reverse digits: a `Seq2SeqTransformer` (preset "tiny") learns to reverse digit strings; its cross-attention
  becomes an anti-diagonal.
* two squares: a small ViT must tell whether the red square is left of the blue one (both placed at random on
  grey noise, so the mean colour says nothing); its [CLS] token learns to look at the squares.
"""

import argparse
import os
import pathlib

import keras
import numpy as np

from keras_tfm.callbacks import AttentionMapCallback
from keras_tfm.data import digits
from keras_tfm.insight.attention_probe import attention_maps
from keras_tfm.models import ViT, ViTBackbone
from tests.helpers import reverse_digits, small_reverser
from tests.insight.browser import Browser, why_no_browser

RED, BLUE, SIDE = (220, 40, 40), (50, 90, 230), 6


def two_squares(samples, seed):
    """32x32 grey noise with a red and a blue 6x6 square that do not overlap; label 1 if the red one is further
    left, else 0. Also returns the `(samples, 32, 32)` mask of the squares' pixels."""
    rng = np.random.default_rng(seed)
    images = rng.integers(90, 170, (samples, 32, 32, 1)).repeat(3, axis=-1).astype("uint8")
    labels = np.zeros(samples, "int64")
    for image, i in zip(images, range(samples)):
        while True:
            (r1, c1), (r2, c2) = rng.integers(0, 32 - SIDE + 1, (2, 2))
            if c1 != c2 and (abs(c1 - c2) >= SIDE or abs(r1 - r2) >= SIDE):
                break
        image[r1:r1 + SIDE, c1:c1 + SIDE] = RED
        image[r2:r2 + SIDE, c2:c2 + SIDE] = BLUE
        labels[i] = int(c1 < c2)
    return images, labels, images.std(-1) > 30


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


def two_squares_page(folder):
    """The page, and the (layer index, head) whose [CLS] token puts the most weight on the squares' patches."""
    keras.utils.set_random_seed(0)
    images, labels, _ = two_squares(8000, seed=0)
    test_images, _, squares = two_squares(1, seed=1)
    model = ViT(ViTBackbone(image_size=32, patch_size=4, dim=64, depth=3, num_heads=4, mlp_dim=128, dropout=0.0),
                num_classes=2, dropout=0.0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    callback = AttentionMapCallback(test_images, os.path.join(folder, "two_squares"), kind="image", html=True)
    model.fit(images, labels, batch_size=64, epochs=6, verbose=2, callbacks=[callback])
    patches = squares[0].reshape(8, 4, 8, 4).any(axis=(1, 3)).reshape(-1)  # (64,) patches the squares touch
    on_squares = [m[0, :, 0, 1:][:, patches].sum(-1) for m in attention_maps(model, test_images).values()]
    layer, head = np.unravel_index(np.argmax(on_squares), np.shape(on_squares))
    print(f"[CLS] weight on the squares: layer {layer}, head {head}: {np.max(on_squares):.2f} "
          f"({patches.mean():.0%} of the patches)")
    return callback.html_path, int(layer), int(head)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="docs")
    parser.add_argument("--work-dir", default="runs/explorer_screenshots", help="where the trained pages go")
    args = parser.parse_args(argv)
    reason = why_no_browser()
    if reason:
        parser.error(reason)
    text_page = reverse_digits_page(args.work_dir)
    image_page, layer, head = two_squares_page(args.work_dir)
    os.makedirs(args.output_dir, exist_ok=True)
    with Browser() as browser:
        page = browser.open(pathlib.Path(text_page).read_text(encoding="utf-8"), os.path.join(args.work_dir, "text.html"),
                            width=1000, height=560)
        last_cross = page.eval_on_selector_all("#head-layer option", "o => o.map(x => x.textContent)").index(
            "decoder_block_1/cross_attention")
        page.select_option("#head-layer", str(last_cross))
        page.screenshot(path=os.path.join(args.output_dir, "explorer_head_view.png"))
        page.click("#tab-model")
        page.set_viewport_size({"width": 1150, "height": 700})
        page.click(f"canvas.thumb[data-layer='{last_cross}'][data-head='0']")
        page.screenshot(path=os.path.join(args.output_dir, "explorer_model_view.png"))
        page = browser.open(pathlib.Path(image_page).read_text(encoding="utf-8"), os.path.join(args.work_dir, "image.html"),
                            width=1000, height=560)
        page.select_option("#image-layer", str(layer))
        page.select_option("#image-head", str(head))
        page.wait_for_function("document.getElementById('image-overlay').dataset.weights !== undefined")
        page.screenshot(path=os.path.join(args.output_dir, "explorer_image_view.png"))
        errors = page.errors
    print("wrote", ", ".join(os.path.join(args.output_dir, f"explorer_{v}_view.png") for v in ("head", "model", "image")))
    if errors:
        raise SystemExit(f"console errors: {errors}")


if __name__ == "__main__":
    main()
