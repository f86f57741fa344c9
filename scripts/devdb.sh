#!/usr/bin/env bash
# devdb.sh: the project's private PostgreSQL for `make run` and `make test`.
#
#   scripts/devdb.sh exec CMD...   run CMD with DATABASE_URL set (starting the server if needed)
#   scripts/devdb.sh url           start if needed and print the DATABASE_URL
#   scripts/devdb.sh stop          stop the private server (the data stays)
#   scripts/devdb.sh status        say whether it runs and where
#
# When DATABASE_URL is already set, `exec` runs CMD against it and starts nothing.
# CHATD_PGDATA names another data directory, and CHATD_DEVDB_PORT a fixed port (a
# server stopped and started again is where its clients left it: the outage tests).
# Otherwise the cluster lives in .pgdata/ (git ignores it), listens on 127.0.0.1 on a free
# port with trust authentication, and keeps running between commands so the next start is
# instant. initdb and postgres refuse to run as root, so as root they run as the `postgres`
# user. When the server binaries are missing, Debian's `postgresql` package is installed if
# this machine can; otherwise the script says what to install.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DB_NAME=${CHATD_DEVDB_NAME:-chatd}
DB_USER=postgres

say() { printf 'devdb: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# as_pg runs a command as the user that owns the cluster: `postgres` when we are root,
# from / because that user may not be allowed into the current directory.
as_pg() {
	if is_root; then
		(cd / && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

find_bindir() {
	local d
	if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
		d=$(dirname "$(readlink -f "$(command -v pg_ctl)")")
		if [ -x "$d/postgres" ] && [ -x "$d/initdb" ]; then
			echo "$d"
			return 0
		fi
	fi
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [ -x "$d/postgres" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

install_postgres() {
	local sudo=""
	if ! is_root; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		fi
	fi
	if ! command -v apt-get >/dev/null 2>&1 || { ! is_root && [ -z "$sudo" ]; }; then
		die "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found and cannot be installed here.
devdb: install them, e.g. 'sudo apt-get install postgresql' (Debian/Ubuntu) or 'brew install postgresql@16' (macOS),
devdb: or point chatd at a server you already have: DATABASE_URL=postgres://user:pass@host:5432/db make run"
	fi
	say "PostgreSQL server binaries not found: installing Debian's postgresql package (about a minute)"
	# Keep the package from creating and starting its own cluster on port 5432: we only
	# want the binaries, our cluster lives in the project.
	if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
		$sudo mkdir -p /etc/postgresql-common
		printf 'create_main_cluster = false\n' | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
	fi
	local log
	log=$(mktemp)
	if ! { $sudo apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
			-o Dpkg::Options::=--force-confold postgresql; } >"$log" 2>&1; then
		cat "$log" >&2
		die "installing the postgresql package failed (output above)"
	fi
	rm -f "$log"
}

ensure_pg_user() {
	is_root || return 0
	if ! id postgres >/dev/null 2>&1; then
		useradd --system --no-create-home --shell /usr/sbin/nologin postgres
	fi
}

# pick_datadir chooses .pgdata in the checkout, unless the postgres user cannot reach the
# checkout (a clone under /root, say); then a directory under /tmp named after the checkout.
pick_datadir() {
	if [ -n "${CHATD_PGDATA:-}" ]; then
		echo "$CHATD_PGDATA"
		return
	fi
	if is_root && ! runuser -u postgres -- test -x "$ROOT" 2>/dev/null; then
		echo "/tmp/chatd-pgdata-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)"
		return
	fi
	echo "$ROOT/.pgdata"
}

port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

free_port() {
	local p i
	for i in $(seq 1 50); do
		p=$((20000 + RANDOM % 40000))
		if ! port_in_use "$p"; then
			echo "$p"
			return 0
		fi
	done
	die "could not find a free TCP port on 127.0.0.1"
}

running_port() {
	# postmaster.pid line 4 is the port of a running server.
	[ -f "$DATA/postmaster.pid" ] || return 1
	as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1 || return 1
	sed -n 4p "$DATA/postmaster.pid"
}

init_cluster() {
	say "creating a private PostgreSQL cluster in $DATA"
	mkdir -p "$DATA"
	if is_root; then
		chown postgres: "$DATA"
	fi
	chmod 700 "$DATA"
	as_pg "$BIN/initdb" -D "$DATA" -U "$DB_USER" --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$DATA.initdb.log" 2>&1 ||
		as_pg "$BIN/initdb" -D "$DATA" -U "$DB_USER" --auth=trust --encoding=UTF8 --no-locale >"$DATA.initdb.log" 2>&1 ||
		{ cat "$DATA.initdb.log" >&2; die "initdb failed"; }
	rm -f "$DATA.initdb.log"
	# A development cluster: trust on loopback and the socket only, and durability traded
	# for speed (tests create a database per test).
	as_pg sh -c "cat >>'$DATA/postgresql.conf'" <<-'CONF'

		# chatd development settings (scripts/devdb.sh)
		listen_addresses = '127.0.0.1'
		max_connections = 300
		fsync = off
		synchronous_commit = off
		full_page_writes = off
		log_min_messages = warning
	CONF
	as_pg sh -c "cat >'$DATA/pg_hba.conf'" <<-'HBA'
		local all all trust
		host all all 127.0.0.1/32 trust
	HBA
}

start_cluster() {
	local port tries sockdir
	sockdir=$DATA
	# A Unix socket path must stay under 108 bytes.
	if [ ${#DATA} -gt 80 ]; then
		sockdir=/tmp
	fi
	for tries in 1 2 3 4 5; do
		port=${CHATD_DEVDB_PORT:-$(free_port)}
		if as_pg "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
			-o "-p $port -k $sockdir" start >/dev/null 2>&1; then
			say "PostgreSQL running on 127.0.0.1:$port (data in $DATA; stop with 'make db-stop')"
			return 0
		fi
		if ! grep -qiE 'address already in use|could not bind' "$DATA/server.log" 2>/dev/null; then
			tail -n 20 "$DATA/server.log" >&2 || true
			die "PostgreSQL did not start (log above, full log in $DATA/server.log)"
		fi
	done
	die "PostgreSQL could not bind a free port after 5 tries"
}

ensure_database() {
	local port=$1 out
	if ! out=$(as_pg "$BIN/createdb" -h 127.0.0.1 -p "$port" -U "$DB_USER" "$DB_NAME" 2>&1); then
		case "$out" in
		*"already exists"*) ;;
		*) die "createdb $DB_NAME failed: $out" ;;
		esac
	fi
}

ensure_running() {
	BIN=$(find_bindir) || {
		install_postgres
		BIN=$(find_bindir) || die "the postgresql package installed but initdb was not found under /usr/lib/postgresql"
	}
	ensure_pg_user
	DATA=$(pick_datadir)

	# One start at a time: `make run` and `make test` may race for the same cluster.
	mkdir -p "$(dirname "$DATA")"
	exec 9>"$DATA.lock"
	flock 9

	if [ ! -f "$DATA/PG_VERSION" ]; then
		init_cluster
	fi
	local port
	if ! port=$(running_port); then
		start_cluster
		port=$(running_port) || die "PostgreSQL started but its port is unknown"
	fi
	ensure_database "$port"
	flock -u 9
	echo "postgres://$DB_USER@127.0.0.1:$port/$DB_NAME?sslmode=disable"
}

cmd=${1:-}
shift || true
case "$cmd" in
exec)
	[ $# -gt 0 ] || die "usage: devdb.sh exec CMD..."
	if [ -z "${DATABASE_URL:-}" ]; then
		DATABASE_URL=$(ensure_running)
		export DATABASE_URL
	fi
	exec "$@"
	;;
url)
	ensure_running
	;;
stop)
	BIN=$(find_bindir) || die "PostgreSQL binaries not found; nothing to stop"
	DATA=$(pick_datadir)
	if [ -f "$DATA/postmaster.pid" ]; then
		as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null && say "stopped PostgreSQL ($DATA)"
	else
		say "not running ($DATA)"
	fi
	;;
status)
	BIN=$(find_bindir) || die "PostgreSQL binaries not found"
	DATA=$(pick_datadir)
	if port=$(running_port); then
		say "running on 127.0.0.1:$port, data in $DATA"
	else
		say "not running (data dir $DATA)"
	fi
	;;
*)
	die "usage: devdb.sh exec CMD... | url | stop | status"
	;;
esac
