#!/usr/bin/env bash
# cluster.sh: three chatd nodes on the project's PostgreSQL behind HAProxy, on this
# machine, to try what docs/cluster.md describes.
#
#   scripts/cluster.sh start    build bin/chatd, start nodes 1-3 and HAProxy (installing
#                               Debian's haproxy when missing); the app at
#                               http://127.0.0.1:8080/
#   scripts/cluster.sh kill N   SIGKILL node N (1-3), as a crash would
#   scripts/cluster.sh start N  start node N again (on its address: the same node)
#   scripts/cluster.sh stop     stop everything (SIGTERM)
#   scripts/cluster.sh status   what runs, and which node holds how many sessions
#
# Node N listens on 127.0.0.1:808N (admin: 127.0.0.1:909N) with its own sandbox
# directory; HAProxy listens on CHATD_CLUSTER_PORT (default 8080) with the shipped
# deploy/haproxy/chatd.cfg, its servers set to the three nodes. Logs and pids are in
# .cluster/ (git ignores it). DATABASE_URL, when set, is used instead of the private
# PostgreSQL. CHATD_* variables in the environment reach every node.
#
# A second cluster beside the first (server/clusterscript_test.go runs one while a
# user's may run) needs its own directory, binary and ports; every command of it must
# be given the same settings:
#
#   CHATD_CLUSTER_DIR        logs, pids and sandboxes (default .cluster/)
#   CHATD_CLUSTER_BIN        where start builds chatd and what it runs (default bin/chatd)
#   CHATD_CLUSTER_PORT       HAProxy's port (default 8080)
#   CHATD_CLUSTER_NODE_PORT  node N listens on this port plus N (default 8080: 808N)
#   CHATD_CLUSTER_ADMIN_PORT node N's admin listener is on this port plus N (default
#                            9090: 909N)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${CHATD_CLUSTER_DIR:-$ROOT/.cluster}
BIN=${CHATD_CLUSTER_BIN:-$ROOT/bin/chatd}
PORT=${CHATD_CLUSTER_PORT:-8080}
NODE_PORT=${CHATD_CLUSTER_NODE_PORT:-8080}
ADMIN_PORT=${CHATD_CLUSTER_ADMIN_PORT:-9090}

say() { printf 'cluster: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

for v in PORT NODE_PORT ADMIN_PORT; do
	case ${!v} in
	'' | *[!0-9]*) die "CHATD_CLUSTER_$v=${!v} is not a port number" ;;
	esac
done

# node_number checks that $1 names one of the three nodes.
node_number() {
	case ${1:-} in
	1 | 2 | 3) ;;
	*) die "there is no node '${1:-}': the nodes are 1, 2 and 3" ;;
	esac
}

node_addr() { echo "127.0.0.1:$((NODE_PORT + $1))"; }
admin_addr() { echo "127.0.0.1:$((ADMIN_PORT + $1))"; }

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_node() {
	# Two statements: local expands all its words before it assigns any, so pidf would
	# read a caller's n (unset when start N runs it: "n: unbound variable").
	local n=$1
	local pidf="$DIR/node$n.pid" addr
	addr=$(node_addr "$n")
	if running "$pidf"; then
		say "node $n already runs (pid $(cat "$pidf"))"
		return
	fi
	mkdir -p "$DIR/node$n"
	chmod 700 "$DIR/node$n"
	# Behind HAProxy every client is HAProxy's address: per-address limits are off.
	CHATD_SANDBOX_DIR="$DIR/node$n/sandboxes" \
		CHATD_MAX_CONNS_PER_ADDR=${CHATD_MAX_CONNS_PER_ADDR:-0} \
		CHATD_HANDSHAKE_RATE=${CHATD_HANDSHAKE_RATE:-off} \
		DATABASE_URL="$DATABASE_URL" \
		nohup "$BIN" -addr "$addr" -admin-addr "$(admin_addr "$n")" \
		>"$DIR/node$n.log" 2>&1 &
	echo $! >"$pidf"
	local i
	for i in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$((NODE_PORT + n))") 2>/dev/null; then
			say "node $n: http://$addr (pid $(cat "$pidf"), log $DIR/node$n.log)"
			return
		fi
		running "$pidf" || die "node $n exited: see $DIR/node$n.log"
		sleep 0.1
	done
	die "node $n did not become ready: see $DIR/node$n.log"
}

