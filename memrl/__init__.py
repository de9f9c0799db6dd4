"""memrl: the MemRL method, its runner and its tools (the benchmarks are memrl_envs, the
baselines memrl_baselines; docs/design.md is the map)."""

from memrl.config.frame import register_sections as _register_sections
from memrl.core.cachedir import register_config_resolvers as _register_config_resolvers

# configs/ resolve `${memrl.cache_dir:}` wherever memrl is imported (a run, a test, a script
# that composes the config), so there is one place that says where caches live; and compose
# into open sections (memrl.config.frame), so any schema key is overridden without a `+`
_register_config_resolvers()
_register_sections()
