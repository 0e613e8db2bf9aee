#!/usr/bin/env bash
# The distributed-training test image: nunet/python-sklearn:test plus PyTorch (CPU) from a
# local wheel, built without a container registry (none is reachable from the test machines).
#
#   scripts/build_torch_image.sh [IMAGE]      default IMAGE: nunet/python-torch:test
#
# NUNET_TORCH_WHEEL (default /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl)
# is the wheel; without it the script says so and exits 3 (the tests skip, naming the file).
# Idempotent: an image already present is kept (NUNET_REBUILD_IMAGE=1 forces a build).
#
# How: torch's import-time dependencies come from Debian packages (`apt-get download`,
# `dpkg-deb -x`, as build_test_image.sh does), but for the three too old in Debian 12
# (sympy, mpmath, typing_extensions: pure-Python wheels `pip download`ed once). The wheels are
# installed with `pip install --no-deps --no-index` in a container with no network, then
# exported and imported as one layer. Checked: `import torch.distributed`, `torch._dynamo`
# (which DDP imports) and a gloo all-reduce of world size 1.
set -euo pipefail

image="${1:-nunet/python-torch:test}"
base="${NUNET_TORCH_BASE:-nunet/python-sklearn:test}"
wheel="${NUNET_TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}"
cache="${NUNET_DEB_CACHE:-/tmp/nunet-test-image-debs}"
root_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# What torch imports at `import torch` / torch.distributed / DDP, from Debian (jinja2 needs
# markupsafe).
packages=(python3-networkx python3-jinja2 python3-markupsafe python3-filelock python3-fsspec)
# Too old in Debian 12 (sympy 1.11, torch._dynamo, which DDP imports, needs >= 1.13.3;
# typing_extensions 4.4, torch needs >= 4.10): wheels from the package index pip is
# configured with (as build_notebook_image.sh gets JupyterLab's), cached for offline rebuilds.
pip_wheels=("sympy>=1.13.3" "mpmath>=1.1,<1.4" "typing_extensions>=4.10")
wheels="${NUNET_WHEEL_CACHE:-/tmp/nunet-torch-wheels}"
python="${PYTHON:-$root_dir/.venv/bin/python}"
[[ -x "$python" ]] || python=python3

if [[ -z "${NUNET_REBUILD_IMAGE:-}" ]] && docker image inspect "$image" >/dev/null 2>&1; then
    echo "build_torch_image.sh: $image already present" >&2
    exit 0
fi
if [[ ! -f "$wheel" ]]; then
    echo "build_torch_image.sh: no torch wheel at $wheel (set NUNET_TORCH_WHEEL)" >&2
    exit 3
fi
docker image inspect "$base" >/dev/null 2>&1 || bash "$root_dir/scripts/build_test_image.sh" "$base"

mkdir -p "$cache"
(
    cd "$cache"
    missing=()
    for name in "${packages[@]}"; do
        compgen -G "${name}_*.deb" >/dev/null || missing+=("$name")
    done
    if ((${#missing[@]})); then
        apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >&2 || {
            apt-get update -q >&2
            apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >&2
        }
    fi
)

extra="$(mktemp -d /tmp/nunet-torch-image.XXXXXX)"
trap 'rm -rf "$extra"' EXIT
for name in "${packages[@]}"; do
    for deb in "$cache/${name}"_*.deb; do
        dpkg-deb -x "$deb" "$extra/root"
    done
done
mkdir -p "$wheels"
if ! compgen -G "$wheels/sympy-*.whl" >/dev/null || ! compgen -G "$wheels/typing_extensions-*.whl" >/dev/null; then
    # Pure-Python wheels, for the image's interpreter (Debian 12's Python 3.11).
    "$python" -m pip download -q --disable-pip-version-check --no-deps --dest "$wheels" \
        --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        --platform any "${pip_wheels[@]}" 2>&1 | grep -v '^WARNING: Location' >&2 || true
    compgen -G "$wheels/sympy-*.whl" >/dev/null ||
        { echo "build_torch_image.sh: pip could not download ${pip_wheels[*]}" >&2; exit 1; }
fi
mkdir -p "$extra/wheel"
cp "$wheel" "$extra/wheel/"
for name in sympy mpmath typing_extensions; do
    cp "$(ls "$wheels/${name}"-*.whl | sort -V | tail -n 1)" "$extra/wheel/"
done

run_detached() {
    local name="$1"
    shift
    docker run -d --name "$name" --network none "$@" >/dev/null
    local status
    status="$(docker wait "$name")"
    [[ "$status" == 0 ]] || docker logs "$name" >&2 || true
    return "$status"
}
changes=(--change 'CMD ["python3"]' --change 'WORKDIR /workspace' --change 'ENV PYTHONUNBUFFERED=1')
builder="nunet-torch-build-$$"
trap 'rm -rf "$extra"; docker rm -f "$builder" >/dev/null 2>&1 || true' EXIT
# No shell in the base image: the steps in Python.
run_detached "$builder" -v "$extra:/extra:ro" "$base" python3 -c '
import glob, shutil, subprocess, sys
shutil.copytree("/extra/root", "/", dirs_exist_ok=True, symlinks=True)
subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
    "--no-compile", "--break-system-packages", "--root-user-action=ignore",
    *glob.glob("/extra/wheel/*.whl")], check=True)
subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0",
    "/usr/lib/python3/dist-packages", "/usr/local/lib/python3.11/dist-packages"],
    stdout=subprocess.DEVNULL)
'
docker export "$builder" | docker import "${changes[@]}" - "$image" >/dev/null
docker rm -f "$builder" >/dev/null

checker="nunet-torch-check-$$"
checked=0
run_detached "$checker" "$image" python3 -c '
import os, torch, torch.distributed as dist, torch._dynamo
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
dist.init_process_group("gloo", rank=0, world_size=1)
t = torch.ones(3)
dist.all_reduce(t)
assert t.tolist() == [1.0, 1.0, 1.0], t
dist.destroy_process_group()
' || checked=$?
docker rm -f "$checker" >/dev/null
((checked == 0)) ||
    { echo "build_torch_image.sh: $image was built but torch.distributed (gloo) does not work" >&2; exit 1; }
echo "build_torch_image.sh: built $image" >&2
