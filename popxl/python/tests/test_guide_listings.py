"""Every Python listing of the user guide (``docs/guide/listings/python/``), run as a program.

Each listing checks its own results against numpy; the Rust test ``guide_listings`` checks
that every listing exists in both languages and is included by a chapter of the book.
"""

import pathlib
import runpy

import pytest

LISTINGS = pathlib.Path(__file__).resolve().parents[3] / "docs" / "guide" / "listings" / "python"


def test_the_listings_are_found():
    assert len(sorted(LISTINGS.glob("*.py"))) >= 10, LISTINGS


@pytest.mark.parametrize("path", sorted(LISTINGS.glob("*.py")), ids=lambda p: p.stem)
def test_listing_runs(path):
    runpy.run_path(str(path), run_name="__main__")


def test_readme_example(capsys):
    """The Python program of the repository's README runs and prints what it says."""
    readme = (LISTINGS.parents[3] / "README.md").read_text()
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out.split() == ["[[0.5", "0.5]", "[0.5", "0.5]]"]
