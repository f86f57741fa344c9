#!/usr/bin/env bash
# bwrap.sh: prints the path of bubblewrap (bwrap), the sandbox of the shell tool, installing
# Debian's `bubblewrap` package when none is found (as chromium.sh does for Chromium).
#
#   scripts/bwrap.sh        print the executable's path (installing it if needed)
#
# CHATD_BWRAP, when set, names the executable to use and nothing is installed.
set -euo pipefail

say() { printf 'bwrap: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

find_bwrap() {
	local c
	if [ -n "${CHATD_BWRAP:-}" ]; then
		[ -x "$CHATD_BWRAP" ] || die "CHATD_BWRAP=$CHATD_BWRAP is not an executable"
		echo "$CHATD_BWRAP"
		return 0
	fi
	for c in /usr/bin/bwrap /usr/local/bin/bwrap; do
		if [ -x "$c" ]; then
			echo "$c"
			return 0
		fi
	done
	return 1
}

install_bwrap() {
	local sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		fi
	fi
	if ! command -v apt-get >/dev/null 2>&1 || { [ "$(id -u)" -ne 0 ] && [ -z "$sudo" ]; }; then
		die "bwrap was not found and cannot be installed here: install it (e.g. 'sudo apt-get install bubblewrap') or set CHATD_BWRAP to its path"
	fi
	say "bwrap not found: installing Debian's bubblewrap package"
	local log
	log=$(mktemp)
	if ! { $sudo apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
			bubblewrap; } >"$log" 2>&1; then
		cat "$log" >&2
		die "installing the bubblewrap package failed (output above)"
	fi
	rm -f "$log"
}

path=$(find_bwrap) || {
	install_bwrap
	path=$(find_bwrap) || die "the bubblewrap package installed but /usr/bin/bwrap was not found"
}
echo "$path"
