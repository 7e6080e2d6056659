#!/bin/bash
# The macOS sandbox, for real. uexec's Seatbelt profile is generated and checked on Linux with the project's SBPL
# evaluator (tests/seatbelt); only a Mac can say that sandbox-exec accepts it and that each rule does what the
# evaluator says. Run this on a Mac, from the repository root, in a terminal (some probes need a second PTY):
#
#     crates/uexec-sandbox-macos/tests/on-a-mac.sh            # builds target/debug/uexec first
#     UEXEC=/path/to/uexec crates/uexec-sandbox-macos/tests/on-a-mac.sh
#
# Every probe that must fail has a twin that must pass, so a sandbox that refuses everything fails too. Probes whose
# tool is missing (swift, torch, go, java, docker) are reported as "skip", never as passed. It changes nothing
# outside its temporary directories, except one keychain item it adds and removes (service "uexec-mac-test").
# The last lines count passes, failures and skips; the exit status is the number of failures (0: all held).
# Paste the whole output into the issue when something fails.

set -u

if [ "$(uname -s)" != "Darwin" ]; then
    echo "on-a-mac.sh: this script runs on macOS only (here: $(uname -s))" >&2
    exit 2
fi

ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
if [ -z "${UEXEC:-}" ]; then
    (cd "$ROOT" && cargo build -q -p uexec) || exit 2
    UEXEC="$ROOT/target/debug/uexec"
fi
echo "uexec: $UEXEC ($("$UEXEC" --version 2>&1)); macOS $(sw_vers -productVersion) $(uname -m)"

PASS=0
FAIL=0
SKIP=0
# Everything lives under one directory in the home (the home is on the Data volume: firmlinked) and one in /tmp.
BASE=$(mktemp -d "$HOME/.uexec-mac-test.XXXXXX")
TMPWS=$(mktemp -d /tmp/uexec-mac-test.XXXXXX)
TMPWS=$(cd "$TMPWS" && pwd -P)
BASE=$(cd "$BASE" && pwd -P)
FAKE_HOME="$BASE/home"
WS="$BASE/ws"
mkdir -p "$FAKE_HOME/.ssh" "$WS/src" "$BASE/fresh"
echo "not a real key" > "$FAKE_HOME/.ssh/id_test"
echo "readable" > "$FAKE_HOME/readable"
(cd "$WS" && git init -q)
BG_PIDS=()

cleanup() {
    for pid in "${BG_PIDS[@]:-}"; do
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
    done
    security delete-generic-password -s uexec-mac-test >/dev/null 2>&1
    rm -rf "$BASE" "$TMPWS"
}
trap cleanup EXIT

# uexec run with the fake home (its ~/.ssh is the hidden one), from directory $DIR (default: the workspace).
run() {
    (cd "${DIR:-$WS}" && HOME="$FAKE_HOME" "$UEXEC" run --approval-policy never "$@")
}

report() { # status description [detail]
    case "$1" in
        pass) PASS=$((PASS + 1)); printf 'pass  %s\n' "$2" ;;
        fail) FAIL=$((FAIL + 1)); printf 'FAIL  %s\n' "$2"; [ -n "${3:-}" ] && printf '      %s\n' "$3" ;;
        skip) SKIP=$((SKIP + 1)); printf 'skip  %s\n' "$2" ;;
    esac
}

# must_pass DESCRIPTION uexec-run-args... -- command...: the sandboxed command must exit 0.
must_pass() {
    local what=$1
    shift
    local out
    if out=$(run "$@" 2>&1 </dev/null); then report pass "$what"; else report fail "$what" "$(echo "$out" | tail -3)"; fi
}

# must_fail DESCRIPTION uexec-run-args... -- command...: the sandboxed command must exit non-zero.
must_fail() {
    local what=$1
    shift
    local out
    if out=$(run "$@" 2>&1 </dev/null); then report fail "$what (it was allowed)" "$(echo "$out" | tail -3)"; else report pass "$what"; fi
}

have() { command -v "$1" >/dev/null 2>&1; }

