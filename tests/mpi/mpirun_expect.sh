#!/bin/sh
# mpirun_expect.sh [--quiet ERE] [--fails] [--match ERE]... [--within S] -- CMD [ARG]...
# Runs CMD (an mpirun line) under a time limit and checks what it printed, stdout and stderr
# kept apart.
#   --quiet ERE   CMD must exit 0, print nothing on stderr and on stdout only lines matching ERE
#                 (the program's own output): rdmx and its MTL say nothing unless verbose.
#   --fails       CMD must exit non-zero, by itself (not by the time limit).
#   --any-exit    CMD may exit with any status, by itself (not by the time limit).
#   --match ERE   stdout+stderr must contain a line matching ERE (repeatable).
#   --within S    time limit in seconds (default 300); exceeding it is a failure (a hang).
quiet=
fails=0
within=300
matches=
while [ $# -gt 0 ]; do
  case $1 in
    --quiet) quiet=$2; shift 2 ;;
    --fails) fails=1; shift ;;
    --any-exit) fails=2; shift ;;
    --match) matches="$matches
$2"; shift 2 ;;
    --within) within=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "mpirun_expect.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "mpirun_expect.sh: no command" >&2; exit 2; }

dir=$(mktemp -d) || exit 2
trap 'rm -rf "$dir"' EXIT
start=$(date +%s)
timeout -k 10 "$within" "$@" >"$dir/out" 2>"$dir/err"
rc=$?
elapsed=$(($(date +%s) - start))
echo "--- exit $rc after ${elapsed} s; stdout:"
cat "$dir/out"
echo "--- stderr:"
cat "$dir/err"
echo "---"

bad=0
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
  echo "FAIL: no exit within ${within} s (a hang)"
  bad=1
elif [ $fails -eq 1 ] && [ $rc -eq 0 ]; then
  echo "FAIL: exit 0, expected a failure"
  bad=1
elif [ $fails -eq 0 ] && [ $rc -ne 0 ]; then
  echo "FAIL: exit $rc"
  bad=1
fi
if [ -n "$quiet" ]; then
  if [ -s "$dir/err" ]; then
    echo "FAIL: something was printed on stderr (quiet unless verbose)"
    bad=1
  fi
  if grep -Ev "$quiet" "$dir/out" >"$dir/extra"; then
    echo "FAIL: stdout lines that are not the program's own (allowed: $quiet):"
    cat "$dir/extra"
    bad=1
  fi
fi
echo "$matches" | while IFS= read -r re; do
  [ -n "$re" ] || continue
  if ! cat "$dir/out" "$dir/err" | grep -Eq -- "$re"; then
    echo "FAIL: no line matches: $re"
    exit 1
  fi
done || bad=1
[ $bad -eq 0 ] && echo "PASS"
exit $bad
