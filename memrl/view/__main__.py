"""`python -m memrl.view ...` = `memrl view ...`."""

import sys

from memrl.view import main

sys.exit(main(prog="python -m memrl.view"))
