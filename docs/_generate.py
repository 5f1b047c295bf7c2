"""Pages generated from the code and the stored records, written before every docs build.

* ``api/*.rst`` - one page per public module, every name of its ``__all__`` (grouped by concept
  for ``bnn_ppl.inference``); a name missing from the groups lands under "Other".
* ``references/*.md`` and ``examples/references/README.md`` - the stored reference runs, from
  their JSON records: an index and one table per data set (``python docs/_generate.py``).
* ``benchmarks/_generated/<script>.<table>.md`` - the newest record of each benchmark table, from
  ``benchmarks/records/*.jsonl`` (the pages include them), and ``benchmarks/gpu_records.md``.
"""

from __future__ import annotations

import importlib
import inspect
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent

# (page, module, title, groups): groups is a list of (heading, names); None: one group, __all__
API_PAGES: list[tuple[str, str, str, list[tuple[str, list[str]]] | None]] = [
    ("bnn_ppl", "bnn_ppl", "bnn_ppl", None),
    (
        "inference",
        "bnn_ppl.inference",
        "bnn_ppl.inference",
        [
            ("One driver", ["fit", "fit_run", "FitData"]),
            ("Results as a Posterior", ["from_mcmc", "from_svi", "from_map"]),
            (
                "The potential",
                [
                    "full_batch_potential",
                    "FullBatchPotential",
                    "model_potential",
                    "ModelPotential",
                    "ModelData",
                ],
            ),
            (
                "HMC and NUTS",
                ["HMC", "NUTS", "default_trajectory_length"],
            ),
            ("Checkpoints and resuming", ["run_segments", "MCMCPlan"]),
            (
                "SG-MCMC kernels",
                [
                    "SGLD",
                    "SGHMC",
                    "SGNHT",
                    "ATMC",
                    "SGMCMCKernel",
                    "schedules",
                ],
            ),
            (
                "SG-MCMC gradients, step sizes and accuracy",
                [
                    "gradient_estimator",
                    "full_batch_estimator",
                    "gradient_scales",
                    "recommended_step_size",
                    "recommended_friction",
                    "check_accuracy",
                    "SGMCMCAccuracyWarning",
                ],
            ),
            (
                "Reference posteriors",
                [
                    "reference_hmc",
                    "ReferenceRun",
                    "ConvergenceCheck",
                    "ReferenceNotConvergedWarning",
                    "ParallelTempering",
                    "heldout_noise",
                ],
            ),
            (
                "Baselines: SVI, MAP, ensembles",
                [
                    "svi_mean_field",
                    "map_estimate",
                    "deep_ensemble",
                ],
            ),
            ("Several processes", ["distributed"]),
        ],
    ),
    ("models", "bnn_ppl.models", "bnn_ppl.models", None),
    ("config", "bnn_ppl.config", "bnn_ppl.config", None),
    ("priors", "bnn_ppl.priors", "bnn_ppl.priors", None),
    ("likelihoods", "bnn_ppl.likelihoods", "bnn_ppl.likelihoods", None),
    ("data", "bnn_ppl.data", "bnn_ppl.data", None),
    ("metrics", "bnn_ppl.metrics", "bnn_ppl.metrics", None),
    ("diagnostics", "bnn_ppl.diagnostics", "bnn_ppl.diagnostics", None),
    ("plots", "bnn_ppl.plots", "bnn_ppl.plots", None),
    ("validation", "bnn_ppl.validation", "bnn_ppl.validation", None),
]


def public_names(module_name: str) -> list[str]:
    """The module's ``__all__`` (every public name the API reference must show)."""
    module = importlib.import_module(module_name)
    return list(module.__all__)


