"""Tables and figures from run directories: python scripts/report.py RUN_OR_MULTIRUN_DIR... --out DIR

The same as `memrl report ...`; see memrl/report/ for what is written and how the statistics
are computed.
"""

import sys

from memrl.cli.report import main

if __name__ == "__main__":
    sys.exit(main(prog="python scripts/report.py"))
