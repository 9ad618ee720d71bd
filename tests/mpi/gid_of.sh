#!/bin/sh
# gid_of.sh DEV IPV4: prints the index of the RoCE v2 GID rxe made for IPV4 on port 1 of DEV
# (IPv4-mapped ::ffff:a.b.c.d), waiting up to 5 s for it to appear after the address was added.
# Reads only the first 16 entries (the whole table costs tens of seconds under TCG). Exit 1 when
# there is none. Used by unreachable_peer.sh here and, over ssh, by hosts_unreachable.sh on the
# other host (same path: both hosts see the same root).
dev=$1
IFS=. read -r a b c d <<EOF
$2
EOF
want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d")
ports=/sys/class/infiniband/$dev/ports/1
tries=0
while [ $tries -lt 50 ]; do
  n=0
  while [ $n -lt 16 ]; do
    if [ "$(cat "$ports/gids/$n" 2>/dev/null)" = "$want" ] &&
       grep -q "RoCE v2" "$ports/gid_attrs/types/$n" 2>/dev/null; then
      echo "$n"
      exit 0
    fi
    n=$((n + 1))
  done
  sleep 0.1
  tries=$((tries + 1))
done
exit 1
