"""`python -m veriloop.cli ...`: the `veriloop` console script without needing it on PATH."""

import sys

from veriloop.cli import main

sys.exit(main())
