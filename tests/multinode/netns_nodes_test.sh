#!/usr/bin/env bash
# tests/support/netns-nodes itself: the environment it gives each node, that tbf limits the link (two
# nodes on a veth pair, three on a bridge), its exit codes (a failing node, the deadline, no privilege),
# and that it leaves no namespace or process behind: after a normal end, a deadline, SIGTERM, and, through
# cleanup-stale, after it was killed with SIGKILL (while a live invocation's namespaces stay).
# Usage: netns_nodes_test.sh SOURCE_DIR. Exit 77 (skip) when this machine cannot make namespaces.
set -uo pipefail
nodes=$1/tests/support/netns-nodes
scratch=$(mktemp -d /tmp/zhost-netns-nodes.XXXXXX)
chmod 755 "$scratch"
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
left_behind() { ip netns list | grep "^zhost-nn-$1-"; }
# Processes whose command line carries this test's marker (a sleep of 1000 + this PID seconds).
marker=$((1000 + $$))
marked() { pgrep -f "^sleep $marker\$"; }

# The environment, and a 3 MB transfer from node 1 to node 0 over a 40 Mbit/s link: >= 0.6 s.
cat > "$scratch/transfer.py" <<'EOF'
import os, socket, sys, time
rank, nnodes, size = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"]), int(sys.argv[1])
if rank == 0:
    server = socket.create_server((os.environ["MASTER_ADDR"], 29500), backlog=nnodes)
    start, received = None, 0
    for _ in range(nnodes - 1):
        conn, _ = server.accept()
        start = start or time.monotonic()
        while data := conn.recv(1 << 16):
            received += len(data)
    print(f"received {received} bytes in {time.monotonic() - start:.3f} s")
else:
    for attempt in range(100):
        try:
            conn = socket.create_connection((os.environ["MASTER_ADDR"], 29500))
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
    conn.sendall(b"x" * size)
    conn.close()
