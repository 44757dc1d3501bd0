# Sourced by the e2e scripts that drive medtune with a real Python client or reader:
#   pinned_venv VENV MODULE REQUIREMENT...
# Creates VENV (a folder under the build directory, kept between runs) with the pinned PyPI
# REQUIREMENTs unless MODULE already imports there. Where PyPI cannot be reached, the calling test
# is skipped (exit 77) with pip's last lines; the log goes to $TMP/venv.log.
pinned_venv() {
  local venv=$1 module=$2
  shift 2
  "$venv/bin/python" -c "import $module" 2>/dev/null && return 0
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >"$TMP/venv.log" 2>&1 ||
     ! "$venv/bin/pip" install -q "$@" >>"$TMP/venv.log" 2>&1; then
    rm -rf "$venv"
    echo "skip: cannot install $* from PyPI into $venv: $(tail -n 3 "$TMP/venv.log")"
    exit 77
  fi
}
