"""Benchmark: start-up cost of ``import bnn_ppl`` and ``bnn-ppl --help`` against ``import numpyro``.

Every candidate is a fresh interpreter (a subprocess; nothing is cached in memory between
runs, the OS file cache is warm after the first round), timed from ``subprocess.run`` to its
exit, round-robin with the order rotated every round (:func:`_timing.round_robin`):

* ``python -c pass`` - the interpreter alone (the floor every other line includes),
* ``import numpyro`` - the reference: issue #16 asks that ``import bnn_ppl`` be no slower,
* ``import bnn_ppl`` - lazy: loads none of JAX, NumPyro, ArviZ, matplotlib,
* ``bnn-ppl --help`` (the installed script) and ``python -m bnn_ppl --help``,
* ``import bnn_ppl; bp.BNN`` - the first real use, which loads JAX, NumPyro and Flax: the cost
  moved there, it did not vanish.

Ratios are of medians; ``(- python)`` subtracts the interpreter's own start-up.

Usage::

    python benchmarks/import_time.py            # 15 rounds
    python benchmarks/import_time.py --quick    # 1 round, no warm-up run: a smoke test
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import _timing

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15, help="fresh processes per candidate")
    p.add_argument("--quick", action="store_true", help="1 round, no warm-up: a smoke test")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if args.quick:
        args.rounds = 1
    return args


def candidates() -> dict[str, list[str]]:
    py = sys.executable
    script = shutil.which("bnn-ppl") or str(Path(py).with_name("bnn-ppl"))
    out = {
        "python -c pass": [py, "-c", "pass"],
        "import numpyro": [py, "-c", "import numpyro"],
        "import bnn_ppl": [py, "-c", "import bnn_ppl"],
        "bnn-ppl --help": [script, "--help"],
        "python -m bnn_ppl --help": [py, "-m", "bnn_ppl", "--help"],
        "import bnn_ppl; bp.BNN": [py, "-c", "import bnn_ppl as bp; bp.BNN"],
    }
    if not Path(script).exists():
        print(f"# {script} not found (pip install -e .): bnn-ppl --help is skipped")
        del out["bnn-ppl --help"]
    return out


def runner(command: list[str]):
    env = dict(os.environ, JAX_PLATFORMS="cpu")

    def run() -> None:
        subprocess.run(command, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)

    return run


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(_timing.machine())
    commands = candidates()
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
    verdict = "met" if med["import bnn_ppl"] <= ref else "NOT met"
    print(f"target import bnn_ppl <= import numpyro -> {verdict}")


if __name__ == "__main__":
    main()
