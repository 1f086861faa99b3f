"""The attention explorer: the page's data (Python) and what a real browser shows (headless Chromium)."""

import base64
import io
import json
import os
import pathlib
import re
import sys
import types

import keras
import numpy as np
import PIL.Image
import pytest

from keras_tfm.callbacks import AttentionMapCallback
from keras_tfm.data import digits
from keras_tfm.insight import visualize
from keras_tfm.insight.attention_probe import AttentionMap, AttentionMaps, attention_maps
from keras_tfm.layers.walk import iter_layers
from keras_tfm.insight.explorer import AttentionHistory, attention_html, data_path, save_attention_html, show_attention
from keras_tfm.insight.explorer._page import SCRIPT_FILES, read_part
from keras_tfm.models import TextClassifier, ViT, ViTBackbone
from tests.helpers import padded_ids, reverse_digits, small_reverser
from tests.insight.browser import Browser, png_pixels, why_no_browser

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the page's HTML and browser tests; the maps it shows are tested on every backend"))

QUANTISATION = 1 / 510 + 1e-6  # 8 bits: round(w * 255) / 255 is within half a level of w
SHOWN = 1e-2  # what the issue allows between a shown weight and the model's


def page_data(page):
    """The JSON the page's script reads."""
    found = re.search(r'<script id="explorer-data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


def stored_weights(data, epoch, layer):
    """Dequantised `(heads, q, k)` weights of one layer and epoch, as the page's script decodes them."""
    info = data["layers"][layer]
    raw = np.frombuffer(base64.b64decode(data["maps"][epoch][layer]), dtype="uint8")
    return raw.reshape(info["heads"], len(info["queries"]), len(info["keys"])) / data["levels"]


# ---- tiny real models --------------------------------------------------------------------------------------------


def sharpen(model, factor=4.0, seed=0):
    """New query and key projections, drawn by numpy (the same on every backend) at `factor` times Glorot's
    scale: a fresh model's near-uniform attention becomes peaked and differs between heads and rows, so that a
    view showing the wrong row or head would be caught."""
    rng = np.random.default_rng(seed)
    for layer in iter_layers(model):
        if layer.name in ("query", "key"):
            shape = tuple(layer.kernel.shape)
            scale = factor * np.sqrt(2.0 / (shape[0] + np.prod(shape[1:])))
            layer.kernel.assign(rng.normal(0.0, scale, shape).astype("float32"))
    return model


@pytest.fixture(scope="module")
def text_case():
    """A TextClassifier ([CLS] + 5 words + 3 padding) and its maps; tokens include markup that must stay text."""
    keras.utils.set_random_seed(5)
    model = sharpen(TextClassifier.from_preset("tiny", vocab_size=12, max_length=8, dim=18, depth=2, num_heads=3,
                                               mlp_dim=32, dropout=0.0))
    ids = padded_ids([5], 8, 12, seed=1)
    words = ["the", "</script><b>film</b>", "was", "not", "bad"]
    return attention_maps(model, ids), ["[CLS]"] + words


@pytest.fixture(scope="module")
def seq2seq_case():
    keras.utils.set_random_seed(6)
    source, target = reverse_digits(2, seed=3)
    model = sharpen(small_reverser())
    maps = attention_maps(model, (source, target[:, :-1]))
    tokens = ([digits.VOCABULARY[t] for t in source[0] if t], [digits.VOCABULARY[t] for t in target[0, :-1] if t])
    return maps, tokens


@pytest.fixture(scope="module")
def vit_case():
    keras.utils.set_random_seed(7)
    model = sharpen(ViT(ViTBackbone(image_size=8, patch_size=2, dim=16, depth=2, num_heads=2, mlp_dim=32, dropout=0.0),
                        num_classes=3, dropout=0.0))
    image = np.random.default_rng(0).integers(0, 256, (8, 8, 3)).astype("uint8")
    return attention_maps(model, image[None]), image


@pytest.fixture(scope="module")
def browser():
    reason = why_no_browser()
    if reason and os.environ.get("KERAS_TFM_REQUIRE_BROWSER"):  # CI (.ci/run) installs the browser: must run
        pytest.fail(reason)
    if reason:
        pytest.skip(reason)
    with Browser() as running:
        yield running


# ---- the page's data (no browser) ---------------------------------------------------------------------------------


def test_page_is_one_offline_file_with_weights_within_half_a_level(text_case):
    maps, tokens = text_case
    page = attention_html(maps, tokens=tokens, title="review")
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    assert set(re.findall(r"https?://[^\"' ]+", page)) == {"http://www.w3.org/2000/svg"}  # SVG's namespace name only
    assert "</script><b>film" not in page  # a token cannot end the data block
    data = page_data(page)
    assert [layer["name"] for layer in data["layers"]] == list(maps)
    for j, m in enumerate(maps.values()):
        assert data["layers"][j]["queries"] == tokens and data["layers"][j]["keys"] == tokens
        stored = stored_weights(data, 0, j)
        assert stored.shape == (3, 6, 6)  # the padding rows and columns are left out
        assert np.abs(stored - m[0, :, :6, :6]).max() <= QUANTISATION


def test_seq2seq_layers_get_source_and_target_labels(seq2seq_case):
    maps, (source, target) = seq2seq_case
    data = page_data(attention_html(maps, tokens=(source, target)))
    for layer in data["layers"]:
        name = layer["name"]
        expected = ((target, source) if name.endswith("cross_attention") else
                    (target, target) if name.endswith("self_attention") else (source, source))
        assert (layer["queries"], layer["keys"]) == expected, name


def test_history_keeps_every_epoch_and_the_size_stays_small():
    rng = np.random.default_rng(0)
    history = AttentionHistory(title="6 layers, 8 heads, 65 tokens")
    snapshots = []
    for epoch in range(1, 11):
        maps = {f"block_{j}": rng.dirichlet(np.ones(65), size=(1, 8, 65)).astype("float32") for j in range(6)}
        snapshots.append(maps)
        history.add(maps, epoch=epoch)
    page = history.html()
    assert history.nbytes == 6 * 8 * 65 * 65 * 10  # one byte per weight and epoch
    assert len(page.encode()) < 5_000_000
    data = page_data(page)
    assert data["epochs"] == [str(e) for e in range(1, 11)]
    assert np.abs(stored_weights(data, 3, 5) - snapshots[3]["block_5"][0]).max() <= QUANTISATION


def test_the_page_opens_on_the_most_telling_layer(text_case, seq2seq_case, vit_case):
    """A seq2seq model's last cross-attention (the alignment), a classifier's last block (what its head reads),
    a ViT's last block for the [CLS] token (not the first encoder block, which shows little)."""
    data = page_data(attention_html(seq2seq_case[0], tokens=seq2seq_case[1]))
    opened = data["layers"][data["start"]["headLayer"]]["name"]
    last_cross = [name for name in seq2seq_case[0] if name.endswith("cross_attention")][-1]
    assert opened == last_cross and opened.startswith("decoder_block_")
    data = page_data(attention_html(text_case[0], tokens=text_case[1]))
    assert data["start"]["headLayer"] == len(data["layers"]) - 1
    data = page_data(attention_html(vit_case[0], image=vit_case[1]))
    assert data["start"]["imageLayer"] == str(len(data["layers"]) - 1) and data["views"][0] == "image"


def test_bad_input_is_named():
    good = {"block_0": np.full((1, 2, 3, 3), 1 / 3, "float32")}
    with pytest.raises(TypeError, match="`maps` must be"):
        attention_html(5)
    with pytest.raises(ValueError, match="`tokens` has 4 query labels"):
        attention_html(good, tokens=["a", "b", "c", "d"])
    with pytest.raises(ValueError, match="`tokens` has 2 key labels for layer 'block_0', which has 3 key positions"):
        attention_html(good, tokens=["a", "b"])  # the third key is attended to: a token without a label
    padded = {"block_0": np.array([[[0.5, 0.5, 0.0]] * 3] * 2, "float32")[None]}  # key 2 masked: padding
    assert '"keys":["a","b"]' in attention_html(padded, tokens=["a", "b"]).replace(" ", "")
    with pytest.raises(ValueError, match="`sample` \\(3\\) is out of range"):
        attention_html(good, sample=3)
    with pytest.raises(ValueError, match="shape \\(2, 3\\)"):
        attention_html({"x": np.ones((2, 3))})
    with pytest.raises(ValueError, match="patch grid"):
        attention_html(good, image=np.zeros((4, 4, 3)))  # 3 tokens are no grid of a square image
    with pytest.raises(ValueError, match="`epochs`"):
        attention_html(good, epochs=[1, 2])
    history = AttentionHistory().add(good)
    with pytest.raises(ValueError, match="layers and heads of the first"):
        history.add({"block_0": np.full((1, 3, 3, 3), 1 / 3)})


def test_a_title_is_text_never_a_placeholder():
    good = {"block_0": np.full((1, 2, 3, 3), 1 / 3, "float32")}
    page = attention_html(good, title="{{style}} $x $title ${data} <b>&")
    assert "<title>{{style}} $x $title ${data} &lt;b&gt;&amp;</title>" in page
    assert "<h1>{{style}} $x $title ${data} &lt;b&gt;&amp;</h1>" in page
    assert page.count("<style>") == 1 and page_data(page)["title"] == "{{style}} $x $title ${data} <b>&"


def test_the_page_inlines_every_part_of_the_package():
    page = attention_html({"block_0": np.full((1, 2, 3, 3), 1 / 3, "float32")})
    assert read_part("explorer.css") in page
    for name in SCRIPT_FILES:
        assert read_part(name) in page, name
    assert "$" not in read_part("page.html").replace("$title", "").replace("$style", "").replace(
        "$script", "").replace("$data", "")  # no other placeholder for string.Template to trip on


def test_labels_follow_the_records_kinds_not_the_layer_names():
    rng = np.random.default_rng(0)
    source, target = ["a", "b", "c"], ["x", "y"]
    records = [AttentionMap("first", "first", "encoder", rng.dirichlet(np.ones(3), (1, 2, 3)).astype("float32")),
               AttentionMap("second", "second", "self", rng.dirichlet(np.ones(2), (1, 2, 2)).astype("float32")),
               AttentionMap("third", "second", "cross", rng.dirichlet(np.ones(3), (1, 2, 2)).astype("float32"))]
    for maps in (AttentionMaps(records), records):
        data = page_data(attention_html(maps, tokens=(source, target)))
        assert [(layer["kind"], layer["queries"], layer["keys"]) for layer in data["layers"]] == [
            ("encoder", source, source), ("self", target, target), ("cross", target, source)]
        assert data["start"]["headLayer"] == 2  # the last cross-attention, found by its kind
    plain = {record.name: record.weights for record in records}
    with pytest.raises(ValueError, match="pass what `keras_tfm.attention_maps` returns"):
        attention_html(plain, tokens=(source, target))


def test_cls_goes_in_front_only_of_labels_one_short_of_a_map_with_a_class_token():
    weights = np.full((1, 1, 4, 4), 1 / 4, "float32")
    with_cls = AttentionMaps([AttentionMap("block_0", "block_0", "encoder", weights, prefix_tokens=1)])
    layer = page_data(attention_html(with_cls, tokens=["a", "b", "c"]))["layers"][0]
    assert layer["queries"] == layer["keys"] == ["[CLS]", "a", "b", "c"]
    layer = page_data(attention_html(with_cls, tokens=["[CLS]", "a", "b", "c"]))["layers"][0]
    assert layer["queries"] == ["[CLS]", "a", "b", "c"]  # labels that count it already stay as they are
    layer = page_data(attention_html(with_cls, tokens=["p", "q", "r", "s"]))["layers"][0]
    assert layer["queries"] == ["p", "q", "r", "s"]  # one label per position: the user's own
    plain = {"block_0": weights}  # no record: nothing says a [CLS] was prepended
    assert page_data(attention_html(plain, tokens=["a", "b", "c", "d"]))["layers"][0]["keys"] == ["a", "b", "c", "d"]


def test_the_image_is_a_png_pillow_reads_back():
    maps = {"block_0": np.full((1, 1, 5, 5), 1 / 5, "float32")}  # [CLS] + 2 x 2 patches
    rng = np.random.default_rng(0)
    for image, expected in (
            (rng.integers(0, 256, (4, 4, 3)).astype("uint8"), None),
            (rng.integers(0, 256, (4, 4, 4)).astype("uint8"), None),
            (rng.random((4, 4, 1)), "gray"),
            (rng.random((4, 4)) * 255, "gray")):
        data = page_data(attention_html(maps, image=image))
        decoded = np.asarray(PIL.Image.open(io.BytesIO(base64.b64decode(data["image"]["png"]))))
        scale = 255 if image.max() <= 1 else 1  # floats in [0, 1] or in [0, 255]
        pixels = image if image.dtype == np.uint8 else np.clip(np.rint(image * scale), 0, 255)
        if expected == "gray":
            pixels = np.repeat(pixels.reshape(4, 4, 1), 3, axis=-1)
        assert decoded.shape == pixels.shape and np.array_equal(decoded, pixels.astype("uint8"))
        assert (data["image"]["prefix"], data["image"]["rows"], data["image"]["columns"]) == (1, 2, 2)
    with pytest.raises(ValueError, match="`image` must have shape"):
        attention_html(maps, image=np.zeros((4, 4, 2)))


def test_save_keeps_the_data_beside_the_page_for_resume(tmp_path):
    rng = np.random.default_rng(1)
    snapshot = lambda: {"block_0": rng.dirichlet(np.ones(3), (1, 2, 3)).astype("float32")}  # noqa: E731
    history = AttentionHistory(tokens=["a", "b", "c"]).add(snapshot(), epoch=1).add(snapshot(), epoch=2)
    page = tmp_path / "attention.html"
    assert history.save(page) == page and data_path(page) == str(tmp_path / "attention.json")
    assert json.loads(pathlib.Path(data_path(page)).read_text(encoding="utf-8")) == history.data()
    assert page_data(page.read_text(encoding="utf-8")) == history.data()
    page.write_text("not the page any more", encoding="utf-8")  # resume reads the data, never the HTML
    again = AttentionHistory(tokens=["a", "b", "c"]).add(snapshot(), epoch=3)
    assert again.resume(page) == 2 and again.epochs == [1, 2, 3]  # numbers again, for ordering
    assert again.labels == ["epoch 1", "epoch 2", "epoch 3"]
    assert again.data()["maps"][:2] == history.data()["maps"]
    other = AttentionHistory(tokens=["a", "b", "x"]).add(snapshot(), epoch=3)
    assert other.resume(page) == 0  # other labels: another sample, start afresh
    pathlib.Path(data_path(page)).write_text('{"layers": [', encoding="utf-8")  # cut off mid-write
    assert AttentionHistory(tokens=["a", "b", "c"]).add(snapshot(), epoch=3).resume(page) == 0
    assert AttentionHistory(tokens=["a", "b", "c"]).add(snapshot()).resume(tmp_path / "missing.html") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention.html", "attention.json"]  # no partial files


def test_relevance_frames_are_shares_of_the_patch_grid_kept_on_resume(tmp_path, vit_case):
    maps, image = vit_case  # [CLS] + 4 x 4 patches
    drops = np.arange(16, dtype="float64").reshape(4, 4) - 5.0  # patches 6..15 lowered the score
    history = AttentionHistory(image=image).add(maps, epoch=1, relevance=drops).add(maps, epoch=2)
    shares = np.maximum(drops, 0).ravel() / np.maximum(drops, 0).sum()
    np.testing.assert_allclose(history.data()["relevance"][0], shares, atol=5e-5)
    assert history.data()["relevance"][1] is None  # a frame without one
    assert history.data()["start"]["imageLayer"] != "relevance"  # a [CLS] model opens on its [CLS] row still
    assert AttentionHistory(image=image).add(maps).data()["relevance"] is None
    page = tmp_path / "attention.html"
    history.save(page)
    again = AttentionHistory(image=image).add(maps, epoch=3, relevance=drops)
    assert again.resume(page) == 2 and again.relevance[0] == history.relevance[0] and again.relevance[1] is None
    with pytest.raises(ValueError, match=r"`relevance` must have the patch grid's shape \(4, 4\).*\(16,\)"):
        AttentionHistory(image=image).add(maps, relevance=drops.ravel())
    with pytest.raises(ValueError, match="`relevance` needs the image view"):
        AttentionHistory().add(maps, relevance=drops)
    with pytest.raises(ValueError, match="non-finite"):
        AttentionHistory(image=image).add(maps, relevance=drops * np.nan)


def test_save_attention_html_writes_the_page(tmp_path, text_case):
    maps, tokens = text_case
    path = save_attention_html(tmp_path / "a.html", maps, tokens=tokens)
    assert page_data(pathlib.Path(path).read_text(encoding="utf-8"))["layers"][0]["queries"] == tokens


def test_show_attention_uses_ipython_only_when_there(monkeypatch, text_case):
    maps, tokens = text_case
    shown = []
    display = types.ModuleType("IPython.display")
    display.HTML = lambda text: ("HTML", text)
    display.display = shown.append
    ipython = types.ModuleType("IPython")
    ipython.display = display
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", display)
    show_attention(maps, tokens=tokens)
    [(kind, frame)] = shown
    assert kind == "HTML" and frame.startswith("<iframe srcdoc=\"&lt;!DOCTYPE html&gt;")
    assert "explorer-data" in frame and "<script" not in frame  # the whole page, escaped into the frame
    monkeypatch.setitem(sys.modules, "IPython", None)  # not installed
    monkeypatch.setitem(sys.modules, "IPython.display", None)
    with pytest.raises(ImportError, match="save_attention_html"):
        show_attention(maps, tokens=tokens)


def test_callback_keeps_one_page_with_every_drawn_epoch(tmp_path):
    keras.utils.set_random_seed(8)
    model = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32), num_classes=2)
    x = np.random.default_rng(1).integers(0, 256, (8, 8, 8, 3)).astype("uint8")
    callback = AttentionMapCallback(x[:2], output_dir=tmp_path, html=True)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, np.arange(8) % 2, epochs=2, batch_size=4, verbose=0, callbacks=[callback])
    assert callback.written.count(callback.html_path) == 1 and callback.html_path == str(tmp_path / "attention.html")
    data = page_data(pathlib.Path(callback.html_path).read_text(encoding="utf-8"))
    assert data["epochs"] == ["0", "1", "2"] and data["views"] == ["image", "model", "change"]
    assert data["labels"] == ["before training", "epoch 1", "epoch 2"]
    assert (data["image"]["rows"], data["image"]["columns"], data["image"]["prefix"]) == (2, 2, 1)


