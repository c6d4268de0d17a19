"""`python -m minimind` (and `torchrun -m minimind`) is the `minimind` command.

`python -m` puts the working directory first on the import path; it goes last instead, so that a
`.py` file of the directory a command (or a Slurm job) runs in cannot stand in for an installed
module, a plugin or a library. Modules found only there still import.
"""

import os
import sys

# `-P` (Python 3.11) already leaves it out.
if sys.path and not getattr(sys.flags, "safe_path", False) and sys.path[0] in ("", os.getcwd()):
    sys.path.append(sys.path.pop(0))

from minimind.cli import main  # noqa: E402  (after the import path is put in order)

sys.exit(main())
