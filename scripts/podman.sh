#!/usr/bin/env bash
# A private Podman API service (Docker-compatible) for running the container tests on Podman.
#
#   scripts/podman.sh start [--rootless]   installs podman when missing (root, apt), starts
#                                          `podman system service` on its own socket and prints
#                                          DOCKER_HOST=unix://... (the only line on stdout)
#   scripts/podman.sh stop [--rootless]    stops it
#   scripts/podman.sh status [--rootless]  prints DOCKER_HOST=... and exits 0 when it answers
#
# --rootless runs the service as the unprivileged user NUNET_PODMAN_USER (default nunetpod,
# created with subordinate ids when missing): containers then run in that user's namespace,
# as on a rig that has no root daemon. Then:
#
#   export "$(bash scripts/podman.sh start)"
#   bash scripts/build_test_image.sh
#   .venv/bin/python -m pytest -m docker
#
# NUNET_PODMAN_DIR (default /tmp/nunet-podman[-rootless]) holds the socket, the pid, the log and
# a containers.conf: Podman raises the containers' open-file and process limits past what a
# container sandbox like this one allows ("error setting rlimit type 7"), so they are pinned.
set -euo pipefail

action="${1:-start}"
rootless=""
[[ "${2:-}" == "--rootless" ]] && rootless=1
user="${NUNET_PODMAN_USER:-nunetpod}"
dir="${NUNET_PODMAN_DIR:-/tmp/nunet-podman${rootless:+-rootless}}"
sock="$dir/podman.sock"
pidfile="$dir/podman.pid"
log="$dir/podman.log"
conf="$dir/containers.conf"
host="unix://$sock"

ping() {
    curl -fsS --max-time 2 --unix-socket "$sock" http://localhost/_ping >/dev/null 2>&1
}

as_service_user() {
    if [[ -n "$rootless" ]]; then
        su "$user" -s /bin/bash -c "$1"
    else
        bash -c "$1"
    fi
}

install_podman() {
    command -v podman >/dev/null 2>&1 && return 0
    [[ "$(id -u)" == 0 ]] || { echo "podman.sh: podman is missing (apt-get install podman)" >&2; return 1; }
    echo "podman.sh: installing podman ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman >&2 ||
        { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman >&2; }
}

make_user() {
    id "$user" >/dev/null 2>&1 || useradd --create-home --shell /usr/sbin/nologin "$user"
    # Rootless containers map their ids onto these ranges (useradd adds them on Debian).
    grep -q "^$user:" /etc/subuid || usermod --add-subuids 200000-265535 "$user"
    grep -q "^$user:" /etc/subgid || usermod --add-subgids 200000-265535 "$user"
}

start() {
    if ping; then
        echo "DOCKER_HOST=$host"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || { echo "podman.sh: start needs root (it may install podman)" >&2; return 1; }
    install_podman
    mkdir -p "$dir"
    if [[ -n "$rootless" ]]; then
        make_user
        chown "$user" "$dir"
    fi
    printf '[containers]\ndefault_ulimits = ["nofile=10000:10000", "nproc=10000:10000"]\n' >"$conf"
    rm -f "$sock"
    as_service_user "CONTAINERS_CONF='$conf' setsid podman system service --time=0 '$host' \
        >'$log' 2>&1 </dev/null & echo \$! >'$pidfile'"
    for _ in $(seq 1 150); do
        if ping; then
            echo "DOCKER_HOST=$host"
            return 0
        fi
        sleep 0.2
    done
    echo "podman.sh: podman did not answer /_ping within 30 s; last lines of $log:" >&2
    tail -n 20 "$log" >&2
    return 1
}

stop() {
    if [[ -f "$pidfile" ]]; then
        kill "$(cat "$pidfile")" 2>/dev/null || true
    fi
    rm -f "$sock" "$pidfile"
    echo "podman.sh: stopped" >&2
}

case "$action" in
start) start ;;
stop) stop ;;
status)
    if ping; then
        echo "DOCKER_HOST=$host"
    else
        exit 1
    fi
    ;;
*)
    echo "usage: $0 start|stop|status [--rootless]" >&2
    exit 2
    ;;
esac
