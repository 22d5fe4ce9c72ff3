#!/usr/bin/env bash
# Training across two machines, emulated: two network namespaces joined by a
# bridge, each with its own address and hostname (scripts/netns-hosts.sh),
# and Open MPI's mpirun starting its daemons in them through an rsh agent
# (no sshd). 2 hosts x 2 ranks, ZeRO-2 over dp 4: MPI sees two nodes
# (shared memory within each, TCP between), and every step's loss equals
# the single-host run's (--nproc 4 over shared memory) within 1e-5
# (relative; the two-level reduction adds in another order).
# Then two faults. A rank stopped with SIGSTOP: the ranks waiting on it time
# out (10 s), name the operation, and abort the MPI job (MPI_Finalize would
# wait for the stopped rank forever), so mpirun ends. Host 1's link cut
# (`ip link set down` on its veth): Open MPI's daemons notice by TCP
# keepalive (tuned here to ~5 s; the default is minutes) and end the job
# naming the lost host, and no meshtrain process is left on either host;
# with the link back, the same command resumes from its checkpoint and
# finishes. Needs root for the namespaces; skips saying why.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/losses.sh"
. "$(dirname "$0")/lib/netns.sh"
hosts_up 2
read -r h1 _ link1 < <(sed -n 1p "$HOSTS/hosts")
read -r h2 _ _ < <(sed -n 2p "$HOSTS/hosts")
subnet="${h1%.*}.0/24"
MPIRUN=(mpirun --allow-run-as-root -np 4 -H "$h1:2,$h2:2" --mca plm_rsh_agent "$HOSTS/agent"
  --mca oob_tcp_if_include "$subnet" --mca btl_tcp_if_include "$subnet" --mca btl self,vader,tcp
  --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3)

"$BIN" data synth --out "$TMP/data" --tokens 60000 >/dev/null
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set data.val="$TMP/data/val_*.bin" --set train.warmup=2 --set train.lr=3e-3
      --set train.micro_batch=2 --set train.eval_every=0 --set train.threads=1
      --set zero.stage=2 --set parallel.bucket_mb=0.01)

"$BIN" train "${ARGS[@]}" --set train.steps=8 --nproc 4 --set telemetry.dir="$TMP/one_host" \
  >"$TMP/one_host.log" 2>&1 || { tail -20 "$TMP/one_host.log"; fail "single-host run failed"; }
timeout 300 "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --set train.steps=8 \
  --set telemetry.dir="$TMP/two_hosts" >"$TMP/two_hosts.log" 2>&1 ||
  { tail -30 "$TMP/two_hosts.log"; fail "the two-host run failed"; }
grep "4 ranks over mpi" "$TMP/two_hosts.log" >/dev/null ||
  { grep -v '^[ {}]' "$TMP/two_hosts.log" | head -20; fail "the two-host run is not over MPI"; }
same_losses "$TMP/two_hosts/metrics.jsonl" "$TMP/one_host/metrics.jsonl" 1 1e-5 8

# A rank that stops answering (SIGSTOP, one host): the ranks waiting on it
# time out after 10 s and abort the MPI job, so mpirun ends; before, the
# timed-out rank exited into MPI_Finalize, which waited for the stopped rank
# forever.
export MESHTRAIN_COMM_TIMEOUT=10
# long_run NAME MPIRUN-ARGS... [-- TRAIN-ARGS...]: starts it in the
# background as MPI_PID.
long_run() {
  local name=$1 launcher=() extra=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do launcher+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  extra=("$@")
  "${launcher[@]}" -x MESHTRAIN_COMM_TIMEOUT "$BIN" train "${ARGS[@]}" --set train.steps=1000000 \
    "${extra[@]}" --set telemetry.dir="$TMP/$name" >"$TMP/$name.log" 2>&1 &
  MPI_PID=$!
  for _ in $(seq 300); do [ -s "$TMP/$name/metrics.jsonl" ] && break; sleep 0.1; done
  [ -s "$TMP/$name/metrics.jsonl" ] || { tail -20 "$TMP/$name.log"; fail "$name: no step logged"; }
  sleep 1
}
ended_within() {  # ended_within SECONDS NAME: mpirun (MPI_PID) ends in time, non-zero
  local start=$SECONDS rc=0
  while kill -0 "$MPI_PID" 2>/dev/null; do
    [ $((SECONDS - start)) -lt "$1" ] ||
      { grep -av '^[ {}]' "$TMP/$2.log" | tail -20; fail "$2: mpirun still running after $1 s"; }
    sleep 0.2
  done
  wait "$MPI_PID" || rc=$?
  MPI_PID=""
  [ "$rc" -ne 0 ] || fail "$2: the job exited 0"
  echo "$2: the job ended $((SECONDS - start)) s after the fault, exit code $rc"
}
long_run stopped mpirun --allow-run-as-root --oversubscribe -np 2
victim=$(pgrep -f "telemetry.dir=$TMP/stopped" | while read -r p; do
  [ "$(ps -o comm= -p "$p")" = meshtrain ] && echo "$p"; done | tail -1)