echo "== sandbox-exec accepts every generated profile"
for mode in read-only workspace-write; do
    for net in --no-network --network "--allow-domain example.com"; do
        # shellcheck disable=SC2086
        must_pass "profile accepted: --sandbox $mode $net" --sandbox "$mode" $net -- /usr/bin/true
        # shellcheck disable=SC2086
        (cd "$WS" && HOME="$FAKE_HOME" "$UEXEC" sandbox-profile --platform macos --sandbox "$mode" $net -- true \
            > "$BASE/profile-$mode${net// /_}.txt" 2>&1) || report fail "sandbox-profile --sandbox $mode $net"
    done
done
echo "macos_keychain = true" > "$BASE/keychain.toml"
must_pass "profile accepted: macos_keychain = true" --config "$BASE/keychain.toml" -- /usr/bin/true

echo "== terminals: another tab's keystrokes"
if have script && [ -t 0 ]; then
    script -q /dev/null sleep 120 >/dev/null 2>&1 &
    BG_PIDS+=($!)
    OTHER=""
    for _ in $(seq 50); do
        OTHER=$(ps -o tty= -p "$(pgrep -n -f 'sleep 120')" 2>/dev/null | tr -d ' ')
        [ -n "$OTHER" ] && [ "$OTHER" != "??" ] && break
        sleep 0.1
    done
    if [ -n "$OTHER" ] && [ "$OTHER" != "??" ]; then
        must_fail "open another tab's terminal /dev/$OTHER for reading (keystrokes)" -- sh -c "exec 3</dev/$OTHER"
        must_fail "open another tab's terminal /dev/$OTHER for writing (fake prompts)" -- sh -c "exec 3>/dev/$OTHER"
    else
        report skip "another tab: could not start a second PTY"
    fi
    must_pass "a PTY the command opens itself (script)" -- script -q /dev/null sh -c 'tty >/dev/null'
    if (cd "$WS" && HOME="$FAKE_HOME" "$UEXEC" run -- sh -c 'test -t 0 && stty size >/dev/null && printf "" >/dev/tty'); then
        report pass "its own terminal: isatty, stty size, a write to /dev/tty"
    else
        report fail "its own terminal: isatty, stty size, a write to /dev/tty"
    fi
else
    report skip "terminals: run this script in a terminal (stdin is not a TTY)"
fi

echo "== keychain"
if security add-generic-password -s uexec-mac-test -a uexec -w "uexec-secret-$$" >/dev/null 2>&1; then
    must_fail "security find-generic-password -w (keychain read)" --network -- security find-generic-password -s uexec-mac-test -w
    must_fail "keychain read offline" -- security find-generic-password -s uexec-mac-test -w
    must_pass "keychain read with macos_keychain = true (the opt-in twin)" --config "$BASE/keychain.toml" -- security find-generic-password -s uexec-mac-test -w
else
    report skip "keychain: could not add a test item to the login keychain"
fi

echo "== Unix sockets: Docker, tmux, the command's own"
SOCKDIR="$TMPWS/sockets"
mkdir -p "$SOCKDIR/tmux-$(id -u)"
nc -lkU "$SOCKDIR/docker.sock" >/dev/null 2>&1 &
BG_PIDS+=($!)
nc -lkU "$SOCKDIR/tmux-$(id -u)/default" >/dev/null 2>&1 &
BG_PIDS+=($!)
nc -lkU "$SOCKDIR/plain.sock" >/dev/null 2>&1 &
BG_PIDS+=($!)
sleep 0.5
for net in --no-network --network; do
    must_fail "connect to a docker.sock ($net)" "$net" -- sh -c "echo x | nc -U -w1 $SOCKDIR/docker.sock"
    must_fail "connect to a tmux server socket ($net)" "$net" -- sh -c "echo x | nc -U -w1 $SOCKDIR/tmux-$(id -u)/default"
    must_pass "connect to a socket beneath /tmp, a writable root ($net)" "$net" -- sh -c "echo x | nc -U -w1 $SOCKDIR/plain.sock"
done
for sock in /var/run/docker.sock "$HOME/.docker/run/docker.sock"; do
    if [ -S "$sock" ]; then
        must_fail "Docker's real socket $sock" --network -- sh -c "echo x | nc -U -w1 $sock"
    fi
