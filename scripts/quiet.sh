# quiet <log> <command...>: runs the command with its output kept in <log>, shown only if it fails, as
# plain text. Maven 3.8 writes colour resets even quiet, in batch mode and with style.color=never, so
# a log that is no terminal filled with escapes; setup's own lines say what each step does.
quiet() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 || {
    local rc=$?
    sed 's/\x1b\[[0-9;]*[A-Za-z]//g' "$log" >&2
    return $rc
  }
}
