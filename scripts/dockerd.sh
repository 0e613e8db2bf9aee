#!/usr/bin/env bash
# A private Docker engine for tests and CI, on machines that only have the docker CLI.
#
#   scripts/dockerd.sh start   installs docker.io when dockerd is missing (root, apt), starts a
#                              dockerd with its own data root and socket, waits for /_ping and
#                              prints DOCKER_HOST=unix://... (the only line on stdout)
#   scripts/dockerd.sh stop    stops it and unmounts what it left behind
#   scripts/dockerd.sh status  prints DOCKER_HOST=... and exits 0 when it answers, 1 otherwise
#
# NUNET_DOCKERD_DIR (default /tmp/nunet-dockerd) holds the data root, socket, pid and log.
# The exec root lives under /run (short path: containerd's socket paths must fit 108 bytes).
# No iptables, no bridge: containers get network_mode none or host, as the tests use them.
set -euo pipefail

dir="${NUNET_DOCKERD_DIR:-/tmp/nunet-dockerd}"
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"
log="$dir/dockerd.log"
exec_root="/run/nunet-dockerd-$(printf '%s' "$dir" | cksum | cut -d' ' -f1)"
host="unix://$sock"

ping() {
    curl -fsS --max-time 2 --unix-socket "$sock" http://localhost/_ping >/dev/null 2>&1
}

running_pid() {
    [[ -f "$pidfile" ]] || return 1
    local pid
    pid="$(cat "$pidfile")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

install_dockerd() {
    command -v dockerd >/dev/null 2>&1 && return 0
    if [[ "$(id -u)" != 0 ]]; then
        echo "dockerd.sh: dockerd is missing and installing it needs root (apt-get install docker.io)" >&2
        return 1
    fi
    echo "dockerd.sh: installing docker.io ..." >&2
    # The package's own service start is refused in containers: harmless, we start it ourselves.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >&2 ||
        { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >&2; } ||
        true
    command -v dockerd >/dev/null 2>&1 || { echo "dockerd.sh: could not install docker.io" >&2; return 1; }
}

start() {
    if ping; then
        echo "DOCKER_HOST=$host"
        return 0
    fi
    if [[ "$(id -u)" != 0 ]]; then
        echo "dockerd.sh: starting a private dockerd needs root" >&2
        return 1
    fi
    install_dockerd
    mkdir -p "$dir/data" "$exec_root"
    if pid="$(running_pid)"; then
        kill "$pid" 2>/dev/null || true
        sleep 1
    fi
    rm -f "$sock"
    # setsid: the daemon must outlive the shell (and the pytest process) that started it.
    setsid dockerd \
        --iptables=false --ip6tables=false --bridge=none \
        --storage-driver=overlay2 \
        --data-root "$dir/data" --exec-root "$exec_root" \
        --pidfile "$pidfile" \
        -H "$host" \
        --default-ulimit nofile=20000:20000 \
        >"$log" 2>&1 </dev/null &
    for _ in $(seq 1 150); do
        if ping; then
            echo "DOCKER_HOST=$host"
            return 0
        fi
        if ! kill -0 "$!" 2>/dev/null; then
            # overlay2 is not available everywhere (overlay on overlay): retry with vfs.
            if grep -q "overlay" "$log" && [[ -z "${_NUNET_DOCKERD_VFS:-}" ]]; then
                echo "dockerd.sh: overlay2 failed, retrying with the vfs storage driver" >&2
                _NUNET_DOCKERD_VFS=1 start_vfs
                return $?
            fi
            echo "dockerd.sh: dockerd exited; last lines of $log:" >&2
            tail -n 20 "$log" >&2
            return 1
        fi
        sleep 0.2
    done
    echo "dockerd.sh: dockerd did not answer /_ping within 30 s; see $log" >&2
    return 1
}

start_vfs() {
    setsid dockerd \
        --iptables=false --ip6tables=false --bridge=none \
        --storage-driver=vfs \
        --data-root "$dir/data-vfs" --exec-root "$exec_root" \
        --pidfile "$pidfile" \
        -H "$host" \
        --default-ulimit nofile=20000:20000 \
        >"$log" 2>&1 </dev/null &
    for _ in $(seq 1 150); do
        if ping; then
            echo "DOCKER_HOST=$host"
            return 0
        fi
        kill -0 "$!" 2>/dev/null || break
        sleep 0.2
    done
    echo "dockerd.sh: dockerd (vfs) did not start; see $log" >&2
    tail -n 20 "$log" >&2
    return 1
}

stop() {
    local pid
    if pid="$(running_pid)"; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    # dockerd leaves its default network namespace mounted under the exec root.
    if mountpoint -q "$exec_root/netns/default" 2>/dev/null; then
        umount "$exec_root/netns/default" 2>/dev/null || umount -l "$exec_root/netns/default" || true
    fi
    rm -f "$sock" "$pidfile"
    echo "dockerd.sh: stopped" >&2
}

case "${1:-start}" in
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
    echo "usage: $0 [start|stop|status]" >&2
    exit 2
    ;;
esac