done
if have tmux; then
    must_pass "tmux with its own socket in the workspace" -- tmux -S ./tmux.sock new-session -d 'sleep 1'
else
    report skip "tmux -S: tmux is not installed"
fi

echo "== hidden locations: every spelling"
must_fail "read ~/.ssh/id_test" -- cat "$FAKE_HOME/.ssh/id_test"
must_fail "read ~/.SSH/id_test (case)" -- cat "$FAKE_HOME/.SSH/id_test"
must_fail "read it through the firmlink /System/Volumes/Data$FAKE_HOME" -- cat "/System/Volumes/Data$FAKE_HOME/.ssh/id_test"
VOL="/.vol/$(stat -f '%d' "$FAKE_HOME/.ssh/id_test")/$(stat -f '%i' "$FAKE_HOME/.ssh/id_test")"
must_fail "read it by inode through $VOL" -- cat "$VOL"
must_pass "read ~/readable (twin)" -- cat "$FAKE_HOME/readable"
must_pass "read ~/readable through the firmlink (twin)" -- cat "/System/Volumes/Data$FAKE_HOME/readable"
must_fail "hard-link the hidden key into the workspace" -- ln "$FAKE_HOME/.ssh/id_test" "$WS/key-link"

echo "== read-only entries: case, renames of their parents, links, git init"
must_fail "write .git/config" -- sh -c 'echo x >> .git/config'
must_fail "write .GIT/config (case)" -- sh -c 'echo x >> .GIT/config'
must_fail "write through the firmlink" -- sh -c "echo x >> /System/Volumes/Data$WS/.git/config"
must_fail "hard-link .git/config into the workspace" -- ln .git/config cfg-link
must_pass "write a workspace file (twin)" -- sh -c 'echo x > src/main.txt'
mkdir -p "$TMPWS/ws/src" "$TMPWS/other" && (cd "$TMPWS/ws" && git init -q)
DIR="$TMPWS/ws" must_fail "mv the workspace (in /tmp) away: mv ws w2" -- mv "$TMPWS/ws" "$TMPWS/w2"
DIR="$TMPWS/ws" must_pass "mv another /tmp directory (twin)" -- mv "$TMPWS/other" "$TMPWS/other2"
DIR="$BASE/fresh" must_pass "git init in a fresh workspace" -- git init -q
DIR="$BASE/fresh" must_fail "write the new .git/config in the next command" -- sh -c 'echo x >> .git/config'

echo "== network: TLS through the proxy, loopback, DNS"
if have nscurl; then
    must_pass "TLS through the proxy with Security.framework (nscurl https://example.com)" --allow-domain example.com -- nscurl -o /dev/null https://example.com/
fi
must_pass "curl https://example.com through the proxy" --allow-domain example.com -- curl -sSf -o /dev/null https://example.com/
must_fail "curl https://www.apple.com, not allowed" --allow-domain example.com -- curl -sSf -m 10 -o /dev/null https://www.apple.com/
if have go; then
    printf 'module uexec.test/m\n\ngo 1.21\n\nrequire golang.org/x/text v0.14.0\n' > "$WS/go.mod"
    must_pass "go mod download through the proxy (Go's TLS verification)" --allow-domain proxy.golang.org --allow-domain sum.golang.org -- env GOFLAGS=-mod=mod GOPATH="$WS/.gopath" GOCACHE="$WS/.gocache" go mod download golang.org/x/text
    rm -f "$WS/go.mod"
else
    report skip "go mod download: go is not installed"
