"""Every ```python block of the Markdown documentation runs.

The blocks of one page run in order, in one fresh process (a page's blocks build on each other),
in a temporary folder. A page's notebooks (MyST-NB, executed by the docs build) are not run here.
An HTML comment on the line before a block changes what happens to it:

* ``<!-- docs-test: skip (reason) -->`` - not run (hour-long settings; a short variant precedes it);
* ``<!-- docs-test: uci -->`` - needs the UCI files: run with ``$BNN_PPL_DATA`` set to them,
  skipped (with the reason) where they are absent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, UCI_DIR, run_child

MARKER = re.compile(r"<!--\s*docs-test:\s*(skip|uci)\b[^>]*-->")
FENCE = re.compile(r"^```python\s*$")


def _pages() -> list[Path]:
    pages = [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        ROOT / "examples" / "references" / "README.md",
    ]
    for path in sorted((ROOT / "docs").rglob("*.md")):
        if "_build" in path.parts or "jupyter_execute" in path.parts:
            continue
        if path.read_text().startswith("---\nfile_format: mystnb"):
            continue  # an executed notebook: the docs build runs it
        pages.append(path)
    return [p for p in pages if p.exists()]


def blocks(text: str) -> list[tuple[str | None, str]]:
    """``(marker, code)`` of every ```python block; marker is "skip", "uci" or None."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            marker = None
            previous = lines[i - 1] if i else ""
            if m := MARKER.search(previous):
                marker = m.group(1)
            j = i + 1
            while j < len(lines) and lines[j].rstrip() != "```":
                j += 1
            out.append((marker, "\n".join(lines[i + 1 : j])))
            i = j
        i += 1
    return out


def test_blocks_parser_reads_markers():
    text = "a\n```python\nx = 1\n```\n<!-- docs-test: skip (hours) -->\n```python\ny\n```\n"
    text += "<!-- docs-test: uci -->\n```python\nz = 2\n```\n```bash\nls\n```\n"
    assert blocks(text) == [(None, "x = 1"), ("skip", "y"), ("uci", "z = 2")]


PAGES = [p for p in _pages() if blocks(p.read_text())]


def _script(page: Path) -> str:
    return "\n\n".join(code for m, code in blocks(page.read_text()) if m != "skip")


def _same_as_earlier(page: Path) -> Path | None:
    """An earlier page of PAGES whose runnable blocks are exactly this page's (the README's
    quickstart repeated on Getting started): the same script, run once."""
    script = _script(page)
    for other in PAGES[: PAGES.index(page)]:
        if _script(other) == script:
            return other
    return None


