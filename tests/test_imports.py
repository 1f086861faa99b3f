"""`import keras_tfm` imports its parts and registers every class with Keras, in either order with `import keras`
(keras_tfm/__init__.py).

Each check runs in a fresh interpreter: this one has imported keras_tfm long ago.
"""

import pytest
import json
import os
import subprocess
import sys

pytestmark = pytest.mark.tensorflow_only(reason="imports in fresh interpreters on the default backend")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code):
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_keras_tfm_on_jax_imports_no_tensorflow():
    """A JAX user may not have TensorFlow: `import keras_tfm` does not need it."""
    pytest.importorskip("jax")
    loaded = _run(
        "import json, os, sys\n"
        "os.environ['KERAS_BACKEND'] = 'jax'\n"
        "import keras, keras_tfm\n"
        "print(json.dumps({'tensorflow': 'tensorflow' in sys.modules, 'backend': keras.backend.backend(),\n"
        "                  'presets': len(keras_tfm.presets.VIT_PRESETS)}))\n"
    )
    assert loaded == {"tensorflow": False, "backend": "jax", "presets": 11}


def test_every_name_in_all_resolves_and_star_import_gives_them():
    found = _run(
        "import json, keras_tfm, keras_tfm.layers, keras_tfm.models\n"
        "missing = [name for name in keras_tfm.__all__ if getattr(keras_tfm, name, None) is None]\n"
        "unlisted = [n for n in keras_tfm.layers.__all__ + keras_tfm.models.__all__ if n not in keras_tfm.__all__]\n"
        "same = keras_tfm.EncoderBlock is keras_tfm.layers.EncoderBlock and keras_tfm.ViT is keras_tfm.models.ViT\n"
        "namespace = {}\n"
        "exec('from keras_tfm import *', namespace)\n"
        "starred = sorted(set(keras_tfm.__all__) - set(namespace))\n"
        "wanted = ['AttentionMap', 'AttentionMaps', 'attention_maps', 'load_model', 'TextClassifierPipeline',\n"
        "          'Translator', 'callbacks', 'insight', 'layers', 'metrics', 'models', 'schedules', 'text']\n"
        "print(json.dumps({'missing': missing, 'unlisted': unlisted, 'same': same, 'starred': starred,\n"
        "                  'wanted': [n for n in wanted if n not in keras_tfm.__all__]}))\n"
    )
    assert found == {"missing": [], "unlisted": [], "same": True, "starred": [], "wanted": []}


def test_an_unknown_name_is_an_attribute_error():
    message = _run(
        "import json, keras_tfm\n"
        "try:\n"
        "    keras_tfm.EncoderBlok\n"
        "except AttributeError as error:\n"
        "    print(json.dumps(str(error)))\n"
    )
    assert message == "module 'keras_tfm' has no attribute 'EncoderBlok'"


def test_keras_load_model_finds_every_model_a_recipe_saves_whatever_the_import_order(tmp_path):
    """Each class registers itself where it is defined, so `keras.saving.load_model` finds them after `import
    keras_tfm` whatever came first, also when only one of our parts was imported by name."""
    _run("import keras_tfm, keras\n"
         "from keras_tfm.models import Seq2SeqTransformer, TextClassifier, TransformerLM, ViT\n"
         "models = {'vit': ViT.from_preset('tiny', num_classes=3),\n"
         "          'text': TextClassifier.from_preset('tiny', vocab_size=20, max_length=8, num_classes=2),\n"
         "          'seq2seq': Seq2SeqTransformer.from_preset('tiny', source_vocab_size=20, target_vocab_size=20),\n"
         "          'lm': TransformerLM.from_preset('tiny', vocab_size=20)}\n"
         "for name, model in models.items():\n"
         f"    model.save({str(tmp_path)!r} + f'/{{name}}.keras')\n"
         "print(1)\n")
    for order in ("import keras_tfm\nimport keras\n", "import keras\nimport keras_tfm\n",
                  "from keras_tfm.layers import EncoderBlock\nimport keras\n"):
        loaded = _run("import json, sys\n" + order +  # nothing else of ours
                      f"names = [type(keras.saving.load_model({str(tmp_path)!r} + f'/{{n}}.keras')).__name__\n"
                      "         for n in ('vit', 'text', 'seq2seq', 'lm')]\n"
                      "print(json.dumps(names))\n")
        assert loaded == ["ViT", "TextClassifier", "Seq2SeqTransformer", "TransformerLM"], order