def test_a_resumed_run_keeps_the_earlier_epochs_of_the_page(tmp_path):
    keras.utils.set_random_seed(10)
    model = TextClassifier.from_preset("tiny", vocab_size=12, max_length=6, dim=16, depth=1, num_heads=2, mlp_dim=32)
    ids = padded_ids([4], 6, 12)

    def draw(epochs, on=model):
        callback = AttentionMapCallback(ids, output_dir=tmp_path, html=True)
        callback.set_model(on)
        for epoch in epochs:
            if epoch == 2:
                on.layers[-1].kernel.assign(on.layers[-1].kernel * 2)  # any change; the maps stay the same
            callback.draw(epoch)
        return page_data(pathlib.Path(callback.html_path).read_text(encoding="utf-8"))

    first = draw([1, 2])
    assert first["epochs"] == ["1", "2"]
    resumed = draw([3])  # killed after epoch 2, started again: epoch 3 is added to the same page
    assert resumed["epochs"] == ["1", "2", "3"] and resumed["maps"][:2] == first["maps"]
    assert draw([2])["epochs"] == ["1", "2"]  # resumed from epoch 1: epoch 2 is drawn anew, not twice
    assert draw([1])["epochs"] == ["1"]  # a new run in the same folder starts a new page
    other = TextClassifier.from_preset("tiny", vocab_size=12, max_length=6, dim=16, depth=2, num_heads=2, mlp_dim=32)
    assert draw([5], on=other)["epochs"] == ["5"]  # another model: nothing of the old page is kept


