#!/usr/bin/env bash
# The Kubernetes manifests (examples/kubernetes/: an MPIJob for the MPI
# Operator, its ConfigMap and shared volume claim). No cluster runs here, so
# (1) tools/check_k8s_manifests.py validates them: built-in kinds against
# Kubernetes' own schemas (kubernetes-validate), the MPIJob against the MPI
# Operator's v2beta1 fields with its pod templates as core PodTemplates, and
# what the parts must agree on (-np, mounts, the config's paths); broken
# copies of the manifests must fail it. (2) The job's config passes
# `meshtrain train --check`. (3) The launcher's command runs as the operator
# runs it: a hostfile of two worker hosts with slotsPerWorker slots each
# (emulated hosts: network namespaces, scripts/netns-hosts.sh; our rsh agent
# stands in for the operator's ssh), the manifest's env, the ConfigMap's
# config with /shared moved to a temporary directory and a smaller model.
# It trains on 4 ranks over MPI, and the same command run again (a restarted
# launcher pod) resumes from the checkpoint on the "shared volume".
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
need_python_packages kubernetes_validate yaml jsonschema
MANIFESTS="$SRC/examples/kubernetes"
"$PYTHON" "$SRC/tools/check_k8s_manifests.py" "$MANIFESTS" "$TMP/job.json" || fail "the manifests do not validate"

# Broken copies must fail: a pod without containers, -np that is not
# workers x slots, /dev/shm on disk.
broken() {  # broken NAME SED-SCRIPT EXPECTED-MESSAGE
  mkdir -p "$TMP/$1"
  cp "$MANIFESTS"/*.yaml "$TMP/$1/"
  sed -i "$2" "$TMP/$1/mpijob.yaml"
  if "$PYTHON" "$SRC/tools/check_k8s_manifests.py" "$TMP/$1" "$TMP/$1.json" >"$TMP/$1.log" 2>&1; then
    fail "the checker accepted manifests with $1"
  fi
  grep -F "$3" "$TMP/$1.log" >/dev/null || { cat "$TMP/$1.log"; fail "$1: no '$3' in the checker's output"; }
}
broken no_containers 's/^          containers:/          container:/' "'containers' is a required property"
broken wrong_np '/- -np/{n;s/"4"/"6"/}' "mpirun -np 6 != 2 workers x 2 slots"
broken shm_on_disk 's/medium: Memory/medium: ""/' "/dev/shm is not an emptyDir of medium Memory"

"$PYTHON" - "$TMP/job.json" "$TMP" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))
open(f"{sys.argv[2]}/config.json", "w").write(job["config"].replace("/shared/", f"{sys.argv[2]}/shared/"))
open(f"{sys.argv[2]}/command", "w").write("\n".join(job["command"]) + "\n")
open(f"{sys.argv[2]}/config_path", "w").write(job["config_path"])
PY
"$BIN" train --check --config "$TMP/config.json" --nproc 4 >"$TMP/check.log" 2>&1 ||
  { cat "$TMP/check.log"; fail "meshtrain train --check refuses the ConfigMap's config"; }

. "$(dirname "$0")/lib/netns.sh"
hosts_up 2
# What the MPI Operator gives the launcher: a hostfile of the workers with
# slotsPerWorker slots each, and the way to start processes in them.
awk '{ print $1 " slots=2" }' "$HOSTS/hosts" >"$TMP/hostfile"
read -r h1 _ _ < <(sed -n 1p "$HOSTS/hosts")
subnet="${h1%.*}.0/24"
export OMPI_MCA_orte_default_hostfile="$TMP/hostfile" OMPI_MCA_plm_rsh_agent="$HOSTS/agent"
# A pod has one interface; this machine has several: keep MPI on the hosts' bridge.
export OMPI_MCA_oob_tcp_if_include="$subnet" OMPI_MCA_btl_tcp_if_include="$subnet"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # the manifest's env
mapfile -t cmd <"$TMP/command"
config_path=$(cat "$TMP/config_path")
for i in "${!cmd[@]}"; do
  case "${cmd[$i]}" in
    meshtrain) cmd[i]=$BIN ;;
    "$config_path") cmd[i]="$TMP/config.json" ;;
  esac
done
"$BIN" data synth --out "$TMP/shared/data" --tokens 60000 >/dev/null
SMALL=(--set model.preset=tiny --set model.vocab_size=256 --set train.threads=1 --set train.micro_batch=2
       --set train.eval_every=0 --set train.warmup=2 --set checkpoint.every=3)
timeout 300 "${cmd[@]}" "${SMALL[@]}" --set train.steps=3 >"$TMP/first.log" 2>&1 ||
  { grep -av '^[ {}]' "$TMP/first.log" | tail -30; fail "the launcher's command failed"; }
grep "4 ranks over mpi" "$TMP/first.log" >/dev/null ||
  { grep -av '^[ {}]' "$TMP/first.log" | head -20; fail "the launcher's ranks are not one MPI world of 4"; }
ls -d "$TMP"/shared/runs/char4l/ckpt/*3* >/dev/null 2>&1 || fail "no checkpoint of step 3 on the shared volume"
timeout 300 "${cmd[@]}" "${SMALL[@]}" --set train.steps=5 >"$TMP/again.log" 2>&1 ||
  { grep -av '^[ {}]' "$TMP/again.log" | tail -30; fail "the launcher's command failed when run again"; }
grep -aE "^resumed from .* at step 3" "$TMP/again.log" ||
  { grep -av '^[ {}]' "$TMP/again.log" | head -20; fail "the restarted launcher did not resume from step 3"; }
echo "the Kubernetes manifests validate and their launcher command trains and resumes: PASS"
