import pytest

from tests.recipes.saved_models import Loader


@pytest.fixture(scope="session")
def loads_without_recipes(tmp_path_factory):
    """`check(model_path, trained_model)`: the saved model loads without the recipes and predicts as the trained
    one (tests/recipes/saved_models.py). One loader interpreter per test process, started on first use."""
    loader = Loader(str(tmp_path_factory.mktemp("without_recipes")))
    yield loader.check
    loader.close()