# ---- in a real browser ------------------------------------------------------------------------------------------


def shown_lines(page):
    """(head, query, key, weight) of every attention line drawn in the head view."""
    return page.eval_on_selector_all(
        "line.attention-line", "lines => lines.map(l => [+l.dataset.head, +l.dataset.query, +l.dataset.key, "
        "+l.dataset.weight])")


def test_head_view_shows_every_layer_head_and_token(browser, seq2seq_case, tmp_path):
    maps, tokens = seq2seq_case
    page = browser.open(attention_html(maps, tokens=tokens), tmp_path / "s2s.html")
    data = page_data(attention_html(maps, tokens=tokens))
    options = page.eval_on_selector_all("#head-layer option", "options => options.map(o => o.textContent)")
    assert options == list(maps)  # 2 encoder blocks, 2 decoder blocks x (self, cross)
    for j, (name, m) in enumerate(maps.items()):
        page.select_option("#head-layer", str(j))
        queries = page.eval_on_selector_all("text.query-token", "t => t.map(x => x.textContent)")
        keys = page.eval_on_selector_all("text.key-token", "t => t.map(x => x.textContent)")
        assert (queries, keys) == (data["layers"][j]["queries"], data["layers"][j]["keys"]), name
        assert 0 < len(queries) <= m.shape[2] and 0 < len(keys) <= m.shape[3]
        assert page.locator("#head-toggles .toggle").count() == m.shape[1]
        assert {line[0] for line in shown_lines(page)} == set(range(m.shape[1]))  # every head drawn
        # A decoder layer's rows are its inputs: the page says that row t predicts token t+1; an encoder's not.
        note = page.locator("#head-note")
        if name.startswith("decoder_block_"):
            assert note.is_visible() and "predicting token t+1" in note.text_content()
        else:
            assert not note.is_visible()
    page.click("#tab-model")
    for j, m in enumerate(maps.values()):
        assert page.locator(f"canvas.thumb[data-layer='{j}']").count() == m.shape[1]
    assert "Decoder layers" in page.locator("#model-note").text_content() and page.locator("#model-note").is_visible()
    assert page.errors == []


