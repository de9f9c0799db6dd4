"""Replay agreement with the official code's retrieval, per benchmark (figures, not a test).

For each benchmark, MemRL with `configs/official/<bench>.yaml` and an independent reference of
the official `memory_service.py` (`memrl.testing.official_replay`) play one synthetic stream
(same tasks, same outcomes, ε = 0); printed: the share of steps at which both select the same
memories, the share with the same pool size, and the mean pool size of each. Also printed,
for contrast: the same switches with `pool_by_intent` off (Phase A over memories).
With --saturation, the paper's MemRL (k1 5, δ = the stream's 80% similarity quantile, B = 1)
on the same stream under both Phase-A tie rules: per epoch, the share of pools made only of
the task's own memories and the mean pool size.

    python scripts/replay_official.py [--tasks 60] [--epochs 10] [--seed 0] [--saturation]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from memrl.memory.memrl import MemRLSettings
from memrl.testing.official_replay import replay, saturation, synthetic_stream

ROOT = Path(__file__).resolve().parents[1]
BENCHES = ("alfworld", "bcb", "hle", "llb")


def official_memory(bench: str) -> tuple[MemRLSettings, int]:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose("config", overrides=[f"+official={bench}"])
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(cfg.memory, resolve=True)
    data.pop("_target_", None)
    return MemRLSettings.model_validate(data), int(cfg.runner.batch_size)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=60)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--saturation", action="store_true", help="also the paper mode's saturation per epoch")
    args = ap.parse_args(argv)
    stream = synthetic_stream(args.tasks, args.epochs, seed=args.seed)
    print(f"synthetic stream: {args.tasks} tasks x {args.epochs} epochs = {args.tasks * args.epochs} steps, "
          f"seed {args.seed}")
    print(f"{'benchmark':<10} {'mode':<22} {'same selection':>15} {'same pool size':>15} "
          f"{'pool (ours)':>12} {'pool (ref)':>11}")
    for bench in BENCHES:
        memory, batch = official_memory(bench)
        for label, settings in (("official switches", memory),
                                ("pool_by_intent off", memory.model_copy(update={"pool_by_intent": False}))):
            r = replay(settings, stream, batch, own_key_fallback=bench == "llb")
            print(f"{bench:<10} {label:<22} {r.agreement:>15.4f} {r.same_pool / r.steps:>15.4f} "
                  f"{r.mean_pool_ours:>12.2f} {r.mean_pool_reference:>11.2f}")
    if args.saturation:
        print("\npaper mode (k1 5, k2 3, delta auto, B 1): own-only share / mean pool per epoch")
        for ties in ("oldest", "include"):
            per = saturation(MemRLSettings(delta="auto", k1=5, k2=3, phase_a_ties=ties), stream)
            cells = "  ".join(f"{e}:{v['own_only_share'] if v['own_only_share'] is not None else float('nan'):.2f}/"
                              f"{v['mean_pool']:.1f}" for e, v in per.items())
            print(f"  ties={ties:<8} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
