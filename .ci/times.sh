# Sourced by .ci/run and .ci/test-all.sh: where CI's time goes. Each `section NAME` ends the
# previous section of the same script and starts NAME; `timed NAME COMMAND...` times one command
# (a test binary, a background lane's step). Every entry goes to $CI_TIMES (a file shared with
# child scripts), and the script that created it prints the table at its end with `print_times`.
if [ -z "${CI_TIMES:-}" ]; then
  CI_TIMES=$(mktemp)
  CI_TIMES_OWNER=$$
  export CI_TIMES
  # A run that fails shows where its time went too.
  trap print_times EXIT
fi

# Ends the running section of this script, recording its seconds.
section_end() {
  if [ -n "${ci_section:-}" ]; then
    printf '%s\t%s\n' "$(($(date +%s) - ci_section_started))" "$ci_section" >>"$CI_TIMES"
    ci_section=
  fi
}

# Ends the running section and starts the one named $1 (printed as a heading).
section() {
  section_end
  echo "== $1"
  ci_section=$1
  ci_section_started=$(date +%s)
}

# Runs COMMAND... and records its seconds under NAME ($1), whatever its exit status (returned).
timed() {
  local name=$1 started status=0
  shift
  started=$(date +%s)
  "$@" || status=$?
  printf '%s\t%s\n' "$(($(date +%s) - started))" "$name" >>"$CI_TIMES"
  return "$status"
}

# Prints the table, longest first, if this script created $CI_TIMES (once: the EXIT trap finds it
# gone after an explicit call).
print_times() {
  section_end
  if [ "${CI_TIMES_OWNER:-}" = "$$" ] && [ -f "$CI_TIMES" ]; then
    echo "== where the time went (seconds; the lanes marked background and beside ran beside the tests)"
    sort -t$'\t' -k1,1nr "$CI_TIMES" | awk -F'\t' '{ printf "%6d  %s\n", $1, $2 }'
    rm -f "$CI_TIMES"
  fi
}
