"""``python -m bnn_ppl.cli``: the ``bnn-ppl`` command line, as ``python -m bnn_ppl``.

Example:
    $ python -m bnn_ppl.cli evaluate runs/svi
"""

import sys

from bnn_ppl.cli import main

if __name__ == "__main__":
    sys.exit(main())