start_haproxy() {
	local pidf="$DIR/haproxy.pid" bin cfg="$DIR/haproxy.cfg"
	if running "$pidf"; then
		return
	fi
	bin=$("$ROOT/scripts/haproxy.sh")
	# The shipped configuration with a local log, bind address and servers.
	sed -e 's|^\tlog /dev/log local0|\tlog stderr format raw local0 info|' \
		-e 's|^\tmaxconn .*|\tmaxconn 4000|' \
		-e "s|^\tbind :8080|\tbind 127.0.0.1:$PORT|" \
		-e '/^\tserver chatd/d' \
		"$ROOT/deploy/haproxy/chatd.cfg" >"$cfg"
	local n
	for n in 1 2 3; do
		printf '\tserver chatd%s %s\n' "$n" "$(node_addr "$n")" >>"$cfg"
	done
	"$bin" -c -q -f "$cfg" || die "the generated $cfg is not valid"
	nohup "$bin" -db -f "$cfg" >"$DIR/haproxy.log" 2>&1 &
	echo $! >"$pidf"
	local i
	for i in $(seq 50); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
			say "HAProxy: http://127.0.0.1:$PORT/ (the app; log $DIR/haproxy.log)"
			return
		fi
		running "$pidf" || die "HAProxy exited: see $DIR/haproxy.log"
		sleep 0.1
	done
	die "HAProxy did not listen on $PORT: see $DIR/haproxy.log"
}

stop_pid() {
	local pidf=$1 i
	running "$pidf" || { rm -f "$pidf"; return; }
	kill -TERM "$(cat "$pidf")"
	for i in $(seq 200); do
		running "$pidf" || break
		sleep 0.1
	done
	rm -f "$pidf"
}

cmd=${1:-}
case "$cmd" in
start)
	mkdir -p "$DIR"
	if [ -z "${DATABASE_URL:-}" ]; then
		DATABASE_URL=$("$ROOT/scripts/devdb.sh" url)
	fi
	export DATABASE_URL
	(cd "$ROOT" && go build -o "$BIN" ./cmd/chatd)
	if [ $# -ge 2 ]; then
		node_number "$2"
		start_node "$2"
	else
		for n in 1 2 3; do start_node "$n"; done
		start_haproxy
	fi
	;;
kill)
	[ $# -ge 2 ] || die "usage: cluster.sh kill N"
	node_number "$2"
	running "$DIR/node$2.pid" || die "node $2 does not run"
	kill -KILL "$(cat "$DIR/node$2.pid")"
	rm -f "$DIR/node$2.pid"
	say "killed node $2: its sessions continue on the other nodes within CHATD_LEASE_TTL (10s) and a few seconds"
	;;
stop)
	stop_pid "$DIR/haproxy.pid"
	for n in 1 2 3; do stop_pid "$DIR/node$n.pid"; done
	say "stopped"
	;;
status)
	for n in 1 2 3; do
		if running "$DIR/node$n.pid"; then
			held=$(command -v curl >/dev/null && curl -fsS "http://$(admin_addr "$n")/metrics" 2>/dev/null | awk '$1 == "chatd_leases_held" { print $2 }' || true)
			say "node $n runs (pid $(cat "$DIR/node$n.pid")), holds ${held:-?} sessions"
		else
			say "node $n is down"
		fi
	done
	if running "$DIR/haproxy.pid"; then say "HAProxy runs on 127.0.0.1:$PORT"; else say "HAProxy is down"; fi
	;;
*)
	die "usage: cluster.sh start [N] | kill N | stop | status"
	;;
esac
