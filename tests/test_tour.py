"""docs/tour.ipynb runs from top to bottom, on the backend of the run, and says what it shows."""

import json
import pathlib
import re

import pytest

from tests.helpers import load_script

pytestmark = pytest.mark.tensorflow_only(reason="the notebook runs on the default backend")

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOUR = ROOT / "docs" / "tour.ipynb"


def _cells():
    return json.loads(TOUR.read_text(encoding="utf-8"))["cells"]


def test_outputs_are_not_kept_in_the_repository():
    """Stored outputs go stale when the code changes; the pictures the tour shows unexecuted are docs/pictures'."""
    for cell in _cells():
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_every_picture_the_tour_shows_exists():
    shown = re.findall(r"\]\((pictures/[\w.]+\.png)\)", "".join("".join(c["source"]) for c in _cells()))
    assert len(shown) >= 5
    for path in shown:
        assert (ROOT / "docs" / path).is_file(), path


@pytest.mark.slow
def test_the_tour_runs_from_top_to_bottom():
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(str(TOUR), as_version=4)
    # iopub_timeout: how long nbclient waits for a cell's last output after the kernel says it is idle. At its
    # default (4 s) a cell's printed line was dropped once while the other worker held both cores.
    client = nbclient.NotebookClient(notebook, timeout=300, iopub_timeout=60, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT / "docs")}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if any cell fails
    text = "\n".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                     for output in cell.outputs)
    error = float(re.search(r"over 120 positions: ([\d.e-]+)", text).group(1))
    assert error < 1e-5  # PE(p + 5) is a linear map of PE(p)
    assert "reversed input gives the reversed output: True" in text  # without positions order is invisible
    assert "True True" in text  # the layer computes the hand-worked attention
    assert float(re.search(r"held-out exact match \(greedy\): ([\d.]+)", text).group(1)) > 0.5
    accuracies = [float(v) for v in re.findall(r"held-out accuracy: ([\d.]+)", text)]
    assert len(accuracies) == 2 and min(accuracies) > 0.6
    pictures = sum(1 for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
                   if "image/png" in output.get("data", {}))
    assert pictures == 5  # the encoding, the alignment, the decoder's heads, the token heat map, the rollout


def _make_pictures():
    return load_script("docs/make_pictures.py")


def test_every_committed_picture_is_drawn_by_make_pictures():
    module = _make_pictures()
    drawn = {name for files in module.FILES.values() for name in files}
    assert drawn == {path.name for path in (ROOT / "docs" / "pictures").glob("*.png")}
    assert set(module.FILES) == set(module.PICTURES)


def test_make_pictures_draws_the_architecture_from_a_real_model(tmp_path):
    written = _make_pictures().main(["architecture", "position_encoding", "--output-dir", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["architecture.png", "position_encoding.png"]
    assert all(pathlib.Path(p).stat().st_size > 10_000 for p in written)
    with pytest.raises(SystemExit):
        _make_pictures().main(["a_picture_that_does_not_exist"])
