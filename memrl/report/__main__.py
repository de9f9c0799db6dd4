"""`python -m memrl.report ...` = `memrl report ...` (memrl/cli/report.py)."""

import sys

from memrl.cli.report import main

sys.exit(main(prog="python -m memrl.report"))
