#!/bin/sh
# readme_settings_table.sh PROGRAM README: README's settings table (between its two marker
# lines) must be exactly what PROGRAM (settings_table.cc) prints from transport/settings.def.
set -u
prog=$1 readme=$2
expected=$("$prog") || { echo "readme_settings_table: $prog failed"; exit 1; }
actual=$(sed -n '/^<!-- settings table: begin/,/^<!-- settings table: end/p' "$readme" | sed '1d;$d')
[ -n "$actual" ] || { echo "readme_settings_table: no marked settings table in $readme"; exit 1; }
if [ "$expected" != "$actual" ]; then
  echo "readme_settings_table: $readme's settings table differs from transport/settings.def:"
  printf '%s\n' "$expected" >/tmp/rdmx_settings_expected.$$
  printf '%s\n' "$actual" | diff -u - /tmp/rdmx_settings_expected.$$
  rm -f /tmp/rdmx_settings_expected.$$
  echo "replace the table with the output of $prog"
  exit 1
fi
echo "readme_settings_table: $readme matches transport/settings.def"
