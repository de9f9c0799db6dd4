"""`python -m memrl.cli <command> ...` = `memrl <command> ...`."""

import sys

from memrl.cli import main

sys.exit(main())