def _write(path: Path, text: str) -> None:
    """Write ``text`` only when it changed (an unchanged page keeps Sphinx's cache valid)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _kind(module, name: str) -> str:
    value = getattr(module, name)
    if inspect.ismodule(value):
        return "module"
    if inspect.isclass(value) or inspect.isfunction(value):
        return "object"
    return "data"


def api_pages() -> list[str]:
    """Write ``docs/api/<page>.rst``; return the page names in order."""
    written = []
    seen: dict[int, str] = {}  # an object on two pages is documented on the first
    for page, module_name, title, groups in API_PAGES:
        module = importlib.import_module(module_name)
        names = public_names(module_name)
        also = []
        for n in names:
            value = getattr(module, n)
            if (
                inspect.ismodule(value)
                and value.__name__.startswith("bnn_ppl.")
                and any(value.__name__ == m for _, m, _, _ in API_PAGES)
            ):
                also.append(f"* :mod:`{module_name}.{n}` - :doc:`{value.__name__.split('.')[-1]}`")
            elif _kind(module, n) == "object" and id(value) in seen:
                also.append(f"* ``{module_name}.{n}`` is :obj:`{seen[id(value)]}`")
            elif _kind(module, n) == "object":
                seen[id(value)] = f"{module_name}.{n}"
        skip = {line.split("``")[1].rsplit(".", 1)[1] for line in also if "``" in line} | {
            line.split("`")[1].rsplit(".", 1)[1] for line in also if ":mod:" in line
        }
        all_names, names = names, [n for n in names if n not in skip]
        if groups is None:
            groups = [("Names", names)]
        else:
            grouped = {n for _, group in groups for n in group}
            unknown = sorted(grouped - set(all_names))
            if unknown:
                raise RuntimeError(
                    f"docs/_generate.py names {unknown} not in {module_name}.__all__"
                )
            rest = [n for n in names if n not in grouped]
            if rest:
                groups = [*groups, ("Other", rest)]
        lines = [
            title,
            "=" * len(title),
            "",
            f".. automodule:: {module_name}",
            "   :no-members:",
            "",
            f".. currentmodule:: {module_name}",
            "",
        ]
        if also:
            lines += ["Also here", "---------", "", *also, ""]
        for heading, group in groups:
            group = [n for n in group if n not in skip]
            if not group:
                continue
            lines += [heading, "-" * len(heading), ""]
            objects = [n for n in group if _kind(module, n) != "data"]
            data = [n for n in group if _kind(module, n) == "data"]
            if objects:
                lines += [".. autosummary::", "   :toctree: generated", "   :nosignatures:", ""]
                lines += [f"   {n}" for n in objects] + [""]
            for n in data:
                lines += [f".. autodata:: {n}", "   :no-value:", ""]
        _write(DOCS / "api" / f"{page}.rst", "\n".join(lines))
        written.append(page)
    index = (
        [
            "API reference",
            "=============",
            "",
            "Every public name, documented from its docstring, under the import path to use.",
            "",
            ".. toctree::",
            "   :maxdepth: 1",
            "",
        ]
        + [f"   {p}" for p in written]
        + [""]
    )
    _write(DOCS / "api" / "index.rst", "\n".join(index))
    return written


REFERENCES = ROOT / "examples" / "references"
CATALOGUE_DOCS = DOCS / "references"  # catalogue.md and one page per data set

CATALOGUE_INTRO = """\
Converged (or, where stated, budget-stopped) HMC predictives written by `examples/reference.py`
(`bnn_ppl.inference.reference_hmc`). For each run, a `.npz` holds the Bayesian model average's
predictive at every test row (`probs`, or Gaussian `mean` and `scale`, with `y_test`; newer files
also each chain's average, `chain_probs` or `chain_mean`/`chain_scale`) and a `.json` the
command, seed, commit, versions, data, model, the recipe's settings, every convergence check and
the test metrics computed from the stored predictions
(`tests/inference/reference/test_reference.py` recomputes them from the `.npz`, checked by its
SHA-256). `examples/against_reference.py --reference NAME`
measures other methods against any of them; the `command` field of a record's JSON file is
the command that made it. What the runs taught is in the documentation's
findings (reference runs, against the converged reference).

One table per data set, by split (UCI: Hernández-Lobato & Adams's standard splits). *model*:
the network, the prior on every weight, the likelihood (`noise`: a Gaussian likelihood with
that noise sd, fixed or with that prior).
*converged* is the recipe's rule (R-hat <= `max_rhat` for at least `min_share` of the
predictions and bulk ESS >= `min_ess`) at the last check, else the reason the run stopped;
*draws/chain* counts the sampling draws of the last check; *wall* is the time its checks
committed (warmup, the starts and every segment, over all the calls that resumed the run; older
records without it: the writing call's time); *metrics* are on the test split, in the targets'
units where the record has them (`(orig.)`; the standardised figures are in its JSON), else on
standardised targets.
"""

CATALOGUE_HEAD = (
    "# Stored reference posteriors\n\n"
    "<!-- generated by docs/_generate.py from the JSON records in this folder: do not edit -->\n\n"
    + CATALOGUE_INTRO
)
# the docs pages' marker: a page under docs/references/ with it and no data set is removed
CATALOGUE_MARKER = (
    "<!-- generated by docs/_generate.py from examples/references/*.json: do not edit -->"
)
CATALOGUE_TABLE = [
    "| record | split | model | converged | draws/chain x chains | wall | metrics | commit |",
    "|---|---|---|---|---|---|---|---|",
]


class CatalogueRow(NamedTuple):
    """One record's row of its data set's table (rows sort by split, then record)."""

    split: int  # -1 for a record without an integer split
    stem: str
    converged: bool
    text: str


def _fmt_metrics(metrics: dict) -> str:
    names = {
        "nll": "NLL",
        "accuracy": "accuracy",
        "gaussian_nll": "NLL",
        "rmse": "RMSE",
        "rmse_original": "RMSE",
        "test_ll_original": "test LL",
    }
    original = "rmse_original" in metrics  # the targets' own units: standardised in the JSON
    if original:
        names = {k: v for k, v in names.items() if k.endswith("_original")}
    text = ", ".join(f"{label} {metrics[k]:.4g}" for k, label in names.items() if k in metrics)
    return text + " (orig.)" if original else text


def _network(text: str) -> str:
    """``MLP(hidden=(50,))`` as ``MLP(50)``, ``MLP(hidden=(50, 50))`` as ``MLP(50, 50)``."""
    import re

    return re.sub(r"MLP\(hidden=\(([\d, ]+?),?\)\)", r"MLP(\1)", text)


def _prior(spec: str) -> str:
    """A ``--prior`` spec as its family, like the Normal rows: ``laplace:0.212`` as
    ``Laplace(0.212)``, ``student_t:3,0.173`` as ``StudentT(3, 0.173)``."""
    import re

    if ":" not in spec:
        return spec
    from bnn_ppl.priors import from_string

    return re.sub(r"\w+=", "", repr(from_string(spec))).replace(".0,", ",")


def catalogue_sections() -> dict[str, list[CatalogueRow]]:
    """``examples/references/*.json`` as one table per data set: name -> its rows, names sorted,
    rows by split."""
    import json

    sections: dict[str, list[CatalogueRow]] = {}
    for path in sorted(REFERENCES.glob("*.json")):
        record = json.loads(path.read_text())
        recipe = record.get("recipe", {})
        check = recipe.get("convergence") or {}
        data = record.get("data", {})
        model = record.get("model", {})
        noise = f", noise {model['noise']}" if model.get("noise") is not None else ""
        likelihood = model.get("likelihood", "")
        if noise and likelihood == "Gaussian":  # "noise ..." says it: a Gaussian likelihood
            likelihood = ""
        if model.get("temperature", 1.0) != 1.0:  # a tempered (cold) posterior
            noise += f", T = {model['temperature']:g} ({model.get('temper', 'likelihood')})"
        verdict = "yes" if record.get("converged") else f"no ({record.get('stop_reason')})"
        draws = check.get("draws", "")
        # the checks' committed time: a resumed run's writing call saw only its own part
        seconds = check.get("seconds") or record.get("wall_seconds", 0)
        network = _network(model.get("network", ""))
        split_order = data["split"] if isinstance(data.get("split"), int) else -1
        row = (
            f"| `{path.stem}` | {data.get('split', '')} | {network}, "
            f"{_prior(model.get('prior', ''))}{', ' + likelihood if likelihood else ''}{noise} | "
            f"{verdict} | "
            f"{draws} x {recipe.get('num_chains', '')} | {seconds:,.0f} s | "
            f"{_fmt_metrics(record.get('metrics', {}))} | `{str(record.get('commit', ''))[:7]}` |"
        )
        sections.setdefault(data.get("name", "other"), []).append(
            CatalogueRow(split_order, path.stem, bool(record.get("converged")), row)
        )
    return {name: sorted(sections[name]) for name in sorted(sections)}


def catalogue_slug(name: str) -> str:
    """A data set's page name under ``docs/references/``: ``uci/boston`` -> ``uci_boston``."""
    return name.replace("/", "_")


def _slugs(sections: dict[str, list[CatalogueRow]]) -> dict[str, str]:
    slugs = {name: catalogue_slug(name) for name in sections}
    taken = [s for s in slugs.values() if s in ("catalogue", "README")]
    if taken or len(set(slugs.values())) < len(slugs):
        raise RuntimeError(f"docs/_generate.py: data sets share a page name: {slugs}")
    return slugs


def _records(n: int) -> str:
    return f"{n} record{'s' if n != 1 else ''}"


def _catalogue_index(sections: dict[str, list[CatalogueRow]], link) -> list[str]:
    """One row per data set: its page (``link(name)``), its records and how many converged."""
    lines = ["| data set | records | converged |", "|---|---:|---:|"]
    for name, rows in sections.items():
        lines.append(f"| {link(name)} | {len(rows)} | {sum(r.converged for r in rows)} |")
    return lines


def catalogue(sections: dict[str, list[CatalogueRow]] | None = None) -> str:
    """``examples/references/README.md``: the introduction and an index of the data sets, each
    linked to its page of the documentation."""
    sections = catalogue_sections() if sections is None else sections
    slugs = _slugs(sections)
    index = _catalogue_index(sections, lambda n: f"[{n}](../../docs/references/{slugs[n]}.md)")
    text = "Each data set's table is a page of the documentation:"
    return CATALOGUE_HEAD + "\n" + text + "\n\n" + "\n".join(index) + "\n"


def catalogue_docs(sections: dict[str, list[CatalogueRow]] | None = None) -> dict[str, str]:
    """``docs/references/``: file name -> Markdown, for ``catalogue.md`` (the introduction, the
    index and a hidden toctree of the data sets' pages) and one page per data set."""
    sections = catalogue_sections() if sections is None else sections
    slugs = _slugs(sections)
    index = _catalogue_index(sections, lambda n: f"{{doc}}`{n} <{slugs[n]}>`")
    toctree = ["```{toctree}", ":hidden:", ":maxdepth: 1", "", *slugs.values(), "```"]
    head = ["# Stored reference posteriors", "", CATALOGUE_MARKER, "", CATALOGUE_INTRO]
    pages = {"catalogue.md": "\n".join([*head, *index, "", *toctree, ""])}
    for name, rows in sections.items():
        converged = sum(r.converged for r in rows)
        pages[f"{slugs[name]}.md"] = "\n".join(
            [
                f"# Stored references: {name}",
                "",
                CATALOGUE_MARKER,
                "",
                f"{_records(len(rows))}, {converged} converged, by split; "
                "{doc}`the catalogue <catalogue>` says what each column means.",
                "",
                *CATALOGUE_TABLE,
                *(row.text for row in rows),
                "",
            ]
        )
    return pages


def catalogue_pages() -> dict[Path, str]:
    """Every file of the catalogue: ``examples/references/README.md`` and the docs pages."""
    sections = catalogue_sections()
    pages = {REFERENCES / "README.md": catalogue(sections)}
    pages |= {CATALOGUE_DOCS / name: text for name, text in catalogue_docs(sections).items()}
    return pages


def stale_catalogue_pages(pages: dict[Path, str]) -> list[Path]:
    """Generated pages under ``docs/references/`` (with the marker) that ``pages`` no longer
    writes: a data set without records."""
    return [
        path
        for path in sorted(CATALOGUE_DOCS.glob("*.md"))
        if path not in pages and CATALOGUE_MARKER in path.read_text()
    ]


def write_catalogue() -> None:
    """Write the catalogue's files; remove the data set pages no record needs any more."""
    pages = catalogue_pages()
    for path in stale_catalogue_pages(pages):
        path.unlink()
    for path, text in pages.items():
        _write(path, text)


def cli_reference() -> str:
    """Every ``bnn-ppl`` subcommand's ``--help``, as the tyro parser prints it."""
    import contextlib
    import io
    import os

    from bnn_ppl.cli.parser import parse_compare, parse_evaluate, parse_run
    from bnn_ppl.cli.settings import METHODS

    os.environ["COLUMNS"] = "100"
    out = [
        "# Command-line options",
        "",
        "<!-- generated by docs/_generate.py from the bnn-ppl parser: do not edit -->",
        "",
        "Every option of every `bnn-ppl` subcommand, as `--help` prints it. "
        "{doc}`cli` explains the commands.",
        "",
    ]
    commands = [(f"bnn-ppl run {m}", parse_run, [m]) for m in METHODS]
    commands += [("bnn-ppl evaluate", parse_evaluate, []), ("bnn-ppl compare", parse_compare, [])]
    for title, parse, args in commands:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            with contextlib.suppress(SystemExit):
                parse([*args, "--help"])
        text = "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
        out += [f"## `{title}`", "", "```text", text.strip("\n"), "```", ""]
    return "\n".join(out)


def config_reference() -> str:
    """A table of every field of every config dataclass: its type and default."""
    import dataclasses

    from bnn_ppl import config as configs

    out = [
        "# Every config",
        "",
        "<!-- generated by docs/_generate.py from bnn_ppl.config: do not edit -->",
        "",
        "The fields of each method's config dataclass, with their defaults; "
        "{doc}`fit` says how they are used and each class's API page what each field means.",
        "",
    ]
    for method, cls in configs.CONFIGS.items():
        out += [
            f"## `{method}`: {{class}}`~bnn_ppl.config.{cls.__name__}`",
            "",
            "| field | type | default |",
            "|---|---|---|",
        ]
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            if field.default is not dataclasses.MISSING:
                default = f"`{field.default!r}`"
            elif field.default_factory is not dataclasses.MISSING:
                default = f"`{field.default_factory()!r}`"
            else:
                default = "(required)"
            kind = str(field.type).replace("|", "\\|")
            out.append(f"| `{field.name}` | `{kind}` | {default.replace('|', '\\|')} |")
        out.append("")
    return "\n".join(out)


BENCH_RECORDS = ROOT / "benchmarks" / "records"
BENCH_GENERATED = DOCS / "benchmarks" / "_generated"


def _record_module():
    """``benchmarks/_record.py`` (the scripts' record helper: it reads and checks the files)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_bench_record", ROOT / "benchmarks" / "_record.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell(value) -> str:
    """A table cell: numbers as recorded (the scripts round them), with thousands separators."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return f"{value:,}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _provenance(entry: dict) -> str:
    where = "transcribed from an earlier report" if entry["source"] == "transcribed" else ""
    parts = [entry["date"][:10], f"commit `{entry['commit']}`", entry["machine"]]
    return ", ".join(parts) + (f"; {where}" if where else "")


def render_table(shown: dict) -> str:
    """One table (:func:`benchmarks._record.latest`'s value) as Markdown with its provenance."""
    keep = [i for i in range(len(shown["columns"])) if any(r[i] is not None for r in shown["rows"])]
    columns = [shown["columns"][i] for i in keep]  # a column empty in every row is left out
    rows = [[r[i] for i in keep] for r in shown["rows"]]
    used = sorted(set(shown["row_source"]))
    sources = shown["sources"]
    if len(used) > 1:  # rows of several runs: each row says which run measured it
        columns.append("run")
        rows = [r + [used.index(s) + 1] for r, s in zip(rows, shown["row_source"], strict=True)]
    numeric = [
        all(isinstance(r[i], int | float) or r[i] is None for r in rows) and bool(rows)
        for i in range(len(columns))
    ]
    out = [
        f"<!-- generated by docs/_generate.py from benchmarks/records/"
        f"{Path(shown['script']).stem}.jsonl: do not edit -->",
        "",
    ]
    if shown.get("title"):
        out += [f"**{shown['title']}**", ""]
    out += [
        "| " + " | ".join(_cell(c) for c in columns) + " |",
        "|" + "".join("---:|" if n else "---|" for n in numeric),
        *("| " + " | ".join(_cell(c) for c in r) + " |" for r in rows),
        "",
    ]
    notes = ""
    for n, s in enumerate(used, 1):
        entry = sources[s]
        label = f"Run {n}: " if len(used) > 1 else ""
        out += [f"{label}{_provenance(entry)}.", "", "```bash", entry["command"], "```", ""]
        if entry["notes"] and entry["notes"] != notes:  # the same notes once
            out += [entry["notes"], ""]
        notes = entry["notes"]
    return "\n".join(out)


def benchmark_tables() -> dict[str, str]:
    """``<script>.<table>`` -> Markdown, for the newest record of every table of every file."""
    records = _record_module()
    out = {}
    for path in sorted(BENCH_RECORDS.glob("*.jsonl")):
        for table, shown in records.latest(records.read_records(path)).items():
            out[f"{path.stem}.{table}"] = render_table(shown)
    return out


def benchmark_includes() -> list[str]:
    """Write ``benchmarks/_generated/<script>.<table>.md`` (the pages include them)."""
    tables = benchmark_tables()
    BENCH_GENERATED.mkdir(parents=True, exist_ok=True)
    for old in BENCH_GENERATED.glob("*.md"):
        if old.stem not in tables:
            old.unlink()
    for name, text in tables.items():
        _write(BENCH_GENERATED / f"{name}.md", text)
    return sorted(tables)


def gpu_records() -> str:
    """The GPU page: every table of ``benchmarks/records/gpu.jsonl``, newest rows."""
    records = _record_module()
    path = BENCH_RECORDS / "gpu.jsonl"
    out = [
        "# GPU benchmark tables",
        "",
        "<!-- generated by docs/_generate.py from benchmarks/records/gpu.jsonl: do not edit -->",
        "",
        "What `benchmarks/gpu.py --record` measured on a GPU (`bash benchmarks/gpu_device.sh` "
        "runs it on a GPU machine), one table per section; a row measured again replaces the "
        "older one. The raw JSON lines of each run are in `benchmarks/gpu_runs/`. "
        "{doc}`overview` says what each script measures.",
        "",
    ]
    titles = {
        "gradient": "Gradients",
        "hmc": "HMC step ÷ gradient",
        "vmap": "Vectorized chains",
        "profile": "Kernel profile",
    }
    for table, shown in records.latest(records.read_records(path)).items():
        out += [f"## {titles.get(table, table)}", "", render_table(shown)]
    return "\n".join(out)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    shutil.rmtree(DOCS / "api" / "generated", ignore_errors=True)  # autosummary rewrites it
    api_pages()
    write_catalogue()
    _write(DOCS / "guide" / "cli_options.md", cli_reference())
    _write(DOCS / "guide" / "configs.md", config_reference())
    benchmark_includes()
    _write(DOCS / "benchmarks" / "gpu_records.md", gpu_records())


if __name__ == "__main__":
    main()
