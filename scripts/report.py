"""Tables and figures from run directories: python scripts/report.py RUN_OR_MULTIRUN_DIR... --out DIR

See memrl/report.py for what is written and how the statistics are computed.
"""

import sys

from memrl.report import main

if __name__ == "__main__":
    sys.exit(main())
