"""A hyperparameter sweep in three steps (examples/jobs/sweep.toml): ``prepare`` splits a
data set once, each replica of ``sweep`` trains with the hyperparameter its REPLICA_INDEX
picks, ``pick`` keeps the best. All three share the job's workspace; only numpy and
scikit-learn are needed (the data ships inside scikit-learn: no network).

    python3 sweep.py prepare   # outputs/data.npz
    python3 sweep.py           # REPLICA_INDEX=i: outputs/sweep/i.json
    python3 sweep.py pick      # outputs/best.json
"""

import json
import os
import sys
from pathlib import Path

import numpy as np

outputs = Path(os.environ.get("WORKSPACE", ".")) / "outputs"
# One value a replica: REPLICAS = len(DEPTHS) tries them all at once.
DEPTHS = (1, 2, 3, 5, 8, None)


def prepare() -> None:
    from sklearn.datasets import load_wine
    from sklearn.model_selection import train_test_split

    data = load_wine()
    x_train, x_test, y_train, y_test = train_test_split(
        data.data, data.target, test_size=0.3, random_state=0, stratify=data.target
    )
    outputs.mkdir(parents=True, exist_ok=True)
    np.savez(outputs / "data.npz", x_train=x_train, x_test=x_test, y_train=y_train, y_test=y_test)
    print(f"prepared {len(x_train)} training and {len(x_test)} test samples")


def train() -> None:
    from sklearn.ensemble import RandomForestClassifier

    index, replicas = int(os.environ["REPLICA_INDEX"]), int(os.environ["REPLICAS"])
    depth = DEPTHS[index % len(DEPTHS)]
    data = np.load(outputs / "data.npz")
    model = RandomForestClassifier(n_estimators=50, max_depth=depth, random_state=0)
    model.fit(data["x_train"], data["y_train"])
    accuracy = float(model.score(data["x_test"], data["y_test"]))
    print(f"replica {index + 1}/{replicas}: max_depth={depth} accuracy={accuracy:.4f}")
    folder = outputs / "sweep"
    folder.mkdir(exist_ok=True)
    (folder / f"{index}.json").write_text(json.dumps({"max_depth": depth, "accuracy": accuracy}))


def pick() -> None:
    tried = [json.loads(p.read_text()) for p in sorted((outputs / "sweep").glob("*.json"))]
    best = max(tried, key=lambda t: t["accuracy"])
    for t in tried:
        print(f"max_depth={t['max_depth']}: {t['accuracy']:.4f}")
    print(f"best: max_depth={best['max_depth']} ({best['accuracy']:.4f} on the test set)")
    (outputs / "best.json").write_text(json.dumps({"tried": tried, "best": best}, indent=2))


if __name__ == "__main__":
    {"prepare": prepare, "pick": pick}.get(sys.argv[1] if len(sys.argv) > 1 else "", train)()
