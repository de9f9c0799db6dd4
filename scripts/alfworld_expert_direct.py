#!/usr/bin/env python
"""Play ALFWorld's handcoded expert over a whole split through ALFWorld's own API.

This is the reference the project's adapter is checked against: it uses nothing of the
project, only ``AlfredTWEnv`` + ``init_env`` and a reset/step loop, and prints
``{"n_games", "wins", "success_rate"}`` as JSON (``--per-game`` adds each game's outcome).

The handcoded expert draws from Python's global ``random``; each game seeds it after
reset with the seed the project's runner gives that game's episode in epoch 1
(``memrl.core.seeding.derive_seed(seed, 1, task_id)``, task id = trial folder relative to the
split folder; the only project code used here), so this run and
``python -m memrl.cli run agent=expert memory=none runner.epochs=1 seed=<seed> ...`` must agree
game by game. ``--per-game`` lists the outcomes to compare.

    ALFWORLD_DATA=../shared/data/alfworld python scripts/alfworld_expert_direct.py --split valid_seen
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time

from memrl.core.seeding import derive_seed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", default=os.environ.get("ALFWORLD_DATA"), help="ALFWorld data folder")
    p.add_argument("--split", default="valid_seen", help="json_2.1.1 subfolder (valid_seen, valid_train, ...)")
    p.add_argument("--max-steps", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-game", action="store_true", help="include each game's outcome")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.data_root:
        sys.exit("set ALFWORLD_DATA or pass --data-root")
    data_root = os.path.abspath(args.data_root)
    os.environ["ALFWORLD_DATA"] = data_root
    split_dir = os.path.join(data_root, "json_2.1.1", args.split)
    if not os.path.isdir(split_dir):
        sys.exit(f"no split folder {split_dir}")

    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {
        "dataset": {
            "data_path": split_dir,
            "eval_id_data_path": split_dir,
            "eval_ood_data_path": split_dir,
            "num_train_games": -1,
            "num_eval_games": -1,
        },
        "logic": {
            "domain": os.path.join(data_root, "logic", "alfred.pddl"),
            "grammar": os.path.join(data_root, "logic", "alfred.twl2"),
        },
        "env": {
            "type": "AlfredTWEnv",
            "task_types": [1, 2, 3, 4, 5, 6],
            "expert_type": "handcoded",
            "goal_desc_human_anns_prob": 0.0,
            "domain_randomization": False,
        },
        "general": {"training_method": "dagger", "random_seed": args.seed},
        "dagger": {"training": {"max_nb_steps_per_episode": args.max_steps}},
    }
    # "train" mode is the one in which AlfredTWEnv attaches the expert plan to infos.
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the JSON result
        tw_env = AlfredTWEnv(config, train_eval="train")
        n_games = tw_env.num_games
        env = tw_env.init_env(batch_size=1)

    outcomes: dict[str, bool] = {}
    steps: dict[str, int] = {}
    start = time.time()
    for _ in range(n_games):  # one pass of the env's (shuffled) cycle = every game once
        obs, infos = env.reset()
        game_file = infos["extra.gamefile"][0]
        task_id = os.path.relpath(os.path.dirname(game_file), split_dir).replace(os.sep, "/")
        if task_id in outcomes:
            sys.exit(f"game played twice: {task_id}")
        random.seed(derive_seed(args.seed, 1, task_id))
        done, won, n = False, False, 0
        while not done:
            action = infos["extra.expert_plan"][0][0]
            obs, scores, dones, infos = env.step([action])
            done, won, n = dones[0], bool(infos["won"][0]), n + 1
        outcomes[task_id] = won
        steps[task_id] = n
    elapsed = time.time() - start
    env.close()

    wins = sum(outcomes.values())
    result: dict[str, object] = {
        "n_games": len(outcomes),
        "wins": wins,
        "success_rate": wins / len(outcomes) if outcomes else 0.0,
        "seconds_per_game": round(elapsed / max(len(outcomes), 1), 3),
    }
    if args.per_game:
        result["games"] = {k: {"won": outcomes[k], "steps": steps[k]} for k in sorted(outcomes)}
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