EOF
# shellcheck disable=SC2016  # expanded in the nodes
env_line='echo "rank=$NODE_RANK of $NNODES addr=$NODE_ADDR master=$MASTER_ADDR ifname=${GLOO_SOCKET_IFNAME:-} ns=$NETNS_NAME"'
for n in 2 3; do
  "$nodes" --nodes $n --rate 40mbit --timeout 30 --log-dir "$scratch/rate$n" -- \
    bash -c "$env_line && python3 $scratch/transfer.py 3000000" &
  pid=$!
  wait $pid
  status=$?
  (( status == 77 )) && { cat "$scratch/rate$n"/*.log 2>/dev/null; exit 77; }
  (( status == 0 )) || fail "$n nodes: exit $status: $(cat "$scratch/rate$n"/*.log)"
  for (( i = 0; i < n; ++i )); do
    grep -q "^rank=$i of $n addr=10\.[0-9.]*\.$((i + 1)) master=10\.[0-9.]*\.1 ifname=znet0 ns=zhost-nn-$pid-[0-9]*-n$i$" \
      "$scratch/rate$n/node$i.log" || fail "$n nodes: node $i's environment: $(cat "$scratch/rate$n/node$i.log")"
  done
  seconds=$(grep -o 'received [0-9]* bytes in [0-9.]*' "$scratch/rate$n/node0.log" | awk '{print $2, $5}')
  read -r bytes secs <<< "$seconds"
  (( bytes == 3000000 * (n - 1) )) || fail "$n nodes: node 0 received '$bytes' bytes"
  # node 0's ingress is limited to 40 Mbit/s: (n - 1) x 3 MB take at least (n - 1) x 0.6 s (10% slack).
  awk -v s="$secs" -v n=$n 'BEGIN { exit !(s >= 0.54 * (n - 1)) }' \
    || fail "$n nodes: $bytes bytes in $secs s: faster than 40 Mbit/s, the link is not limited"
  echo "$n nodes: $bytes bytes in $secs s at 40 Mbit/s"
  [[ -z $(left_behind $pid) ]] || fail "$n nodes: namespaces left: $(left_behind $pid)"
done

# One node: loopback only, no GLOO_SOCKET_IFNAME.
out=$("$nodes" --nodes 1 -- bash -c "$env_line" 2>/dev/null)
[[ $out == "[node 0] rank=0 of 1 addr=127.0.0.1 master=127.0.0.1 ifname= ns=zhost-nn-"*-n0 ]] || fail "one node: $out"

# A failing node: exit 1, naming it.
err=$("$nodes" --node-cmd 'exit 0' --node-cmd 'exit 5' 2>&1 >/dev/null)
status=$?
(( status == 1 )) || fail "a failing node: exit $status, not 1"
[[ $err == *"node 1 exited with 5"* ]] || fail "a failing node is not named: $err"

# The deadline: exit 124, the nodes' processes killed, the namespaces removed.
"$nodes" --timeout 1 -- sleep $marker > /dev/null 2>&1 &
pid=$!
wait $pid
status=$?
(( status == 124 )) || fail "deadline: exit $status, not 124"
[[ -z $(marked) && -z $(left_behind $pid) ]] || fail "deadline: left $(marked) $(left_behind $pid)"

# SIGTERM: 143, nothing left.
"$nodes" -- sleep $marker > /dev/null 2>&1 &
pid=$!
for (( i = 0; i < 50 && $(marked | wc -l) < 2; ++i )); do sleep 0.1; done
kill -TERM $pid
wait $pid
status=$?
(( status == 143 )) || fail "SIGTERM: exit $status, not 143"
[[ -z $(marked) && -z $(left_behind $pid) ]] || fail "SIGTERM: left $(marked) $(left_behind $pid)"

# SIGINT (Ctrl-C): 130, nothing left. Started from Python with SIGINT's default action: a background job
# of this shell would inherit SIGINT ignored, which bash cannot trap.
read -r pid status < <(python3 -c '
import signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)
node = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(100):
    if subprocess.run(["pgrep", "-f", "^sleep " + sys.argv[-1] + "$"], capture_output=True).stdout.count(b"\n") == 2:
        break
    time.sleep(0.1)
node.send_signal(signal.SIGINT)
print(node.pid, node.wait())' "$nodes" -- sleep $marker)
(( status == 130 )) || fail "SIGINT: exit $status, not 130"
[[ -z $(marked) && -z $(left_behind "$pid") ]] || fail "SIGINT: left $(marked) $(left_behind "$pid")"

# SIGKILL leaves the namespaces; cleanup-stale removes them and their processes, and not a live one's.
"$nodes" -- sleep $marker > /dev/null 2>&1 &
dead=$!
"$nodes" --timeout 60 -- bash -c "touch $scratch/live\$NODE_RANK; until [[ -e $scratch/go ]]; do sleep 0.1; done" \
  > /dev/null 2>&1 &
live=$!
for (( i = 0; i < 100; ++i )); do
  (( $(marked | wc -l) == 2 )) && [[ -e $scratch/live0 && -e $scratch/live1 ]] && break
  sleep 0.1
done
{ kill -KILL $dead && wait $dead; } 2> /dev/null  # bash's "Killed" notice
[[ $(left_behind $dead | wc -l) == 2 ]] || fail "SIGKILL: expected its 2 namespaces left, found: $(left_behind $dead)"
"$nodes" cleanup-stale > "$scratch/stale.txt" 2>&1 || fail "cleanup-stale: $(cat "$scratch/stale.txt")"
[[ -z $(left_behind $dead) && -z $(marked) ]] || fail "cleanup-stale left $(left_behind $dead) $(marked)"
[[ $(left_behind $live | wc -l) == 2 ]] || fail "cleanup-stale removed a live invocation's namespaces"
touch "$scratch/go"
wait $live || fail "the live invocation failed after cleanup-stale ran"
[[ -z $(left_behind $live) ]] || fail "the live invocation left $(left_behind $live)"

# Without privilege: 77 and one line saying why (only checked when running as root, with setpriv).
if [[ $(id -u) == 0 ]] && command -v setpriv > /dev/null; then
  err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$nodes" -- true 2>&1)
  status=$?
  (( status == 77 )) || fail "unprivileged: exit $status, not 77: $err"
  [[ $err == "netns-nodes: unavailable: "* && $(wc -l <<< "$err") == 1 ]] || fail "unprivileged: '$err'"
fi
echo "PASS"
