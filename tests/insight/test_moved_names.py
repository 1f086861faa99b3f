"""0.2.0 moved the insight modules into keras_tfm.insight; their old names still import (keras_tfm/_moved.py).

Each check runs in a fresh interpreter: what matters is what the first import of an old name does.
"""

import json
import os
import subprocess
import sys

import pytest

from keras_tfm._moved import MOVED

pytestmark = pytest.mark.tensorflow_only(reason="imports in fresh interpreters: no backend code")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code, *warning_options):
    result = subprocess.run([sys.executable, *warning_options, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_every_old_name_is_the_module_at_its_new_name_with_one_warning_at_the_users_line():
    found, _ = _run(
        "import importlib, json, warnings\n"
        "from keras_tfm._moved import MOVED\n"
        "report = {}\n"
        "for old, new in MOVED.items():\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module(old)\n"
        "        again = importlib.import_module(old)\n"
        "    report[old] = [module is importlib.import_module(new), again is module, module.__spec__.name,\n"
        "                   [(w.category.__name__, str(w.message), w.filename) for w in caught]]\n"
        "# a moved package's modules, and the names in them, are the same objects too\n"
        "warnings.simplefilter('ignore')\n"
        "import keras_tfm\n"
        "from keras_tfm.visualize.plots import plot_position_encoding\n"
        "import keras_tfm.visualize.images\n"
        "from keras_tfm.callbacks.attention_maps import AttentionMapCallback\n"
        "from keras_tfm.explorer import save_attention_html\n"
        "from keras_tfm import insight, callbacks\n"
        "report['same'] = [\n"
        "    plot_position_encoding is insight.visualize.plot_position_encoding,\n"
        "    keras_tfm.visualize.images is insight.visualize.images,\n"
        "    keras_tfm.visualize is insight.visualize,\n"
        "    AttentionMapCallback is callbacks.AttentionMapCallback,\n"
        "    save_attention_html is insight.explorer.save_attention_html,\n"
        "    insight.explorer.__spec__.name, insight.visualize.images.__spec__.name]\n"
        "print(json.dumps(report))\n")
    for old, new in MOVED.items():
        message = f"`{old}` moved to `{new}` in keras_tfm 0.2.0; the old name goes in 0.3"
        # the warning names the user's file (the `-c` program), not importlib's
        assert found[old] == [True, True, new, [["DeprecationWarning", message, "<string>"]]], old
    assert found["same"] == [True] * 5 + ["keras_tfm.insight.explorer", "keras_tfm.insight.visualize.images"]


def test_new_names_do_not_warn_and_an_old_one_reached_as_an_attribute_warns_where_python_shows_it():
    found, stderr = _run(
        "import doctest, json, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import keras_tfm\n"
        "    from keras_tfm.insight import attention_probe, explorer, visualize\n"
        "    import keras_tfm.insight.attention_map_callback, keras_tfm.insight.patch_grid, keras_tfm.callbacks\n"
        "deprecations = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]\n"
        "module = keras_tfm.attribution.occlusion_map.__module__  # line 8: the old name, as an attribute\n"
        "failed = doctest.testmod(keras_tfm._moved).failed  # its docstring's example\n"
        "print(json.dumps([deprecations, module, failed]))\n")
    assert found == [[], "keras_tfm.insight.attribution", 0]
    # Python shows a DeprecationWarning by default when it points at __main__: here, the `-c` program's line 8
    assert "<string>:8: DeprecationWarning: `keras_tfm.attribution` moved to `keras_tfm.insight.attribution`" \
        in stderr
