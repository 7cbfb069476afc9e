#!/usr/bin/env bash
# Headless Chromium for the tracking suite's screenshots (make test-tracking): Debian's
# chromium package, installed with apt-get when it is missing. Without root or apt-get it
# says what to do, and the screenshot tests skip, saying so.
set -uo pipefail
command -v chromium >/dev/null || command -v chromium-browser >/dev/null && exit 0
say() { echo "install_chromium: $*" >&2; }
if ! command -v apt-get >/dev/null; then
    say "no chromium and no apt-get: install Chromium yourself; the screenshot tests skip"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    say "no chromium; run as root or: sudo apt-get install chromium (the screenshot tests skip)"
    exit 0
fi
log=$(mktemp)
say "installing chromium (apt-get; log in $log)"
apt=(apt-get -y -q -o Dpkg::Use-Pty=0 install --no-install-recommends chromium)
if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >"$log" 2>&1; then
    apt-get -q update >>"$log" 2>&1 || true
    if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >>"$log" 2>&1; then
        say "apt-get could not install chromium; see $log (the screenshot tests skip)"
        exit 0
    fi
fi
