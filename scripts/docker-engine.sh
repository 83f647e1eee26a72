#!/usr/bin/env bash
# Makes a Docker engine available to the real-engine test in
# tests/docker.rs when this machine can run one: installs Debian's
# docker.io when dockerd is missing, starts dockerd without touching the
# network setup (no iptables rules, no bridge; the test uses
# --network host) and waits for it to answer. Never fails the build:
# without an engine that test prints why it skipped.
set -u
answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if ! command -v docker >/dev/null 2>&1 || ! command -v dockerd >/dev/null 2>&1; then
    if ! answers; then
        echo "docker engine: installing docker.io"
        log=${TMPDIR:-/tmp}/docker-engine-install.log
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io; } >"$log" 2>&1; then
            echo "docker engine: not available (docker.io did not install; see $log)"
            exit 0
        fi
    fi
fi
if answers; then
    echo "docker engine: running (server $(docker version --format '{{.Server.Version}}'))"
    exit 0
fi
log=${TMPDIR:-/tmp}/dockerd-ci.log
nohup dockerd --iptables=false --ip6tables=false --bridge=none >"$log" 2>&1 &
for _ in $(seq 1 60); do
    if answers; then
        echo "docker engine: started (server $(docker version --format '{{.Server.Version}}'))"
        exit 0
    fi
    if ! kill -0 $! 2>/dev/null; then
        break
    fi
    sleep 0.5
done
echo "docker engine: not available (dockerd did not answer; the last lines of $log:)"
tail -n 5 "$log"
exit 0
