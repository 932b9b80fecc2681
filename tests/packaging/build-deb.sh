#!/usr/bin/env bash
# build-deb.sh: the packaging test.
#
#   bash tests/packaging/build-deb.sh [-k]     (as root; -k keeps the temporary directory)
#
# Builds the echd .deb with `dpkg-buildpackage -us -uc -b` in a copy of this tree (packaging/debian
# copied to debian/), installs it on this machine with `dpkg -i`, checks that the files land
# where the unit expects them, that the echd user and /var/lib/echd exist and that the unit is
# enabled, runs the installed /usr/sbin/echd with the installed configuration as user echd, then
# checks that `dpkg -r echd` keeps /var/lib/echd and `dpkg --purge echd` deletes it.
#
# Prints PASS/FAIL lines and, last, "packaging: N passed, M failed"; exits 1 if anything failed.
# It will not touch an echd package (or /var/lib/echd) that it did not install itself.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MARKER=/var/tmp/echd-build-deb.installed   # this test installed the echd package
KEEP=0
[ "${1:-}" = "-k" ] && KEEP=1

PASSED=0
FAILED=0
TMP=
ECHD_PID=

pass() {
	PASSED=$((PASSED + 1))
	echo "PASS $1"
}

fail() {
	FAILED=$((FAILED + 1))
	echo "FAIL $1"
	if [ -n "${2:-}" ]; then
		printf '%s\n' "$2" | sed 's/^/    /'
	fi
}

# check DESCRIPTION COMMAND...: one test; the command's output is shown if it fails.
check() {
	local desc=$1 out
	shift
	if out=$("$@" 2>&1); then
		pass "$desc"
	else
		fail "$desc" "$out"
	fi
}

note() {
	echo "# $*"
}

pkg_status() {
	dpkg-query -W -f='${db:Status-Status}' echd 2>/dev/null || echo not-installed
}

