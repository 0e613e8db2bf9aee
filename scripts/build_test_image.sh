#!/usr/bin/env bash
# The jobs' test image, built from Debian packages without any registry (none is reachable
# from the test machines): python3, numpy, scikit-learn (what the iris example needs) and pip
# (the executor's dependency-install step).
#
#   scripts/build_test_image.sh [IMAGE]     default IMAGE: nunet/python-sklearn:test
#
# Uses DOCKER_HOST when set (scripts/dockerd.sh start prints it). Idempotent: an image already
# present is kept (NUNET_REBUILD_IMAGE=1 forces a build). ~5 s with the .debs cached.
#
# How: `apt-get download` the packages and their dependencies, `dpkg-deb -x` them into a
# folder, redo by hand what the skipped maintainer scripts would have done (usr-merge links,
# the BLAS/LAPACK alternatives), then `tar | docker import`.
set -euo pipefail

image="${1:-nunet/python-sklearn:test}"
packages=(python3 python3-numpy python3-sklearn python3-pip)
cache="${NUNET_DEB_CACHE:-/tmp/nunet-test-image-debs}"

if [[ -z "${NUNET_REBUILD_IMAGE:-}" ]] && docker image inspect "$image" >/dev/null 2>&1; then
    echo "build_test_image.sh: $image already present" >&2
    exit 0
fi

# What apt would install on an empty system (first alternative of each "A | B"), then minus
# the build tool chain: scipy's Depends on pythran drags in gcc, clang and -dev packages
# (~2.5 GB) that nothing imports at run time.
resolve() {
    apt-get -s -o Dir::State::status=/dev/null install --no-install-recommends "$@" 2>/dev/null |
        awk '/^Inst /{print $2}' | sort -u
}
build_only='(-dev$|^gcc|^g\+\+|^cpp|^binutils|^libbinutils|^libctf|^libgprofng|^libjansson|^libisl|'
build_only+='^libmpc|^libmpfr|^libcc1|^lib(a|t|l|ub)san|^libboost|pythran|beniget|gast|^python3-ply$|'
build_only+='^python3-all|^linux-libc|^libc-dev-bin|^rpcsvc|^perl|^libperl|^lib(file-find-rule|'
build_only+='number-compare|text-glob)-perl|^libjs-|^dpkg$|^debconf$|^init-system-helpers$|'
build_only+='^usrmerge$|^procps$|^libproc2)'

mkdir -p "$cache"
names="$(resolve "${packages[@]}")"
if [[ -z "$names" ]]; then
    apt-get update -q >&2
    names="$(resolve "${packages[@]}")"
fi
[[ -n "$names" ]] || { echo "build_test_image.sh: apt cannot resolve ${packages[*]}" >&2; exit 1; }
names="$(grep -Ev "$build_only" <<<"$names")"

(
    cd "$cache"
    # Download only what is not cached yet (one .deb per package name).
    missing=()
    for name in $names; do
        compgen -G "${name}_*.deb" >/dev/null || missing+=("$name")
    done
    if ((${#missing[@]})); then
        # As root, apt drops to the _apt user, which cannot write here: download as ourselves.
        apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >&2 || {
            apt-get update -q >&2
            apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >&2
        }
    fi
)

root="$(mktemp -d /tmp/nunet-test-image.XXXXXX)"
trap 'rm -rf "$root"' EXIT
# usr-merge first: bookworm's packages put files in both /lib and /usr/lib.
mkdir -p "$root/usr/bin" "$root/usr/lib" "$root/usr/lib64" "$root/usr/sbin"
for d in bin lib lib64 sbin; do ln -s "usr/$d" "$root/$d"; done
for name in $names; do
    for deb in "$cache/${name}"_*.deb; do
        dpkg-deb -x "$deb" "$root"
    done
done

arch_dir="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
lib="$root/usr/lib/$arch_dir"
# update-alternatives would have pointed these at the reference BLAS/LAPACK or OpenBLAS.
for so in libblas.so.3 liblapack.so.3; do
    if [[ ! -e "$lib/$so" ]]; then
        found="$(cd "$lib" && find . -path "*/$so" | sort | head -n 1)"
        [[ -n "$found" ]] && ln -sf "${found#./}" "$lib/$so"
    fi
done
# python3 is a link made by the python3 package itself, but check it: nothing works without.
[[ -e "$root/usr/bin/python3" ]] || ln -s "$(cd "$root/usr/bin" && ls python3.* | head -n 1)" "$root/usr/bin/python3"
mkdir -p "$root/tmp" "$root/workspace" "$root/etc" "$root/proc" "$root/sys" "$root/dev"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"

staging="$image-staging"
changes=(--change 'CMD ["python3"]' --change 'WORKDIR /workspace' --change 'ENV PYTHONUNBUFFERED=1')
tar -C "$root" -c . | docker import "${changes[@]}" - "$staging" >/dev/null
# The skipped postinst scripts would also have byte-compiled the modules: without .pyc files
# (and with the read-only root jobs get) importing scikit-learn takes ~7 s instead of ~1 s.
# Detached, then waited for: Podman's Docker-compatible API refuses the docker CLI's attach
# ("unable to upgrade to tcp, received 409"), and this works on both engines.
run_detached() {
    local name="$1"
    shift
    docker run -d --name "$name" --network none "$@" >/dev/null
    local status
    status="$(docker wait "$name")"
    [[ "$status" == 0 ]] || docker logs "$name" >&2 || true
    return "$status"
}
builder="nunet-build-$$"
run_detached "$builder" "$staging" \
    python3 -m compileall -q -j 0 /usr/lib/python3/dist-packages /usr/lib/python3.11 || true
# export | import rather than commit: Podman's compatible API fails the CLI's commit
# ("Decode(): EOF"); the image is one layer either way.
docker export "$builder" | docker import "${changes[@]}" - "$image" >/dev/null
docker rm -f "$builder" >/dev/null
docker rmi "$staging" >/dev/null
checker="nunet-check-$$"
checked=0
run_detached "$checker" "$image" python3 -c 'import sklearn, numpy' || checked=$?
docker rm -f "$checker" >/dev/null
((checked == 0)) ||
    { echo "build_test_image.sh: $image was built but cannot import scikit-learn" >&2; exit 1; }
echo "build_test_image.sh: built $image" >&2
