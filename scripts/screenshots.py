"""Screenshots of a sweep in both viewers, for results/: the MemRL page (`memrl view`) and
Inspect's log viewer (`inspect view`, on the logs `memrl export inspect` writes), each
taken with headless chromium (memrl/testing/browser.py).

    python scripts/screenshots.py SWEEP_DIR --out results/<name> [--cache FILE]

Writes into OUT: memrl_view.png (the whole page), inspect_view_logs.png (the list of every
run's epoch logs), inspect_view_log.png (one epoch's log:
its samples with score and outcome), and for one episode: inspect_view_sample_transcript.png
(every model call with its prompt and answer), inspect_view_sample_messages.png (the episode
as messages: the task with the injected memories' texts, then actions and observations) and
inspect_view_sample_metadata.png (its metadata: the memories with Q, similarity, Phase-B
score, the written memory, tokens, cost).
The page and the logs themselves go to a temporary folder (they are rebuilt from the runs
with the same commands). The inspect server listens on 127.0.0.1 only and is stopped at the
end.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=None, help="the response cache (prompts)")
    args = ap.parse_args(argv)
    from memrl.testing.browser import missing

    why = missing()
    if why:
        print(f"screenshots: {why}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memrl_shots_") as tmp:
        shoot(args, Path(tmp))
    for p in sorted(args.out.glob("*.png")):
        print(p)
    return 0


def shoot(args: argparse.Namespace, tmp: Path) -> None:
    from memrl.cli.export import main as export_main
    from memrl.testing.browser import headless_browser
    from memrl.view import write_page

    page_file = write_page([args.sweep], tmp / "sweep.html")
    logs = tmp / "inspect_logs"
    export_main(["inspect", str(args.sweep), "--out", str(logs)]
                + (["--cache", str(args.cache)] if args.cache else []))
    inspect_bin = Path(sys.executable).with_name("inspect")
    port = free_port()
    server = subprocess.Popen([str(inspect_bin), "view", "--log-dir", str(logs), "--host",
                               "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        with headless_browser() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(page_file.resolve().as_uri())
            page.wait_for_selector("#curves .main-svg")
            memrl = next((i for i, t in enumerate(page.locator("#task-run option").all_text_contents())
                          if "/ memrl /" in t), 0)
            page.select_option("#task-run", str(memrl))
            page.screenshot(path=str(args.out / "memrl_view.png"), full_page=True)

            wait_http(f"http://127.0.0.1:{port}/")
            # every log of the sweep: one per run and epoch
            page.goto(f"http://127.0.0.1:{port}/#/logs/")
            page.get_by_text("epoch01.eval", exact=False).first.wait_for(timeout=30_000)
            time.sleep(2)
            page.screenshot(path=str(args.out / "inspect_view_logs.png"))
            # the log of MemRL's last epoch: its samples (episodes)
            last = sorted(p.name for p in logs.glob("*_memrl_*epoch*.eval"))[-1]
            page.goto(f"http://127.0.0.1:{port}/#/logs/{last}")
            page.get_by_text("Samples", exact=False).first.wait_for(timeout=30_000)
            time.sleep(2)
            page.screenshot(path=str(args.out / "inspect_view_log.png"))
            # one episode: the model calls with their prompts (transcript), the episode as
            # messages (task, injected memories, actions, observations), its metadata
            page.locator("text=/look at|examine|put|find|clean|heat|cool/").nth(1).click()
            time.sleep(2)
            page.screenshot(path=str(args.out / "inspect_view_sample_transcript.png"))
            for tab, name in (("Messages", "inspect_view_sample_messages.png"),
                              ("Info", "inspect_view_sample_metadata.png")):
                found = page.get_by_role("tab", name=tab, exact=True)
                if not found.count():
                    print(f"screenshots: no {tab!r} tab in this Inspect version", file=sys.stderr)
                    continue
                found.first.click()
                time.sleep(1.5)
                page.screenshot(path=str(args.out / name))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