cleanup() {
	if [ -n "$ECHD_PID" ] && kill -0 "$ECHD_PID" 2>/dev/null; then
		kill -KILL "$ECHD_PID" 2>/dev/null
	fi
	if [ -f "$MARKER" ]; then
		dpkg --purge echd >/dev/null 2>&1
		rm -f "$MARKER"
	fi
	if [ -n "$TMP" ] && [ "$KEEP" -eq 0 ]; then
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT

finish() {
	echo "packaging: $PASSED passed, $FAILED failed"
	[ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]
	exit $?
}

# --- preconditions ------------------------------------------------------------------------

if [ "$(id -u)" -ne 0 ]; then
	fail "run as root (dpkg -i)" "this test installs the package on this machine"
	finish
fi
missing=()
for t in dpkg-buildpackage dpkg-checkbuilddeps dh setpriv redis-cli systemd-analyze; do
	command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if [ ${#missing[@]} -ne 0 ]; then
	fail "tools present" "missing: ${missing[*]} (tools/echd-dev deps installs them)"
	finish
fi
if ! deps=$(dpkg-checkbuilddeps "$ROOT/packaging/debian/control" 2>&1); then
	fail "build dependencies installed" "$deps (tools/echd-dev deps installs them)"
	finish
fi

status=$(pkg_status)
if [ "$status" != not-installed ]; then
	if [ -f "$MARKER" ]; then
		note "purging the echd package a previous run of this test left ($status)"
		dpkg --purge echd >/dev/null 2>&1
		rm -f "$MARKER"
	else
		fail "no echd package installed beforehand" \
			"echd is $status here and this test did not install it: not touching it (dpkg --purge echd, then rerun)"
		finish
	fi
fi
if [ -e /var/lib/echd ]; then
	fail "no /var/lib/echd beforehand" "/var/lib/echd exists without the package: not touching it (move it away, then rerun)"
	finish
fi

# --- build ---------------------------------------------------------------------------------

VERSION=$(dpkg-parsechangelog -l "$ROOT/packaging/debian/changelog" -SVersion)
MESON_VERSION=$(sed -n "s/^ *version: *'\([^']*\)'.*/\1/p" "$ROOT/meson.build" | head -1)
check "debian/changelog version $VERSION is meson.build's $MESON_VERSION" \
	test "${VERSION%%-*}" = "$MESON_VERSION"

TMP=$(mktemp -d /tmp/echd-deb.XXXXXX)
chmod 755 "$TMP"   # user echd reaches its unix socket below
SRC=$TMP/echd-${VERSION%%-*}
mkdir -p "$SRC"
# the tree as it is (committed or not), without build output
tar -C "$ROOT" --exclude=./.git --exclude=./build --exclude='./build-*' --exclude=./data \
	--exclude=./debian --exclude=__pycache__ -cf - . | tar -C "$SRC" -xf -
cp -r "$SRC/packaging/debian" "$SRC/debian"

t0=$(date +%s)
# parallel: dh builds with one job unless told; noddebs: no -dbgsym package (not tested)
if (cd "$SRC" && DEB_BUILD_OPTIONS="parallel=$(nproc) noddebs" dpkg-buildpackage -us -uc -b) >"$TMP/build.log" 2>&1; then
	pass "dpkg-buildpackage -us -uc -b ($(($(date +%s) - t0)) s)"
else
	fail "dpkg-buildpackage -us -uc -b" "$(tail -40 "$TMP/build.log")"
	finish
fi
DEB=$TMP/echd_${VERSION}_$(dpkg --print-architecture).deb
if [ ! -f "$DEB" ]; then
	fail "the .deb was built" "no $DEB; $(ls "$TMP")"
	finish
fi
note "built $(basename "$DEB") ($(du -k "$DEB" | cut -f1) KiB)"

CONTENTS=$(dpkg-deb -c "$DEB" | awk '{print $NF}' | sed 's|^\./|/|')
check ".deb holds the program, units, config, sysusers/tmpfiles entries, man pages" bash -c '
	for f in /usr/sbin/echd /lib/systemd/system/echd.service /lib/systemd/system/echd.socket \
		/etc/echd/echd.conf /usr/lib/sysusers.d/echd.conf /usr/lib/tmpfiles.d/echd.conf \
		/usr/share/man/man8/echd.8.gz /usr/share/man/man5/echd.conf.5.gz \
		/usr/bin/echo-admin /usr/bin/echd-import /usr/share/man/man1/echd-import.1.gz; do
		grep -qx "$f" <<<"$1" || { echo "not in the .deb: $f"; exit 1; }
	done' _ "$CONTENTS"
# a directory the package owned would be removed by dpkg -r when empty
check ".deb does not own /var/lib/echd" bash -c '! grep -q "^/var/lib/echd" <<<"$1"' _ "$CONTENTS"
check ".deb marks /etc/echd/echd.conf as a conffile" bash -c \
	'dpkg-deb -I "$1" conffiles | grep -qx /etc/echd/echd.conf' _ "$DEB"

# --- install -------------------------------------------------------------------------------

touch "$MARKER"
if out=$(dpkg -i "$DEB" 2>&1); then
	pass "dpkg -i"
else
	fail "dpkg -i" "$out"
	finish
fi
check "package state is installed" test "$(pkg_status)" = installed

check "/usr/sbin/echd is executable" test -x /usr/sbin/echd
UNIT=
for d in /lib/systemd/system /usr/lib/systemd/system; do
	[ -f "$d/echd.service" ] && UNIT=$d/echd.service && break
done
check "echd.service and echd.socket are installed" test -n "$UNIT" -a -f "$(dirname "${UNIT:-/x}")/echd.socket"
EXEC=$(sed -n 's/^ExecStart=//p' "${UNIT:-/dev/null}")
read -r EXEC_BIN EXEC_CONF _ <<<"$EXEC"
check "ExecStart's program exists ($EXEC_BIN)" test -x "${EXEC_BIN:-/nonexistent}"
check "ExecStart's config exists ($EXEC_CONF)" test -f "${EXEC_CONF:-/nonexistent}"
check "/etc/echd/echd.conf is a conffile of echd" bash -c \
	"dpkg-query -W -f='\${Conffiles}' echd | grep -q '^ /etc/echd/echd.conf '"
check "the installed config is packaging/echd.conf" cmp /etc/echd/echd.conf "$ROOT/packaging/echd.conf"

check "user echd exists, a system user with home /var/lib/echd and no login shell" bash -c '
	IFS=: read -r name _ uid gid _ home shell < <(getent passwd echd) || { echo "no user echd"; exit 1; }
	echo "uid $uid gid $gid home $home shell $shell"
	[ "$uid" -lt 1000 ] && [ "$home" = /var/lib/echd ] && [ "${shell##*/}" = nologin ] &&
		[ "$(getent group echd | cut -d: -f3)" = "$gid" ]'
check "/var/lib/echd exists: echd:echd, mode 750" bash -c '
	s=$(stat -c "%F %U:%G %a" /var/lib/echd) || exit 1
	echo "$s"; [ "$s" = "directory echd:echd 750" ]'
check "echd.service is enabled" bash -c 'deb-systemd-helper is-enabled echd.service ||
	test -L /etc/systemd/system/multi-user.target.wants/echd.service'
check "echd.socket is not enabled" bash -c '! deb-systemd-helper is-enabled echd.socket'
# python3-redis is only suggested; the test machine has it (tools/echd-dev deps)
check "the installed echd-import runs" bash -c '/usr/bin/echd-import --help | grep -q -- --replace'
# systemd-analyze verify runs `man` for Documentation=man:... when man-db is installed
if command -v man >/dev/null 2>&1; then
	check "man echd and man echd.conf find the pages" bash -c 'man -w 8 echd && man -w 5 echd.conf'
	MAN=yes
else
	note "man-db is not installed: Documentation=man:... is not checked by systemd-analyze"
	MAN=no
fi
check "systemd-analyze verify on the installed units" bash -c \
	'out=$(systemd-analyze verify --man="$2" "$1" "${1%.service}.socket" 2>&1); echo "$out"; [ -z "$out" ]' \
	_ "$UNIT" "$MAN"

if [ -d /run/systemd/system ]; then
	# a booted systemd: the package started the service through the unit itself
	check "echd.service is active (READY=1 received)" systemctl is-active echd.service
	check "systemctl reload echd" systemctl reload echd.service
	check "systemctl stop echd" systemctl stop echd.service
else
	note "systemd is not running here: the unit was not started (its sandbox is checked by systemd-analyze only)"
fi

# --- the installed echd, as user echd, with the installed config --------------------------

SOCKDIR=$TMP/run
mkdir -p "$SOCKDIR"
chown echd:echd "$SOCKDIR"
SOCK=$SOCKDIR/echd.sock
# setpriv execs echd itself (no forking wrapper): $! is echd and gets the SIGTERM
setpriv --reuid=echd --regid=echd --clear-groups --reset-env \
	/usr/sbin/echd /etc/echd/echd.conf --port 0 --http-port 0 --unixsocket "$SOCK" >"$TMP/echd.log" 2>&1 &
ECHD_PID=$!
ok=0
for _ in $(seq 250); do
	if [ "$(redis-cli -s "$SOCK" PING 2>/dev/null)" = PONG ]; then
		ok=1
		break
	fi
	kill -0 "$ECHD_PID" 2>/dev/null || break
	sleep 0.02
done
if [ $ok -eq 1 ]; then
	pass "installed echd runs as echd with /etc/echd/echd.conf and answers PING"
	check "XADD through it" bash -c \
		'id=$(redis-cli -s "$1" XADD pkgtest "*" f v) && echo "$id" && [[ $id == *-* ]]' _ "$SOCK"
	check "its data is in /var/lib/echd, owned by echd" bash -c \
		'stat -c "%U %n" /var/lib/echd/data.mdb && [ "$(stat -c %U /var/lib/echd/data.mdb)" = echd ]'
else
	fail "installed echd runs as echd with /etc/echd/echd.conf and answers PING" "$(cat "$TMP/echd.log")"
fi
kill -TERM "$ECHD_PID" 2>/dev/null
wait "$ECHD_PID"
rc=$?
ECHD_PID=
check "it exits 0 on SIGTERM" bash -c 'echo "exit status $1"; cat "$2"; [ "$1" -eq 0 ]' _ "$rc" "$TMP/echd.log"

# --- remove, purge -------------------------------------------------------------------------

check "dpkg -r echd" dpkg -r echd
check "package state is config-files" test "$(pkg_status)" = config-files
check "dpkg -r removed /usr/sbin/echd and the unit" bash -c '! test -e /usr/sbin/echd && ! test -e "$1"' _ "${UNIT:-/nonexistent}"
check "dpkg -r kept /var/lib/echd and its data" test -f /var/lib/echd/data.mdb
check "dpkg -r kept /etc/echd/echd.conf" test -f /etc/echd/echd.conf

check "dpkg --purge echd" dpkg --purge echd
check "package state is not-installed" test "$(pkg_status)" = not-installed
check "dpkg --purge removed /var/lib/echd" bash -c '! test -e /var/lib/echd'
check "dpkg --purge removed /etc/echd/echd.conf" bash -c '! test -e /etc/echd/echd.conf'
check "dpkg --purge removed the enablement symlink" bash -c \
	'! test -e /etc/systemd/system/multi-user.target.wants/echd.service'
rm -f "$MARKER"

finish
