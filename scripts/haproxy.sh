#!/usr/bin/env bash
# haproxy.sh: prints the path of HAProxy, the load balancer the cluster tests put in front
# of several chatd nodes, installing Debian's `haproxy` package when none is found (as
# bwrap.sh does for bubblewrap).
#
#   scripts/haproxy.sh      print the executable's path (installing it if needed)
#
# CHATD_HAPROXY, when set, names the executable to use and nothing is installed.
set -euo pipefail

say() { printf 'haproxy: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# CHATD_HAPROXY is checked here, not in find_haproxy: a die inside $(find_haproxy) would
# only end the subshell, and a wrong CHATD_HAPROXY would then install the package.
if [ -n "${CHATD_HAPROXY:-}" ]; then
	[ -x "$CHATD_HAPROXY" ] || die "CHATD_HAPROXY=$CHATD_HAPROXY is not an executable"
	echo "$CHATD_HAPROXY"
	exit 0
fi

find_haproxy() {
	local c
	for c in /usr/sbin/haproxy /usr/local/sbin/haproxy /usr/bin/haproxy /usr/local/bin/haproxy; do
		if [ -x "$c" ]; then
			echo "$c"
			return 0
		fi
	done
	return 1
}

install_haproxy() {
	local sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		fi
	fi
	if ! command -v apt-get >/dev/null 2>&1 || { [ "$(id -u)" -ne 0 ] && [ -z "$sudo" ]; }; then
		die "haproxy was not found and cannot be installed here: install it (e.g. 'sudo apt-get install haproxy') or set CHATD_HAPROXY to its path"
	fi
	say "haproxy not found: installing Debian's haproxy package"
	local log
	log=$(mktemp)
	if ! { $sudo apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
			haproxy; } >"$log" 2>&1; then
		cat "$log" >&2
		die "installing the haproxy package failed (output above)"
	fi
	rm -f "$log"
}

path=$(find_haproxy) || {
	install_haproxy
	path=$(find_haproxy) || die "the haproxy package installed but /usr/sbin/haproxy was not found"
}
echo "$path"
