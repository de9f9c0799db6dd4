"""What LifelongAgentBench's two envs share (docs/design.md §7): the benchmark's task files
(`data`: train and validation merged into the official task set), the settings every task
env takes (`settings`), the official code's memory display (`memory_context`) and the
ground-truth policy (`oracle`). The envs are memrl_envs.lifelong_os and memrl_envs.lifelong_db.
"""
