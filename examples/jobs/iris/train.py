"""NuNet's scikit-learn example: a decision tree on the iris data set.

Prints the accuracy, the classification report and the confusion matrix, and writes them to
outputs/ (collected as the job's results). The iris data ships inside scikit-learn: no network.
"""

import json
import os
from pathlib import Path

from sklearn.datasets import load_iris
from sklearn.metrics import accuracy_score, classification_report, confusion_matrix
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier

outputs = Path(os.environ.get("WORKSPACE", ".")) / "outputs"
outputs.mkdir(parents=True, exist_ok=True)

iris = load_iris()
x_train, x_test, y_train, y_test = train_test_split(
    iris.data, iris.target, test_size=0.3, random_state=42, stratify=iris.target
)
print(f"training a decision tree on {len(x_train)} samples, testing on {len(x_test)}")
model = DecisionTreeClassifier(random_state=42).fit(x_train, y_train)
predicted = model.predict(x_test)

accuracy = accuracy_score(y_test, predicted)
report = classification_report(y_test, predicted, target_names=iris.target_names)
matrix = confusion_matrix(y_test, predicted)
print(f"accuracy: {accuracy:.4f}")
print("classification report:")
print(report)
print("confusion matrix:")
print(matrix)

(outputs / "metrics.json").write_text(
    json.dumps(
        {
            "accuracy": accuracy,
            "confusion_matrix": matrix.tolist(),
            "classes": list(iris.target_names),
        },
        indent=2,
    )
)
(outputs / "report.txt").write_text(report)
print("results written to outputs/metrics.json and outputs/report.txt")
