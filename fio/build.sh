#!/usr/bin/env bash
# Builds the zonefold fio ioengine (fio/engine.c) against the source of the
# fio that is installed, as ../shared/fio-engine.md describes: fio's
# io_u and thread_data layouts depend on its version and its configure
# output, so the headers must be the installed version's, configured here.
# Everything fetched or built stays in build/fio (never committed).
#
# Usage: fio/build.sh [OUT.so]   (default build/fio/zonefold-engine.so)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
W=$root/build/fio
out=${1:-$W/zonefold-engine.so}
mkdir -p "$W"

need=()
command -v fio >/dev/null || need+=(fio)
command -v gcc >/dev/null || need+=(gcc)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "fio/build.sh: need ${need[*]} (apt-get install -y ${need[*]}, as root)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

ver=$(dpkg-query -W -f='${Version}' fio)   # e.g. 3.33-3
upstream=${ver%-*}
src=$W/fio-$upstream
if [ ! -f "$src/config-host.h" ]; then
  if [ ! -d "$src" ]; then
    # A private apt configuration whose only entry is the system's own
    # first Debian stanza as deb-src: the system's apt state is untouched.
    awk 'BEGIN{RS=""; ORS="\n\n"} NR==1{sub(/Types: deb/, "Types: deb-src"); print}' \
      /etc/apt/sources.list.d/debian.sources > "$W/src.sources"
    mkdir -p "$W/lists/partial"
    o=(-o "Dir::Etc::SourceList=$W/src.sources" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$W/lists")
    apt-get "${o[@]}" update -qq
    (cd "$W" && apt-get "${o[@]}" source --download-only "fio=$ver" >"$W/source.log" 2>&1) || { cat "$W/source.log" >&2; exit 1; }
    tar -C "$W" -xf "$(ls "$W"/fio_"$upstream".orig.tar.* | grep -v "\.asc$" | head -1)"
  fi
  # configure writes config-host.h; hand-made defines silently change
  # io_u's layout.
  (cd "$src" && ./configure --disable-native >/dev/null)
fi

gcc -O2 -Wall -Werror -shared -fPIC -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -DFIO_INC_DEBUG \
  -include "$src/config-host.h" -I "$src" -o "$out.tmp" fio/engine.c
mv "$out.tmp" "$out"
echo "built $out against fio $upstream"
