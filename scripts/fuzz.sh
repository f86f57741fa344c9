#!/bin/sh
# Runs every fuzz target of the module (each `func FuzzXxx` in a _test.go file), one
# after another, each for FUZZTIME (default 30s). Extra `go test` flags come from
# FUZZFLAGS, e.g. FUZZFLAGS=-parallel=1 to use one CPU. FUZZMINIMIZE bounds the
# minimization of each new input (default 100x, 100 runs): go test's default, 60s, lets
# FuzzConnection, whose every run is a connection to a real server, spend most of its
# time minimizing instead of fuzzing (about 400 execs/s against 1500). A crash stops the run; go test
# saves the input under the package's testdata/fuzz/FuzzXxx/, where it then runs as an
# ordinary test: commit it with the fix.
# Some targets need PostgreSQL: run it through scripts/devdb.sh exec (make fuzz does).
set -eu
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-30s}
minimize=${FUZZMINIMIZE:-100x}
targets=$(grep -rEo --include='*_test.go' --exclude-dir=node_modules --exclude-dir=.git '^func Fuzz[A-Za-z0-9_]*' . | sed 's/:func /:/; s|^\./||' | sort)
[ -n "$targets" ] || { echo "no fuzz targets"; exit 1; }
for t in $targets; do
	file=${t%%:*}
	name=${t##*:}
	pkg=./$(dirname "$file")
	echo "== $name ($pkg) for $fuzztime"
	# shellcheck disable=SC2086 # FUZZFLAGS is a list of flags
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" ${FUZZFLAGS:-} "$pkg"
done