def test_hovering_a_token_shows_its_row_and_heads_switch_off(browser, text_case, tmp_path):
    maps, tokens = text_case
    page = browser.open(attention_html(maps, tokens=tokens), tmp_path / "text.html")
    page.select_option("#head-layer", "1")
    expected = maps["block_1"][0]  # (heads, q, k)
    assert np.abs(expected[:, :6, :6] - expected[:, 1:2, :6]).max() > 5 * SHOWN  # rows and heads differ
    assert np.abs(expected[0, :6, :6] - expected[1, :6, :6]).max() > 5 * SHOWN
    assert page.locator("text.query-token").all_text_contents()[2] == "</script><b>film</b>"  # shown as text
    for i in range(len(tokens)):
        page.hover(f"text.query-token[data-index='{i}']")
        lines = shown_lines(page)
        assert {line[1] for line in lines} == {i}
        assert len(lines) == 3 * len(tokens)  # every head, every key: the whole row
        for head, _, key, shown in lines:
            assert abs(shown - expected[head, i, key]) <= SHOWN
    page.hover("text.key-token[data-index='2']")  # a key shows its column
    lines = shown_lines(page)
    assert {line[2] for line in lines} == {2}
    assert all(abs(shown - expected[head, query, 2]) <= SHOWN for head, query, _, shown in lines)
    page.click("#head-toggles .toggle[data-head='1']")  # switch head 1 off
    assert {line[0] for line in shown_lines(page)} == {0, 2}
    page.dblclick("#head-toggles .toggle[data-head='2']")  # only head 2
    assert {line[0] for line in shown_lines(page)} == {2}
    assert page.errors == []


