"""A model trained by any recipe loads where only `keras_tfm` is installed, and predicts as it did in training.

The wheel ships `keras_tfm` alone, so everything a `.keras` file names (layers, models, losses, metrics,
learning-rate schedules) must be library code registered under "keras_tfm". Each training recipe's own quick-run
test checks the model it trained with the `loads_without_recipes` fixture (tests/recipes/saved_models.py): a
loader interpreter in which `import recipes` fails. Here: that the check is sound (it fails for a class only
the tests or the recipes define), that a model saved before PlannedWarmupCosine moved into the library still
loads, and that no training recipe's test leaves the check out.
"""

import ast
import json
import os
import zipfile

import keras
import numpy as np
import pytest

from keras_tfm.schedules import PlannedWarmupCosine
from tests.helpers import small_reverser
from tests.recipes.saved_models import ROOT, probe_inputs

TRAINING_RECIPES = ("reverse_digits", "imdb_classifier", "cifar10_vit", "translate", "language_model", "pretrain_text")


@keras.saving.register_keras_serializable(package="recipes")
class Doubled(keras.layers.Layer):
    """A layer only this test module defines, registered as the recipes once registered their schedule."""

    def call(self, x):
        return 2.0 * x


def _compiled_reverser(schedule):
    model = small_reverser()
    model.compile(optimizer=keras.optimizers.AdamW(schedule), loss="sparse_categorical_crossentropy")
    return model


def test_a_keras_tfm_model_with_its_schedule_loads_and_predicts_the_same(tmp_path, loads_without_recipes):
    model = _compiled_reverser(PlannedWarmupCosine(1e-3, total_steps=100))
    model.save(tmp_path / "model.keras")
    assert loads_without_recipes(tmp_path / "model.keras", model) == {"optimizer": "AdamW",
                                                                       "schedule": "PlannedWarmupCosine"}


def test_the_check_fails_for_a_class_keras_tfm_does_not_define(tmp_path, loads_without_recipes):
    inputs = keras.Input((4,))
    model = keras.Model(inputs, Doubled()(inputs))
    model.save(tmp_path / "model.keras")
    unknown = "(?s)does not load without the recipes: .*Could not locate class 'Doubled'"
    with pytest.raises(AssertionError, match=unknown):
        loads_without_recipes(tmp_path / "model.keras", model)


def test_a_model_saved_when_the_schedule_was_in_the_recipes_still_loads(tmp_path, loads_without_recipes):
    model = _compiled_reverser(PlannedWarmupCosine(1e-3, total_steps=100))
    model.save(tmp_path / "new.keras")
    # The same file as the recipes wrote it before the move: the schedule named "recipes>PlannedWarmupCosine".
    with zipfile.ZipFile(tmp_path / "new.keras") as new, zipfile.ZipFile(tmp_path / "old.keras", "w") as old:
        for item in new.infolist():
            data = new.read(item)
            if item.filename == "config.json":
                text = data.decode()
                assert text.count('"keras_tfm>PlannedWarmupCosine"') == 1
                data = text.replace('"keras_tfm>PlannedWarmupCosine"', '"recipes>PlannedWarmupCosine"').encode()
                assert json.loads(data)  # still a whole configuration
            old.writestr(item, data)
    found = loads_without_recipes(tmp_path / "old.keras", model)
    assert found["schedule"] == "PlannedWarmupCosine"


@pytest.mark.parametrize("recipe", TRAINING_RECIPES)
def test_every_training_recipes_quick_run_is_checked(recipe):
    # The models the recipe tests train anyway are the ones checked: here, that none of those tests leaves it out.
    path = os.path.join(ROOT, "tests", "recipes", f"test_{recipe}.py")
    tree = ast.parse(open(path).read(), path)
    users = [node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
             and "loads_without_recipes" in [argument.arg for argument in node.args.args]]
    assert users, f"no test in {path} checks its trained model with the loads_without_recipes fixture"


def test_probe_inputs_follow_the_models_input_structure():
    model = small_reverser()
    inputs = probe_inputs(model)
    assert [np.asarray(x).shape for x in keras.tree.flatten(inputs)] == [(2, 8), (2, 8)]
    assert all(1 <= np.asarray(x).min() and np.asarray(x).max() <= 5 for x in keras.tree.flatten(inputs))
