# Sourced by the build and test scripts: `timed NAME COMMAND...` runs COMMAND and says how long it
# took; where TIERFLOW_TIMES names a file (.ci/run sets it), it also appends "NAME SECONDS STATUS"
# there, so that CI can end with a table of every step. Returns COMMAND's status.
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
