# Sourced after common.sh by the tests on emulated hosts (scripts/netns-hosts.sh).
# hosts_up N: skips (exit 77, saying why) without mpirun or root; else brings
# up N hosts listed in $HOSTS/hosts, torn down at exit with TMP (and the
# background mpirun MPI_PID, when one is set).
MPI_PID=""
hosts_cleanup() {
  [ -n "$MPI_PID" ] && kill -9 "$MPI_PID" 2>/dev/null
  bash "$SRC/scripts/netns-hosts.sh" down "$HOSTS" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
hosts_up() {
  command -v mpirun >/dev/null || { echo "skipped: no mpirun (Open MPI)"; exit 77; }
  [ "$(id -u)" -eq 0 ] || { echo "skipped: the emulated hosts (network namespaces) need root"; exit 77; }
  HOSTS="$TMP/hosts"
  trap hosts_cleanup EXIT
  local status=0
  bash "$SRC/scripts/netns-hosts.sh" up "$1" "$HOSTS" || status=$?
  [ "$status" -eq 77 ] && exit 77
  [ "$status" -eq 0 ] || fail "netns-hosts.sh up failed"
}