def test_epoch_slider_switches_to_that_epochs_weights(browser, tmp_path):
    keras.utils.set_random_seed(9)
    model = TextClassifier.from_preset("tiny", vocab_size=12, max_length=6, dim=16, depth=1, num_heads=2, mlp_dim=32,
                                       dropout=0.0)
    ids = padded_ids([6] * 32 + [4] * 32, 6, 12, seed=2)
    labels = (ids[:, 0] > 6).astype("int32")
    callback = AttentionMapCallback(ids[:1], output_dir=tmp_path, html=True, tokens=[f"w{i}" for i in range(12)],
                                    draw_before=False)  # frames = epochs here (the change view's test has frame 0)
    truth = []  # the maps of sample 0 after each epoch, read independently of the callback
    recorder = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: truth.append(
        attention_maps(model, ids[:1])["block_0"][0]))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ids, labels, epochs=3, batch_size=16, verbose=0, callbacks=[callback, recorder])
    assert np.abs(truth[0] - truth[2]).max() > 5 * SHOWN  # training moved the attention

    page = browser.open(pathlib.Path(callback.html_path).read_text(encoding="utf-8"), tmp_path / "epochs.html")
    assert page.inner_text("#epoch-label") == "epoch 3"  # opens on the latest epoch
    slider = page.locator("#epoch")
    seen = {}
    for key, epoch in (("Home", 0), ("ArrowRight", 1), ("End", 2)):
        slider.press(key)
        assert page.inner_text("#epoch-label") == f"epoch {epoch + 1}"
        page.hover("text.query-token[data-index='0']")  # the [CLS] token's row
        seen[epoch] = {(head, key): shown for head, _, key, shown in shown_lines(page)}
        for (head, k), shown in seen[epoch].items():
            assert abs(shown - truth[epoch][head, 0, k]) <= SHOWN
        page.mouse.move(0, 0)
    assert max(abs(seen[0][hk] - seen[2][hk]) for hk in seen[0]) > 2 * SHOWN  # what is shown changed with the epoch
    assert page.errors == []