fi
PY=/usr/bin/python3
LOOPBACK='import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(1); c=socket.create_connection(s.getsockname()); a,_=s.accept(); c.send(b"x"); assert a.recv(1)==b"x"'
if "$PY" -c 'pass' 2>/dev/null; then
    must_pass "bind 127.0.0.1 and connect to it (allowlist mode)" --allow-domain example.com -- "$PY" -c "$LOOPBACK"
    must_fail "connect to 1.1.1.1:80 directly (allowlist mode)" --allow-domain example.com -- "$PY" -c 'import socket; socket.create_connection(("1.1.1.1",80),timeout=5)'
    must_fail "bind 127.0.0.1 offline" --no-network -- "$PY" -c "$LOOPBACK"
    must_pass "DNS with the network on" --network -- "$PY" -c 'import socket; socket.getaddrinfo("example.com",443)'
    must_fail "DNS in allowlist mode" --allow-domain example.com -- "$PY" -c 'import socket; socket.getaddrinfo("example.com",443)'
    must_pass "interfaces offline (net.routetable)" --no-network -- "$PY" -c 'import socket; assert socket.if_nameindex()'
else
    report skip "loopback and DNS: /usr/bin/python3 needs the command line tools"
fi
must_pass "dual-stack runtimes are told to use IPv4 (JAVA_TOOL_OPTIONS)" --allow-domain example.com -- sh -c 'case "$JAVA_TOOL_OPTIONS" in *preferIPv4Stack=true*) exit 0;; esac; exit 1'
if have java && java -version >/dev/null 2>&1; then
    must_pass "the JVM sees java.net.preferIPv4Stack=true" --allow-domain example.com -- sh -c 'java -XshowSettings:properties -version 2>&1 | grep -q "java.net.preferIPv4Stack = true"'
else
    report skip "the JVM: java is not installed"
fi

echo "== builds and runtimes"
if have swift; then
    mkdir -p "$WS/swiftpkg" && (cd "$WS/swiftpkg" && swift package init --type executable >/dev/null 2>&1)
    DIR="$WS/swiftpkg" must_pass "swift build --disable-sandbox (module cache in DARWIN_USER_CACHE_DIR)" -- swift build --disable-sandbox
    DIR="$WS/swiftpkg" must_fail "swift build with its own sandbox (nested sandbox-exec cannot work)" -- swift build
else
    report skip "swift build: swift is not installed"
fi
if "$PY" -c 'import torch' 2>/dev/null; then
    must_pass "import torch (libomp's shared memory)" -- "$PY" -c 'import torch; torch.ones(2).sum()'
else
    report skip "import torch: torch is not installed for $PY"
fi
if "$PY" -c 'pass' 2>/dev/null; then
    must_pass "multiprocessing.shared_memory" -- "$PY" -c 'from multiprocessing import shared_memory as m; s=m.SharedMemory(create=True,size=8); s.close(); s.unlink()'
    must_fail "shm_open of another name" -- "$PY" -c 'import _posixshmem, os; _posixshmem.shm_open("/uexec-other", os.O_CREAT|os.O_RDWR, 0o600)'
    must_pass "multiprocessing.Manager (a Unix socket in \$TMPDIR)" -- "$PY" -c 'import multiprocessing as mp; m=mp.Manager(); d=m.dict(); d[1]=2; m.shutdown()'
fi

echo "== locale"
must_pass "LC_ALL is a locale this macOS has" -- sh -c 'test -n "$LC_ALL" && locale -a | grep -qx "$LC_ALL"'
must_pass "perl starts without a locale warning" -- sh -c '! perl -e 1 2>&1 | grep -q "locale failed"'

echo "== processes: kill across two commands, ps"
( cd "$WS" && HOME="$FAKE_HOME" "$UEXEC" run -- sleep 4242 ) >/dev/null 2>&1 &
BG_PIDS+=($!)
VICTIM=""
for _ in $(seq 50); do VICTIM=$(pgrep -f 'sleep 4242' | head -1); [ -n "$VICTIM" ] && break; sleep 0.1; done
if [ -n "$VICTIM" ]; then
    # Documented difference from Linux: two commands are two Seatbelt sandboxes.
    must_fail "kill a process of another sandboxed command (differs from Linux)" -- kill "$VICTIM"
    kill "$VICTIM" 2>/dev/null
else
    report skip "kill across two commands: the first command did not start"
fi
must_pass "kill a process of its own (twin)" -- sh -c 'sleep 60 & kill $!'
must_fail "ps lists other processes" -- sh -c 'ps ax | grep -q "[l]aunchd"'

echo
echo "passed $PASS, failed $FAIL, skipped $SKIP"
exit "$FAIL"
