# Sourced by the e2e scripts (tests/e2e/*.sh), from the repository root:
#   expect RC PATTERN -- CMD...
# runs CMD, checks its exit code and that its stdout+stderr match the extended regex PATTERN
# (the whole output is one record, so a pattern may span lines), prints ok/FAIL, and sets
# fail=1 on a mismatch (the caller exits with $fail).
expect() {
  local want_rc=$1 pattern=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want_rc" ] || ! grep -qzE -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> rc $rc (want $want_rc, output matching '$pattern'), output:"
    echo "$out" | head -20
    fail=1
  else
    echo "ok: $*"
  fi
}
