"""Benchmark: start-up cost of ``import bnn_ppl`` and ``bnn-ppl --help`` against ``import numpyro``.

Every candidate is a fresh interpreter (a subprocess; nothing is cached in memory between
runs, the OS file cache is warm after the first round), timed from ``subprocess.run`` to its
exit, round-robin with the order rotated every round (:func:`_timing.round_robin`):

* ``python -c pass`` - the interpreter alone (the floor every other line includes),
* ``import numpyro`` - the reference: issue #16 asks that ``import bnn_ppl`` be no slower,
* ``import bnn_ppl`` - lazy: loads none of JAX, NumPyro, ArviZ, matplotlib,
* ``bnn-ppl --help`` (the installed script) and ``python -m bnn_ppl --help``, which do not
  import the option parser (tyro),
* ``bnn-ppl run hmc --help``, which does (tyro reads the config dataclasses), and
  ``import tyro`` alone,
* ``import bnn_ppl; bp.BNN`` - the first real use, which loads JAX, NumPyro and Flax: the cost
  moved there, it did not vanish.

Ratios are of medians; ``(- python)`` subtracts the interpreter's own start-up.

``--baseline DIR`` adds ``import bnn_ppl``, ``bnn-ppl --help`` and ``bnn-ppl run --help`` of
another version of the package, interleaved with the others (a fair before/after on a busy
machine): ``DIR`` holds its ``bnn_ppl/`` folder (``git archive <commit> bnn_ppl | tar -x -C
DIR``) and goes first on ``PYTHONPATH``. Only the core package is taken from ``DIR``;
``bnn_ppl.models`` and ``bnn_ppl.inference`` would still come from this checkout.

Usage::

    python benchmarks/import_time.py            # 15 rounds
    python benchmarks/import_time.py --quick    # 1 round, no warm-up run: a smoke test
    python benchmarks/import_time.py --baseline /tmp/before   # also time an older version
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import _record
import _timing

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15, help="fresh processes per candidate")
    p.add_argument("--quick", action="store_true", help="1 round, no warm-up: a smoke test")
    p.add_argument("--baseline", metavar="DIR", help="also time the bnn_ppl/ folder in DIR")
    _record.add_flag(p)
    args = p.parse_args(argv)
    if args.baseline is not None and not (Path(args.baseline) / "bnn_ppl").is_dir():
        p.error(f"--baseline {args.baseline}: no bnn_ppl/ folder there")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if args.quick:
        args.rounds = 1
    return args


Command = tuple[list[str], str | None]
"""A command line and the baseline folder it runs with (None: this checkout)."""


def candidates(baseline: str | None) -> dict[str, Command]:
    py = sys.executable
    script = shutil.which("bnn-ppl") or str(Path(py).with_name("bnn-ppl"))
    out: dict[str, Command] = {
        "python -c pass": ([py, "-c", "pass"], None),
        "import numpyro": ([py, "-c", "import numpyro"], None),
        "import bnn_ppl": ([py, "-c", "import bnn_ppl"], None),
        "bnn-ppl --help": ([script, "--help"], None),
        "python -m bnn_ppl --help": ([py, "-m", "bnn_ppl", "--help"], None),
        "bnn-ppl run hmc --help": ([script, "run", "hmc", "--help"], None),
        "import tyro": ([py, "-c", "import tyro"], None),
        "import bnn_ppl; bp.BNN": ([py, "-c", "import bnn_ppl as bp; bp.BNN"], None),
    }
    if baseline is not None:
        out["import bnn_ppl [baseline]"] = ([py, "-c", "import bnn_ppl"], baseline)
        out["bnn-ppl --help [baseline]"] = ([script, "--help"], baseline)
        # the baseline's run options, for the same purpose: before issue 16's typed CLI, all
        # methods' options on one `bnn-ppl run --help`
        out["bnn-ppl run --help [baseline]"] = ([script, "run", "--help"], baseline)
    if not Path(script).exists():
        print(f"# {script} not found (pip install -e .): bnn-ppl --help is skipped")
        out = {k: v for k, v in out.items() if not k.startswith("bnn-ppl ")}
    return out


def runner(command: Command):
    argv, baseline = command
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if baseline is not None:  # its bnn_ppl/ first on the path (and as the working directory)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [baseline, env.get("PYTHONPATH")]))

    def run() -> None:
        subprocess.run(argv, check=True, env=env, cwd=baseline or ROOT, stdout=subprocess.DEVNULL)

    return run


def check_baseline(baseline: str) -> None:
    """Fail unless ``import bnn_ppl`` with ``baseline`` finds the baseline's copy."""
    code = "import bnn_ppl; print(bnn_ppl.__file__)"
    env = dict(os.environ, PYTHONPATH=baseline, JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        env=env,
        cwd=baseline,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(Path(baseline).resolve()):
        raise SystemExit(f"--baseline {baseline}: import bnn_ppl found {out} instead")
    print(f"# baseline: {Path(out).parent}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(_timing.machine())
    if args.baseline is not None:
        check_baseline(args.baseline)
    commands = candidates(args.baseline)
    if not args.quick:
        for fn in map(runner, commands.values()):
            fn()  # once each, untimed: the OS file cache is warm for every candidate
    jobs = {name: (runner(cmd), 1) for name, cmd in commands.items()}
    times = _timing.round_robin(jobs, rounds=args.rounds)
    print(f"## fresh processes, {args.rounds} rounds (ms per process)")
    med = _timing.print_table(times, "command")
    base = med["python -c pass"]
    ref = med["import numpyro"]
    print("ratios to import numpyro (median; '- python' subtracts python -c pass):")
    for name in commands:
        if name in ("python -c pass", "import numpyro"):
            continue
        net = (med[name] - base) / (ref - base)
        print(f"  {name:<28} {med[name] / ref:6.3f}   (- python) {net:6.3f}")
    if args.baseline is not None:
        print("this checkout / baseline (median; '- python' subtracts python -c pass):")
        pairs = {
            "import bnn_ppl": "import bnn_ppl [baseline]",
            "bnn-ppl --help": "bnn-ppl --help [baseline]",
            "bnn-ppl run hmc --help": "bnn-ppl run --help [baseline]",
        }
        for name, old in pairs.items():
            if name in med and old in med:
                now, then = med[name], med[old]
                net = (now - base) / (then - base)
                print(f"  {name:<28} {now / then:6.3f}   (- python) {net:6.3f}")
    verdict = "met" if med["import bnn_ppl"] <= ref else "NOT met"
    print(f"target import bnn_ppl <= import numpyro -> {verdict}")
    if args.record:
        rows = []
        for name in commands:
            s = _timing.summary(times[name])
            rows.append(
                [name, round(s["median"], 1), round(s["min"], 1), round(med[name] / ref, 3)]
                + [round((med[name] - base) / (ref - base), 3)]
            )
        columns = ["candidate", "median (ms)", "min (ms)", "÷ import numpyro"]
        _record.record(
            "startup",
            [*columns, "(− python) ÷ import numpyro"],
            rows,
            title=f"Fresh processes, {args.rounds} rounds",
            notes="(− python) subtracts the interpreter's own start-up (`python -c pass`).",
            to=args.record,
        )


if __name__ == "__main__":
    main()
