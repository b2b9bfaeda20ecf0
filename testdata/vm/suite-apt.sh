# suite-apt.sh - sourced by run.sh and peers.sh: download packages from
# another Debian suite (e.g. sid, trixie-backports) without touching the
# host's apt configuration or its installed packages.
#
# suite_apt CACHE SUITE sets SUITE_APT (an array of apt options) to a
# private configuration in CACHE/apt-SUITE: a sources file with the host's
# own Debian archive URI and keyring and "Suites: SUITE", its own package
# lists and archive cache, and an empty dpkg status (so nothing installed on
# the host counts). The lists are fetched on first use; suite_apt_update
# fetches them again. Use it only with apt-cache and `apt-get download`:
# never install from it.
# shellcheck shell=bash

suite_apt() {
  local cache=$1 suite=$2 d uri keyring
  d=$cache/apt-$suite
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
  if [ ! -s "$d/$suite.sources" ]; then
    # the host's own archive (deb822 first, then one-line format)
    uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    keyring=$(awk '/^Signed-By:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$uri" ] || uri=$(awk '$1=="deb" && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$uri" ] || uri=http://deb.debian.org/debian
    [ -n "$keyring" ] && [ -f "$keyring" ] || keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
      "$uri" "$suite" "$keyring" > "$d/$suite.sources"
  fi
  SUITE_APT=(-o "Dir::Etc::SourceList=$d/$suite.sources" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache" -o Dir::State::status=/dev/null
    -o APT::Sandbox::User=root)
  if ! ls "$d/lists/"*_Packages* >/dev/null 2>&1; then suite_apt_update; fi
}

suite_apt_update() {
  echo "vm: fetching the package lists of ${SUITE_APT[1]#Dir::Etc::SourceList=}" >&2
  apt-get -q "${SUITE_APT[@]}" update >&2
}

# suite_download DIR PKG... downloads each PKG's .deb into DIR unless one is
# there already; on a miss it refreshes the lists once and retries.
suite_download() {
  local dir=$1; shift
  local need=() p
  for p in "$@"; do ls "$dir/${p}"_*.deb >/dev/null 2>&1 || need+=("$p"); done
  [ ${#need[@]} -gt 0 ] || return 0
  mkdir -p "$dir"
  ( cd "$dir" && apt-get -q "${SUITE_APT[@]}" download "${need[@]}" >&2 ) ||
    { suite_apt_update && ( cd "$dir" && apt-get -q "${SUITE_APT[@]}" download "${need[@]}" >&2 ); }
}