def test_change_view_shows_how_far_each_head_moved_most_changed_first(browser, tmp_path):
    """The change view's numbers are `visualize.attention_change` between the first and the shown snapshot (within
    the page's 8-bit rounding), its ranking opens on the most-changed head, and the [CLS] rows are drawn."""
    from keras_tfm.insight import visualize

    rng = np.random.default_rng(3)
    first = {f"block_{j}": rng.dirichlet(np.ones(5), (1, 3, 5)).astype("float32") for j in range(2)}
    second = {name: m.copy() for name, m in first.items()}
    second["block_1"][0, 2] = rng.dirichlet(np.ones(5), 5)  # head 2 of block_1 moves; nothing else does
    history = AttentionHistory(tokens=["[CLS]", "a", "good", "film", "[SEP]"])
    history.add(first, epoch=0, label="before fine-tuning").add(second, epoch=1)
    page = browser.open(history.html(), tmp_path / "change.html")
    page.click("#tab-change")
    names, change = visualize.attention_change(first, second)
    cells = page.locator("#change-grid .change-cell")
    assert cells.count() == 6
    shown = {(int(c.get_attribute("data-layer")), int(c.get_attribute("data-head"))): float(c.inner_text())
             for c in cells.all()}
    for (j, h), value in shown.items():
        assert abs(value - change[j, h]) <= 0.01, (j, h, value, change[j, h])
    assert page.locator("#change-ranking li").first.inner_text().startswith("block_1, head 2:")
    assert "block_1, head 2" in page.inner_text("#change-title")
    assert page.locator("#change-before .change-token").count() == 5
    assert page.inner_text("#change-before-label") == "before fine-tuning"
    assert page.errors == []


def test_head_view_of_a_long_text_shows_one_head_its_strongest_links_and_joins_word_pieces(browser, tmp_path):
    rng = np.random.default_rng(4)
    tokens = ["[CLS]"] + [f"w{i}" if i % 5 else f"##p{i}" for i in range(1, 59)] + ["[SEP]"]  # 60 tokens
    maps = {"block_0": rng.dirichlet(np.full(60, 0.3), (1, 4, 60)).astype("float32")}
    page = browser.open(AttentionHistory(tokens=tokens).add(maps).html(), tmp_path / "long.html")
    assert page.input_value("#head-links") == "3"  # a long text opens on the 3 strongest links per query
    assert page.locator("#head-toggles .toggle:not(.off)").count() == 1  # and one head
    lines = page.locator("#head-lines line").count()
    assert 0 < lines <= 3 * 60 and "3 strongest links of each query" in page.inner_text("#head-readout")
    page.select_option("#head-links", "all")
    assert page.locator("#head-lines line").count() > lines
    page.check("#head-merge")
    words = page.locator("text.query-token").count()
    assert words == 60 - sum(t.startswith("##") for t in tokens)  # "w4" + "##p5" -> one word "w4p5"
    assert page.locator("text.query-token[data-index='4']").text_content() == "w4p5"
    assert page.errors == []


