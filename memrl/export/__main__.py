"""`python -m memrl.export ...` = `memrl export ...`."""

import sys

from memrl.export import main

sys.exit(main(prog="python -m memrl.export"))
