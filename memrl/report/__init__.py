"""Tables, figures and statistics across run directories (the paper's Table 1/2, Fig. 5-7).

One module per job:

- `inputs`    which paths and runs are read, refused, or marked (`--include-unfinished`, `--mixed`);
- `runs`      reading run directories (complete epochs only; the digest of their episodes);
- `replicates` runs whose episodes repeat another seed's: one replicate, not two;
- `grouping`  runs -> groups (mode, benchmark, method, params; distinct seeds within a group),
              short unique labels;
- `stats`     Student-t intervals, the paired bootstrap, McNemar's test;
- `intervals` which interval each number carries (t over replicates, Wilson over tasks);
- `tables`    Table 1, SR per epoch, the comparisons with MemRL, Table 2 (CSV and Markdown);
- `latex`     the tables as booktabs LaTeX;
- `series`    the numbers behind the figures (curves, parameter sweeps, top-k grid, Q views);
- `figures`   the figures themselves;
- `readings`  readings.md: the forgetting reading in use, and what retrieval pools held per epoch;
- `build`     `write_report`, which writes all of them into one folder.

Command line: ``memrl report RUN_OR_MULTIRUN_DIR... --out DIR`` (also
``python -m memrl.cli report`` and ``python scripts/report.py``; memrl/cli/report.py).
"""

from memrl.report.grouping import Group, group_runs, swept_keys
from memrl.report.inputs import Refused
from memrl.report.runs import Run, find_runs, load_run
from memrl.report.series import injected_q_by_epoch
from memrl.report.stats import mcnemar, paired_bootstrap, t_interval
from memrl.report.tables import eval_sr_curve
from memrl.report.write import write_report

__all__ = ["Group", "Refused", "Run", "write_report", "eval_sr_curve", "find_runs", "group_runs",
           "injected_q_by_epoch", "load_run", "mcnemar", "paired_bootstrap", "swept_keys",
           "t_interval"]
