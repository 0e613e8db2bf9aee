#!/usr/bin/env bash
# The notebook test image: the jobs' test image (scripts/build_test_image.sh) plus JupyterLab.
#
#   scripts/build_notebook_image.sh [IMAGE]     default IMAGE: nunet/jupyterlab:test
#
# JupyterLab is not a Debian package, so its wheels come from the package index this machine's
# pip is configured with (the same one the venv was installed from: pip.conf, PIP_* variables),
# downloaded here with `pip download` for the image's Python (3.11, manylinux x86_64, wheels
# only), then installed inside a container that has no network (`--network none`) from those
# files alone (`--no-index`). Nothing is downloaded at test time: the tests call this script,
# which keeps an image already present (NUNET_REBUILD_IMAGE=1 forces a build). The wheels are
# cached in NUNET_WHEEL_CACHE (default /tmp/nunet-notebook-wheels): a rebuild is offline.
set -euo pipefail

image="${1:-nunet/jupyterlab:test}"
base="${NUNET_NOTEBOOK_BASE:-nunet/python-sklearn:test}"
wheels="${NUNET_WHEEL_CACHE:-/tmp/nunet-notebook-wheels}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-$here/../.venv/bin/python}"
[[ -x "$python" ]] || python=python3

if [[ -z "${NUNET_REBUILD_IMAGE:-}" ]] && docker image inspect "$image" >/dev/null 2>&1; then
    echo "build_notebook_image.sh: $image already present" >&2
    exit 0
fi
bash "$here/build_test_image.sh" "$base"

mkdir -p "$wheels"
if ! compgen -G "$wheels/jupyterlab-*.whl" >/dev/null; then
    # The image's interpreter, not ours: Debian 12's Python 3.11 on glibc 2.36.
    "$python" -m pip download -q --disable-pip-version-check --dest "$wheels" \
        --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform linux_x86_64 --platform any \
        jupyterlab 2>&1 | grep -v '^WARNING: Location' >&2 || true
    compgen -G "$wheels/jupyterlab-*.whl" >/dev/null ||
        { echo "build_notebook_image.sh: pip could not download jupyterlab" >&2; exit 1; }
fi

builder="nunet-notebook-build-$$"
trap 'docker rm -f "$builder" >/dev/null 2>&1 || true' EXIT
# The image has no shell: Python runs the steps.
steps='import shutil, subprocess as s, sys
pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", "/wheels",
       "--break-system-packages", "--no-warn-script-location", "--disable-pip-version-check"]
s.run(pip + ["jupyterlab"], check=True)
shutil.rmtree("/wheels")
shutil.rmtree("/root/.cache", ignore_errors=True)
s.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "/usr/local/lib/python3.11/dist-packages"],
      stdout=s.DEVNULL)
s.run([sys.executable, "-m", "jupyterlab", "--version"], check=True)'
docker create --name "$builder" --network none --user 0:0 "$base" python3 -c "$steps" >/dev/null
docker cp "$wheels" "$builder:/wheels"
docker start -a "$builder" >&2
docker commit --change 'CMD ["python3"]' "$builder" "$image" >/dev/null
docker run --rm --network none "$image" python3 -c 'import jupyterlab, jupyter_server, sklearn' ||
    { echo "build_notebook_image.sh: $image was built but cannot import jupyterlab" >&2; exit 1; }
echo "build_notebook_image.sh: built $image" >&2