def test_model_view_opens_a_head_large(browser, text_case, tmp_path):
    maps, tokens = text_case
    page = browser.open(attention_html(maps, tokens=tokens), tmp_path / "model.html")
    page.click("#tab-model")
    assert page.locator("canvas.thumb").count() == 2 * 3
    assert page.locator("#model-detail").is_hidden()
    page.click("canvas.thumb[data-layer='1'][data-head='2']")
    assert page.locator("#model-detail").is_visible()
    assert page.inner_text("#detail-title").startswith("block_1, head 2")
    thumb = page.locator("canvas.thumb[data-layer='1'][data-head='2']").bounding_box()
    large = page.locator("#detail-canvas").bounding_box()
    assert large["width"] > 4 * thumb["width"]
    # The weight under the pointer: query 3, key 4 of a 6 x 6 map.
    page.mouse.move(large["x"] + large["width"] * 4.5 / 6, large["y"] + large["height"] * 3.5 / 6)
    readout = page.inner_text("#detail-readout")
    assert readout.startswith("query “was” (3) → key “not” (4)")
    assert abs(float(readout.rsplit(" ", 1)[1]) - maps["block_1"][0, 2, 3, 4]) <= SHOWN
    assert page.errors == []


def overlay_state(page):
    page.wait_for_function("document.getElementById('image-overlay').dataset.weights !== undefined")
    weights = json.loads(page.get_attribute("#image-overlay", "data-weights"))
    pixels = page.eval_on_selector("#image-overlay", "c => c.toDataURL()")
    return np.array(weights), pixels


def test_image_view_overlay_follows_head_patch_and_rollout(browser, vit_case, tmp_path):
    maps, image = vit_case
    page = browser.open(attention_html(maps, image=image), tmp_path / "vit.html")
    assert page.locator("#tab-image").get_attribute("class") == "active"
    last = maps["block_1"][0]  # (heads, 17, 17): [CLS] + 4 x 4 patches
    assert np.abs(last[0, 0, 1:] - last[1, 0, 1:]).max() > 5 * SHOWN  # the two heads do differ

    opened, _ = overlay_state(page)  # it opens on the last block's [CLS] row, mean of the heads
    assert np.abs(opened - last[:, 0, 1:].mean(0)).max() <= SHOWN
    page.select_option("#image-layer", "rollout")
    rollout, rollout_pixels = overlay_state(page)  # the rollout of the [CLS] token
    assert np.abs(rollout - visualize.attention_rollout(maps)[0, 0, 1:]).max() <= 2 * SHOWN
    page.select_option("#image-layer", "1")
    shown = {}
    for head in (0, 1):
        page.select_option("#image-head", str(head))
        shown[head] = overlay_state(page)
        assert shown[head][0].shape == (16,)
        assert np.abs(shown[head][0] - last[head, 0, 1:]).max() <= SHOWN
    assert shown[0][1] != shown[1][1] and rollout_pixels != shown[0][1]  # the drawn overlay changed with the head
    box = page.locator("#image-overlay").bounding_box()
    page.mouse.click(box["x"] + box["width"] * 2.5 / 4, box["y"] + box["height"] * 1.5 / 4)  # row 1, column 2
    weights, _ = overlay_state(page)
    assert np.abs(weights - last[1, 1 + 4 + 2, 1:]).max() <= SHOWN  # that patch's row
    assert "patch 6 (row 1, column 2)" in page.inner_text("#image-readout")
    assert page.errors == []


def test_image_view_without_class_token_averages_over_the_patches(browser, tmp_path):
    keras.utils.set_random_seed(11)
    model = sharpen(ViT(ViTBackbone(image_size=8, patch_size=2, dim=16, depth=1, num_heads=2, mlp_dim=32, dropout=0.0,
                                    class_token=False), num_classes=2, pool="mean", dropout=0.0))
    image = np.random.default_rng(1).integers(0, 256, (8, 8, 3)).astype("uint8")
    maps = attention_maps(model, image[None])
    page = browser.open(attention_html(maps, image=image), tmp_path / "gap.html")
    assert page.inner_text("#image-cls") == "query: all patches (mean)"
    page.select_option("#image-layer", "0")
    page.select_option("#image-head", "1")
    weights, _ = overlay_state(page)
    assert np.abs(weights - maps["block_0"][0, 1].mean(0)).max() <= SHOWN  # 16 patches, no prefix token
    page.select_option("#image-layer", "rollout")
    weights, _ = overlay_state(page)
    assert np.abs(weights - visualize.attention_rollout(maps)[0].mean(0)).max() <= 2 * SHOWN
    assert page.errors == []


