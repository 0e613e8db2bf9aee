"""The framework images a job of each framework and device runs in, by default: the one map
the config's ``[ml_images]`` defaults to, the Docker executor runs and ``onboard-ml`` pulls
(engine/resources/ml_images.py does the pulling).
"""

from __future__ import annotations

# Official framework images. PyTorch publishes no CPU-only image: its CUDA image runs on CPU.
# scikit-learn has no official image: the default is one built on this machine from Debian's
# packages (scripts/build_test_image.sh: offline), which onboard-ml builds nothing for and
# does not pull; [ml_images] sklearn_cpu names another (any image with python3 and sklearn).
LOCAL_SKLEARN_IMAGE = "nunet/python-sklearn:test"
LOCAL_IMAGES = frozenset({LOCAL_SKLEARN_IMAGE})
DEFAULT_ML_IMAGES: dict[str, str] = {
    "scikit-learn_cpu": LOCAL_SKLEARN_IMAGE,
    "pytorch_cpu": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    "pytorch_nvidia": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    "pytorch_amd": "rocm/pytorch:latest",
    "tensorflow_cpu": "tensorflow/tensorflow:2.17.0",
    "tensorflow_nvidia": "tensorflow/tensorflow:2.17.0-gpu",
    "tensorflow_amd": "rocm/tensorflow:latest",
}