[ -n "$victim" ] || fail "stopped: no rank process found"
kill -STOP "$victim"
ended_within 40 stopped
grep -E "timed out after 10.0 s" "$TMP/stopped.log" >/dev/null ||
  { grep -av '^[ {}]' "$TMP/stopped.log" | tail -20; fail "stopped: no rank named the timed-out operation"; }
kill -9 "$victim" 2>/dev/null || true

# Host 1's link cut mid-run. Open MPI's daemons notice the lost link by TCP
# keepalive (the settings above: ~5 s) and end the job, naming the host they
# lost; ranks on the cut host that outlive their daemon time out and abort on
# their own. Nothing of the job is left on either host. Then the link comes
# back and the same command, run again as a scheduler's retry would, resumes
# from the newest checkpoint and finishes the run.
CUT=(--set checkpoint.dir="$TMP/cut_ckpt" --set checkpoint.every=50 --set checkpoint.resume=auto)
long_run cut "${MPIRUN[@]}" -- "${CUT[@]}"
# The fault comes once a checkpoint is complete (its index written).
for _ in $(seq 300); do compgen -G "$TMP/cut_ckpt/step_*/index.json" >/dev/null && break; sleep 0.1; done
compgen -G "$TMP/cut_ckpt/step_*/index.json" >/dev/null ||
  { grep -a checkpoint "$TMP/cut.log" | tail -5; fail "cut: no complete checkpoint within 30 s"; }
ip link set "$link1" down
ended_within 40 cut
grep -E "lost communication with a remote daemon|timed out after 10.0 s" "$TMP/cut.log" >/dev/null ||
  { grep -av '^[ {}]' "$TMP/cut.log" | tail -20; fail "cut: neither MPI nor a rank named the failure"; }
cut_ns=$(sed -n 1p "$HOSTS/hosts" | awk '{print $2}')
grep -aE "Remote daemon.* on node ($h1|$cut_ns)\b|$cut_ns.*timed out|rank [01]: .*timed out" "$TMP/cut.log" >/dev/null ||
  { grep -av '^[ {}]' "$TMP/cut.log" | tail -20; fail "cut: the lost host ($h1, $cut_ns) is not named"; }
for ns in $(awk '{print $2}' "$HOSTS/hosts"); do
  start=$SECONDS
  while ip netns pids "$ns" | xargs -r ps -o comm= -p | grep meshtrain >/dev/null; do
    [ $((SECONDS - start)) -lt 30 ] ||
      { ip netns pids "$ns" | xargs -r ps -o pid,comm,args -p; fail "cut: ranks left running on $ns"; }
    sleep 0.5
  done
done
cut_at=$(tail -1 "$TMP/cut/metrics.jsonl" | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['step'])")
ip link set "$link1" up
timeout 300 "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" "${CUT[@]}" --set train.steps=$((cut_at + 20)) \
  --set telemetry.dir="$TMP/cut" >"$TMP/retry.log" 2>&1 ||
  { grep -av '^[ {}]' "$TMP/retry.log" | tail -20; fail "retry after the link came back failed"; }
grep -aE "^resumed from .* at step [1-9][0-9]*" "$TMP/retry.log" ||
  { grep -av '^[ {}]' "$TMP/retry.log" | head -20; grep -a checkpoint "$TMP/cut.log" | tail -5
    ls -la "$TMP/cut_ckpt" || true; fail "the retry did not resume from a checkpoint"; }
[ "$(tail -1 "$TMP/cut/metrics.jsonl" | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['step'])")" = $((cut_at + 20)) ] ||
  fail "the retry did not reach step $((cut_at + 20))"
echo "multi-node training over two emulated hosts: PASS"
