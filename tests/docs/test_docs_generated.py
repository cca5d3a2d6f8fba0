"""The docs site's generated pages are up to date with their sources (as tests/chart/test_chart_docs.py
does for the chart README's table): the chart values page with values.yaml, the command-line page with
each stage's argparse parser, the benchmark results with bench/results/*.json, the plots and
screenshots with bench/plots/ and results/. Fix: `make docs-gen` (or `python scripts/gen_docs.py`)."""

import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

pytest.importorskip("yaml")
gen_docs = pytest.importorskip("gen_docs")


def test_generated_pages_are_up_to_date():
    stale = gen_docs.stale()
    assert not stale, f"stale generated docs (run make docs-gen): {[str(p) for p in stale]}"


def test_every_stage_has_its_help_on_the_cli_page():
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for stage in gen_docs.STAGES:
        assert f"## disttrain-{stage}" in page and f"usage: disttrain-{stage}" in page, stage


def test_every_chart_value_is_on_the_values_page():
    sys.path.insert(0, str(ROOT / "tests" / "chart"))
    import values_table

    page = (ROOT / "docs" / "reference" / "values.md").read_text()
    for _, key, _ in values_table.params():
        assert f"| `{key}` |" in page, key
