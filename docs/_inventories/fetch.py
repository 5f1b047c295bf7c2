"""Store the intersphinx inventories of the libraries bnn_ppl links to, for builds without network.

Run once with network access: ``python docs/_inventories/fetch.py``. Each library's
``objects.inv`` (the URLs of ``docs/conf.py``'s ``_INVENTORIES``) is written next to this file
as ``<name>.inv``; ``docs/conf.py`` uses an inventory only when its file exists here.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import urllib.request
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _inventories() -> dict[str, str]:
    text = (HERE.parent / "conf.py").read_text()
    start = text.index("_INVENTORIES = {")
    end = text.index("}\n", start) + 1
    namespace: dict = {}
    exec(text[start:end], namespace)  # the literal dict only: conf.py itself runs the generator
    return namespace["_INVENTORIES"]


def check(data: bytes, url: str) -> None:
    """Refuse anything that is not a Sphinx version-2 inventory (a login page, an HTML error)."""
    header, _, rest = data.partition(b"\n")
    if header != b"# Sphinx inventory version 2":
        raise SystemExit(f"{url}: not a Sphinx inventory (first line {header[:60]!r})")
    for _ in range(3):  # project, version, the compression note
        _, _, rest = rest.partition(b"\n")
    zlib.decompress(rest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="libraries to fetch (default: all)")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    urls = _inventories()
    unknown = sorted(set(args.names) - set(urls))
    if unknown:
        parser.error(f"unknown inventories {unknown}; known: {sorted(urls)}")
    for name in args.names or sorted(urls):
        url = urls[name].rstrip("/") + "/objects.inv"
        with urllib.request.urlopen(url, timeout=args.timeout) as response:
            data = response.read()
        check(data, url)
        target = HERE / f"{name}.inv"
        fd, tmp = tempfile.mkstemp(dir=HERE, prefix=f".{name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
        print(f"{target.relative_to(HERE.parent.parent)}: {len(data):,} bytes from {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
