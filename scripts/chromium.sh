#!/usr/bin/env bash
# chromium.sh: prints the path of a Chromium for the browser tests, installing Debian's
# `chromium` package when none is found (as devdb.sh does for PostgreSQL).
#
#   scripts/chromium.sh        print the executable's path (installing it if needed)
#
# CHATD_CHROMIUM, when set, names the executable to use and nothing is installed.
set -euo pipefail

say() { printf 'chromium: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

find_chromium() {
	local c
	if [ -n "${CHATD_CHROMIUM:-}" ]; then
		[ -x "$CHATD_CHROMIUM" ] || die "CHATD_CHROMIUM=$CHATD_CHROMIUM is not an executable"
		echo "$CHATD_CHROMIUM"
		return 0
	fi
	for c in /usr/bin/chromium /usr/bin/chromium-browser; do
		if [ -x "$c" ]; then
			echo "$c"
			return 0
		fi
	done
	return 1
}

install_chromium() {
	local sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		fi
	fi
	if ! command -v apt-get >/dev/null 2>&1 || { [ "$(id -u)" -ne 0 ] && [ -z "$sudo" ]; }; then
		die "Chromium was not found and cannot be installed here: install it (e.g. 'sudo apt-get install chromium') or set CHATD_CHROMIUM to its path"
	fi
	say "Chromium not found: installing Debian's chromium package (a minute or two)"
	local log
	log=$(mktemp)
	if ! { $sudo apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
			chromium fonts-dejavu-core; } >"$log" 2>&1; then
		cat "$log" >&2
		die "installing the chromium package failed (output above)"
	fi
	rm -f "$log"
}

path=$(find_chromium) || {
	install_chromium
	path=$(find_chromium) || die "the chromium package installed but /usr/bin/chromium was not found"
}
echo "$path"
