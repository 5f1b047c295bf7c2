"""``python -m bnn_ppl``: the ``bnn-ppl`` command line (:mod:`bnn_ppl.cli`).

Example:
    $ python -m bnn_ppl run svi --out runs/svi
"""

import sys

from bnn_ppl.cli import main

if __name__ == "__main__":
    sys.exit(main())
