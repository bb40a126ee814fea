# Sourced by the build and test scripts.
#   timed NAME COMMAND...  runs COMMAND and says how long it took; where TIERFLOW_TIMES names a
#                          file, it also appends "NAME SECONDS STATUS" there. Returns COMMAND's status.
#   timed_table PREFIX     (a driver such as .ci/run) collects every step its scripts time into a
#                          new TIERFLOW_TIMES and prints them as a table when it exits, pass or fail.
timed() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  local took=$((SECONDS - start))
  echo "time: $name took $took s" >&2
  if [ -n "${TIERFLOW_TIMES:-}" ]; then
    echo "$name $took $rc" >>"$TIERFLOW_TIMES"
  fi
  return "$rc"
}

timed_table() {
  TIERFLOW_TIMES=$(mktemp)
  TIMED_PREFIX=$1
  export TIERFLOW_TIMES
  trap _timed_print_table EXIT
}

_timed_print_table() {
  local rc=$?
  echo
  echo "$TIMED_PREFIX: steps and their times (s)"
  awk -v p="$TIMED_PREFIX" '{ printf "%s:   %-12s %6d%s\n", p, $1, $2, ($3 == 0 ? "" : "  (failed, exit " $3 ")") }' "$TIERFLOW_TIMES"
  echo "$TIMED_PREFIX: ${SECONDS} s in all"
  rm -f "$TIERFLOW_TIMES"
  return "$rc"
}