# run_bound: a page runs what a reader runs, at XLA's default optimisations (conftest.py): faster
# than level 0 on 9 of 13 pages (README 15 s against 35 s, cold cache), the rest within 0.4 s
@pytest.mark.run_bound
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_blocks_run(page: Path, tmp_path: Path, request: pytest.FixtureRequest):
    found = blocks(page.read_text())
    run = [(m, code) for m, code in found if m != "skip"]
    if not run:
        pytest.skip("every block of this page is marked skip")
    if (same := _same_as_earlier(page)) is not None:
        pytest.skip(f"the same blocks as {same.relative_to(ROOT)}, which runs them")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    if any(m == "uci" for m, _ in run):
        if not UCI_DIR.is_dir():
            pytest.skip(f"needs the UCI files ({UCI_DIR} absent; set $BNN_PPL_DATA)")
        env["BNN_PPL_DATA"] = str(UCI_DIR)
    script = "\n\n".join(code for _, code in run)
    result = run_child(
        # a page that calls a deprecated API (bnn_ppl's or another library's) fails
        [sys.executable, "-W", "error::DeprecationWarning:__main__", "-c", script],
        request.node,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (
        f"{page.relative_to(ROOT)}: a block failed\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    )


def test_no_markdown_file_over_40kb():
    tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    big = [
        (name, (ROOT / name).stat().st_size)
        for name in tracked.stdout.split()
        if (ROOT / name).exists() and (ROOT / name).stat().st_size > 40_000
    ]
    assert not big, f"Markdown files over 40 KB (split them into pages): {big}"


def test_readme_is_one_screen():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def _generate_module():
    """``docs/_generate.py``, imported from the docs folder."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import _generate
    finally:
        sys.path.pop(0)
    return _generate


def _catalogue(records: dict[str, dict], folder: Path, monkeypatch) -> dict[str, str]:
    """The generated catalogue for these records (stem -> JSON), written to ``folder``: file name
    -> Markdown, for ``README.md``, ``catalogue.md`` and each data set's page."""
    generate = _generate_module()
    for stem, record in records.items():
        (folder / f"{stem}.json").write_text(json.dumps(record))
    monkeypatch.setattr(generate, "REFERENCES", folder)
    return {path.name: text for path, text in generate.catalogue_pages().items()}


def _rows(pages: dict[str, str]) -> dict[str, str]:
    """The data sets' pages' table rows by their first cell (``| `stem```)."""
    return {
        line.split(" | ")[0]: line
        for name, text in pages.items()
        if name not in ("README.md", "catalogue.md")
        for line in text.splitlines()
        if line.startswith("| `")
    }


def test_reference_catalogue_is_generated_from_the_records():
    generate = _generate_module()
    pages = generate.catalogue_pages()
    for path, text in pages.items():  # the README, the index page, one page per data set
        assert path.exists() and path.read_text() == text, (
            f"{path.relative_to(ROOT)} is stale: run python docs/_generate.py"
        )
    assert generate.stale_catalogue_pages(pages) == [], "run: python docs/_generate.py"
    docs = generate.CATALOGUE_DOCS
    slugs = [generate.catalogue_slug(name) for name in generate.catalogue_sections()]
    per_set = [docs / f"{slug}.md" for slug in slugs]
    assert set(pages) == {generate.REFERENCES / "README.md", docs / "catalogue.md", *per_set}
    records = sorted((ROOT / "examples" / "references").glob("*.json"))
    assert len(records) > 0
    for record in records:  # one row per record, on one data set's page
        rows = [p for p in per_set for line in pages[p].splitlines()
                if line.startswith(f"| `{record.stem}` |")]  # fmt: skip
        assert len(rows) == 1, f"{record.stem}: {len(rows)} rows"
    # every data set's page linked from the README (GitHub) and the docs' index and toctree
    readme = pages[generate.REFERENCES / "README.md"]
    links = re.findall(r"\]\((\.\./\.\./docs/references/[^)]+)\)", readme)
    assert [(generate.REFERENCES / link).resolve() for link in links] == per_set
    index = pages[docs / "catalogue.md"]
    assert re.findall(r"\{doc\}`[^`<]+ <([^>]+)>`", index) == slugs
    toctree = index.split("```{toctree}\n", 1)[1].split("```", 1)[0].splitlines()
    assert toctree == [":hidden:", ":maxdepth: 1", "", *slugs]


def test_the_catalogue_gives_a_resumed_run_the_time_every_call_committed(tmp_path, monkeypatch):
    # a run resumed once: the writing call took 8 s, its checks committed 2,380 s in all
    resumed = {
        "converged": False,
        "stop_reason": "max_seconds",
        "wall_seconds": 7.6,
        "recipe": {"num_chains": 4, "convergence": {"draws": 6000, "seconds": 2380.2}},
    }
    older = {"converged": True, "wall_seconds": 1234.0, "recipe": {"num_chains": 4}}
    rows = _rows(_catalogue({"resumed": resumed, "older": older}, tmp_path, monkeypatch))
    assert "| 6000 x 4 | 2,380 s |" in rows["| `resumed`"]
    assert "| 1,234 s |" in rows["| `older`"]  # no committed time stored: the call's


def test_the_catalogue_shortens_mlps_and_priors_and_keeps_regression_metrics_in_target_units(
    tmp_path, monkeypatch
):
    regression = {"model": {"network": "MLP(hidden=(50, 50))", "prior": "student_t:3,0.173",
                            "likelihood": "Gaussian", "noise": "HalfNormal(1)"},
                  "metrics": {"gaussian_nll": 0.1, "rmse": 0.25, "rmse_original": 2.5,
                              "test_ll_original": -2.3}}  # fmt: skip
    classifier = {"model": {"network": "MLP(hidden=(50,))", "prior": "Normal(0.3)",
                            "likelihood": "Categorical"},
                  "metrics": {"nll": 0.15, "accuracy": 0.97}}  # fmt: skip
    records = {"regression": regression, "classifier": classifier}
    rows = _rows(_catalogue(records, tmp_path, monkeypatch))
    # the prior as its family (as the Normal rows); "noise ..." stands for the Gaussian likelihood
    assert "| MLP(50, 50), StudentT(3, 0.173), noise HalfNormal(1) |" in rows["| `regression`"]
    assert "| RMSE 2.5, test LL -2.3 (orig.) |" in rows["| `regression`"]
    assert "| MLP(50), Normal(0.3), Categorical |" in rows["| `classifier`"]
    assert "| NLL 0.15, accuracy 0.97 |" in rows["| `classifier`"]


def test_the_catalogue_has_one_table_per_data_set_in_split_order(tmp_path, monkeypatch):
    data = {"b_split10": ("uci/b", 10), "b_split2": ("uci/b", 2), "a": ("a", None)}
    records = {stem: {"data": {"name": name, "split": k}} for stem, (name, k) in data.items()}
    records["b_split10"]["converged"] = True
    pages = _catalogue(records, tmp_path, monkeypatch)
    assert list(pages) == ["README.md", "catalogue.md", "a.md", "uci_b.md"]  # by name
    assert pages["a.md"].startswith("# Stored references: a\n")
    assert pages["uci_b.md"].startswith("# Stored references: uci/b\n")
    assert "\n1 record, 0 converged, by split;" in pages["a.md"]
    assert "\n2 records, 1 converged, by split;" in pages["uci_b.md"]
    # the index: a row per data set, its records and how many converged
    assert "\n| [a](../../docs/references/a.md) | 1 | 0 |\n" in pages["README.md"]
    assert "\n| [uci/b](../../docs/references/uci_b.md) | 2 | 1 |\n" in pages["README.md"]
    assert "\n| {doc}`uci/b <uci_b>` | 2 | 1 |\n" in pages["catalogue.md"]
    lines = pages["uci_b.md"].splitlines()
    rows = [line.split(" | ")[:2] for line in lines if line.startswith("| `")]
    assert rows == [["| `b_split2`", "2"], ["| `b_split10`", "10"]]  # by split, not by name


def test_the_catalogue_removes_only_generated_pages_of_data_sets_gone(tmp_path, monkeypatch):
    generate = _generate_module()
    references, docs = tmp_path / "references", tmp_path / "docs"
    references.mkdir()
    docs.mkdir()
    (references / "r.json").write_text(json.dumps({"data": {"name": "uci/x", "split": 0}}))
    gone = docs / "uci_gone.md"  # a data set without records any more: its generated page
    gone.write_text(f"# Stored references: uci/gone\n\n{generate.CATALOGUE_MARKER}\n")
    written = docs / "notes.md"  # a page somebody wrote
    written.write_text("# Notes\n")
    monkeypatch.setattr(generate, "REFERENCES", references)
    monkeypatch.setattr(generate, "CATALOGUE_DOCS", docs)
    generate.write_catalogue()
    assert sorted(p.name for p in docs.iterdir()) == ["catalogue.md", "notes.md", "uci_x.md"]
    assert (references / "README.md").exists()
