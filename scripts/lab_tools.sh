#!/usr/bin/env bash
# The NAT lab's tools (tests/netlab.py): nft (nftables) for the routers and miniupnpd for the
# UPnP home router, installed with apt when missing and we are root; otherwise a note, and the
# lab's tests skip with the reason. The package's own service is never started: the lab runs
# miniupnpd itself, inside a router namespace, and stops it with the lab.
set -euo pipefail
missing=()
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v miniupnpd >/dev/null 2>&1 || missing+=(miniupnpd)
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "lab_tools.sh: installing ${missing[*]} ..." >&2
  # policy-rc.d 101: no service starts during the install (a host's miniupnpd would need an
  # external interface this machine may not have).
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d.nunet && chmod +x /usr/sbin/policy-rc.d.nunet
  [ -e /usr/sbin/policy-rc.d ] || ln -s /usr/sbin/policy-rc.d.nunet /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 ||
    { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2; } ||
    true
  [ "$(readlink /usr/sbin/policy-rc.d 2>/dev/null)" = /usr/sbin/policy-rc.d.nunet ] && rm -f /usr/sbin/policy-rc.d
  rm -f /usr/sbin/policy-rc.d.nunet
fi
for tool in nft miniupnpd; do
  command -v "$tool" >/dev/null 2>&1 || echo "note: no $tool: the NAT lab's tests that need it skip" >&2
done
echo "lab tools: nft $(command -v nft >/dev/null && echo yes || echo no), miniupnpd $(command -v miniupnpd >/dev/null && echo yes || echo no)"
