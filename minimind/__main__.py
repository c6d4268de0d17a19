"""`python -m minimind` (and `torchrun -m minimind`) is the `minimind` command."""

import sys

from minimind.cli import main

sys.exit(main())
