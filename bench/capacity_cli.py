"""Wall time of `nunet-tui capacity --json` (goal < 0.5 s), against bare interpreter start."""

from __future__ import annotations

import subprocess
import time

from _common import PYTHON, REPO, cli, fresh_home, summary


def timed(argv: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, cwd=REPO)
    return time.perf_counter() - began


def main() -> None:
    home = fresh_home()
    cli(home, "peer", "self")  # first start makes the identity and database: not measured
    runs = 15
    baseline = [timed([PYTHON, "-c", "pass"]) for _ in range(runs)]
    samples = [
        timed([PYTHON, "-m", "nunet_tui", "--home", str(home), "capacity", "--json"])
        for _ in range(runs)
    ]
    print(summary("python -c pass (baseline)", baseline))
    print(summary("nunet-tui capacity --json", samples, goal=0.5))
    ratio = sorted(samples)[runs // 2] / sorted(baseline)[runs // 2]
    print(f"ratio to bare interpreter start: {ratio:.1f}x")


if __name__ == "__main__":
    main()