def test_a_pooled_vits_page_opens_on_each_frames_occlusion_map(browser, tmp_path):
    keras.utils.set_random_seed(11)
    model = ViT(ViTBackbone(image_size=8, patch_size=2, dim=16, depth=1, num_heads=2, mlp_dim=32, class_token=False),
                num_classes=2, pool="mean")
    image = np.random.default_rng(1).integers(0, 256, (8, 8, 3)).astype("uint8")
    maps = attention_maps(model, image[None])
    first, second = np.zeros((4, 4)), np.zeros((4, 4))
    first[0, 1], first[3, 3], first[2, 0] = 3.0, 1.0, -2.0  # a patch that raised the score counts as 0
    second[1, 2] = 0.5
    history = AttentionHistory(image=image).add(maps, epoch=1, relevance=first).add(maps, epoch=2, relevance=second)
    page = browser.open(history.html(), tmp_path / "pooled.html")
    assert page.locator("#image-layer").input_value() == "relevance" and page.is_disabled("#image-head")
    weights, _ = overlay_state(page)  # the last frame: all of it on row 1, column 2
    np.testing.assert_allclose(weights, np.eye(16)[1 * 4 + 2], atol=1e-4)
    page.locator("#epoch").press("Home")  # the first frame
    weights, _ = overlay_state(page)
    np.testing.assert_allclose(weights, np.eye(16)[1] * 0.75 + np.eye(16)[15] * 0.25, atol=1e-4)
    assert "occlusion, epoch 1" in page.inner_text("#image-readout")
    assert page.inner_text("#image-caption") == "what the prediction needs"
    page.select_option("#image-layer", "rollout")  # the attention is still there to compare
    assert page.inner_text("#image-caption") == "where the query looks"
    weights, _ = overlay_state(page)
    assert np.abs(weights - visualize.attention_rollout(maps)[0].mean(0)).max() <= 2 * SHOWN
    assert page.errors == []


def test_show_attention_frame_runs_the_page(browser, monkeypatch, text_case, tmp_path):
    maps, tokens = text_case
    shown = []
    display = types.SimpleNamespace(HTML=lambda text: text, display=shown.append)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(display=display))
    monkeypatch.setitem(sys.modules, "IPython.display", display)
    show_attention(maps, tokens=tokens)
    page = browser.open(f"<!DOCTYPE html><html><body>{shown[0]}</body></html>", tmp_path / "notebook.html",
                        ready=None)
    frame = page.frame_locator("iframe")
    frame.locator("text.query-token").first.wait_for()
    assert frame.locator("text.query-token").count() == len(tokens)
    assert frame.locator("#head-toggles .toggle").count() == 3
    assert page.errors == []


def test_screenshots_are_not_blank(browser, text_case, vit_case, tmp_path):
    maps, tokens = text_case
    page = browser.open(attention_html(maps, tokens=tokens), tmp_path / "shots.html")
    vit_page = browser.open(attention_html(vit_case[0], image=vit_case[1]), tmp_path / "vit_shots.html")
    for current, view in ((page, "head"), (page, "model"), (vit_page, "image")):
        current.click(f"#tab-{view}")
        if view == "model":
            current.click("canvas.thumb[data-layer='0'][data-head='0']")
        pixels = png_pixels(current.screenshot())[..., :3]
        background = np.median(pixels.reshape(-1, 3), axis=0)
        differs = np.abs(pixels - background).max(-1) > 0.1
        assert differs.mean() > 0.01, view  # more than a few stray pixels differ from the background
        assert len(np.unique((pixels * 255).astype("uint8").reshape(-1, 3), axis=0)) > 50, view
    assert page.errors == [] and vit_page.errors == []


def test_a_users_own_model_without_tokens_leaves_its_padding_out():
    # A model of the user's own: ids with padding (0), our layers, no tokens to label the page with.
    ids = keras.Input((None,), dtype="int32")
    from keras_tfm.layers import EncoderBlock, TokenEmbedding

    x = EncoderBlock(num_heads=2, mlp_dim=16)(TokenEmbedding(vocab_size=20, dim=8)(ids))
    model = keras.Model(ids, keras.layers.GlobalAveragePooling1D()(x))
    batch = np.array([[5, 6, 7, 8, 9, 0, 0, 0, 0, 0, 0, 0]], "int32")  # 5 tokens, 7 of padding
    data = page_data(attention_html(attention_maps(model, batch)))
    layer = data["layers"][0]
    assert layer["queries"] == layer["keys"] == ["0", "1", "2", "3", "4"]
    assert np.asarray(stored_weights(data, 0, 0)).shape[-2:] == (5, 5)
