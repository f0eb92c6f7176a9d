#!/usr/bin/env bash
# Installs the Debian packages the tests start as real servers: etcd-server (`etcd`, the
# etcd discovery backend), nats-server, and python3-zmq (a real libzmq PUB socket for the
# event-plane tests); tcpdump, which scripts/interop_tls_plane.sh reads the wire with; and
# chromium, the headless browser scripts/docs_chromium.sh renders Swagger UI at /docs in
# (with fonts-dejavu-core, so that its screenshot has letters without recommended packages).
# Idempotent: installs only what is missing, and refreshes the package lists only then. Never starts a service: a policy-rc.d that denies
# every start is in place during the install (there is no systemd here either).
# Not root: prints the command to run instead.
set -euo pipefail

packages=(etcd-server nats-server python3-zmq tcpdump chromium fonts-dejavu-core)
missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "system packages present: ${packages[*]}"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "missing ${missing[*]}, and no apt-get here: install them with this system's package manager" >&2
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing ${missing[*]}; as root run: apt-get update && apt-get install -y ${missing[*]}" >&2
    echo "(or: sudo bash scripts/install-system.sh)" >&2
    exit 0
fi

policy=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# written by switchyard scripts/install-system.sh: start no services\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
fi
cleanup() { if [ -n "$own_policy" ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
echo "installing ${missing[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
command -v etcd >/dev/null && command -v nats-server >/dev/null && command -v chromium >/dev/null
echo "installed ${missing[*]}"
