"""The explorer's JavaScript without a browser: node's own test runner on tests/insight/js/, and the page's
rollout (rollout.js) against `keras_tfm.insight.visualize.attention_rollout` on the same weights."""

import json
import os
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

from keras_tfm.insight import visualize
from keras_tfm.insight.explorer import attention_html

pytestmark = pytest.mark.tensorflow_only(reason="node runs the page's JavaScript: no backend code")

ROOT = pathlib.Path(__file__).resolve().parents[2]
JS_TESTS = ROOT / "tests" / "insight" / "js"
ROLLOUT_JS = ROOT / "keras_tfm" / "insight" / "explorer" / "rollout.js"


@pytest.fixture(scope="module")
def node():
    found = shutil.which("node")
    if found is None and os.environ.get("KERAS_TFM_REQUIRE_NODE"):  # CI (.ci/run) installs node: must run
        pytest.fail("node is not installed (Debian: apt-get install nodejs), and KERAS_TFM_REQUIRE_NODE is set")
    if found is None:
        pytest.skip("node is not installed (Debian: apt-get install nodejs)")
    return found


def test_the_javascript_unit_tests_pass(node):
    files = sorted(str(path) for path in JS_TESTS.glob("*.test.js"))
    assert files, f"no *.test.js in {JS_TESTS}"
    result = subprocess.run([node, "--test", *files], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout


# Reads {"layers": [(heads, n, n) nested lists]} from argv[1]; writes the rollout of the heads' means as JSON.
ROLLOUT_SCRIPT = """
const fs = require("node:fs");
const { rollout } = require(process.argv[2]);
const layers = JSON.parse(fs.readFileSync(process.argv[3], "utf8")).layers;
const fused = layers.map((heads) => heads[0].map((_, q) => heads[0][q].map((_, k) =>
  heads.reduce((sum, head) => sum + head[q][k], 0) / heads.length)));
process.stdout.write(JSON.stringify(rollout(fused).map((row) => Array.from(row))));
"""


def test_the_page_rollout_matches_attention_rollout(node, tmp_path):
    rng = np.random.default_rng(0)
    layers = [rng.dirichlet(np.ones(7) * 0.5, size=(3, 7)) for _ in range(4)]  # 4 layers, 3 heads, 7 tokens
    path = tmp_path / "maps.json"
    path.write_text(json.dumps({"layers": [m.tolist() for m in layers]}))
    script = tmp_path / "rollout.js"
    script.write_text(ROLLOUT_SCRIPT)
    result = subprocess.run([node, str(script), str(ROLLOUT_JS), str(path)], capture_output=True, text=True,
                            timeout=60, check=True)
    from_js = np.array(json.loads(result.stdout))
    expected = visualize.attention_rollout([m[None] for m in layers])[0]  # (tokens, tokens)
    assert from_js.shape == expected.shape == (7, 7)
    np.testing.assert_allclose(from_js, expected, atol=1e-5, rtol=0)


def test_the_page_script_is_one_valid_program(node, tmp_path):
    """The files put together as the page has them (one `<script>`, the pure files' `module.exports` lines
    skipped there) parse as one program: no name declared twice, nothing cut off."""
    page = attention_html({"block_0": np.full((1, 2, 3, 3), 1 / 3, "float32")})
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(scripts) == 1 and "module.exports" in scripts[0]
    path = tmp_path / "page_script.js"
    path.write_text(scripts[0], encoding="utf-8")
    result = subprocess.run([node, "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
