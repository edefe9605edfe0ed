#!/bin/sh
# install.sh: `make install` and `make uninstall`.
#
#   install.sh install   ROOT LAUNCHER LIBRARY
#   install.sh uninstall ROOT
#
# ROOT is $(DESTDIR)$(PREFIX). Installs
#   ROOT/bin/gemmshim                          the launcher
#   ROOT/lib/gemmshim/libgemmshim.so           the library (LD_PRELOAD only: not
#                                              for linking, so not in lib/ itself)
#   ROOT/lib/gemmshim/python/gemmshim/         the Python package `gemmshim report` runs
#   ROOT/share/doc/gemmshim/                   README and docs
# and ROOT/lib/gemmshim/install-manifest.txt: every file and every folder
# this install created, which uninstall removes (folders only when empty),
# so an uninstall leaves the prefix as it found it.
set -eu
cd "$(dirname "$0")/.."

action=$1 root=$2
manifest="$root/lib/gemmshim/install-manifest.txt"

case $action in
install)
  launcher=$3 library=$4
  created=""
  # The prefix and any missing folder above it (a DESTDIR staging tree).
  d=$root
  while [ ! -d "$d" ]; do created="
dir $d$created"; d=$(dirname "$d"); done
  mkdir -p "$root"
  # Then ours, noting those that did not exist yet.
  for d in "$root/bin" "$root/lib" "$root/lib/gemmshim" "$root/lib/gemmshim/python" \
           "$root/lib/gemmshim/python/gemmshim" "$root/lib/gemmshim/python/gemmshim/report" \
           "$root/share" "$root/share/doc" "$root/share/doc/gemmshim"; do
    if [ ! -d "$d" ]; then mkdir "$d"; created="$created
dir $d"; fi
  done
  # An earlier install's folders stay recorded.
  if [ -f "$manifest" ]; then created="$(grep '^dir ' "$manifest" || true)$created"; fi
  files=""
  put() { # mode source destination
    install -m "$1" "$2" "$3"
    files="$files
file $3"
  }
  put 0755 "$launcher" "$root/bin/gemmshim"
  put 0755 "$library" "$root/lib/gemmshim/libgemmshim.so"
  for f in python/gemmshim/*.py python/gemmshim/report/*.py; do
    put 0644 "$f" "$root/lib/gemmshim/python/${f#python/}"
  done
  for f in README.md docs/*.md; do put 0644 "$f" "$root/share/doc/gemmshim/$(basename "$f")"; done
  printf '%s\n' "$created$files" | grep -v '^$' | sort -u > "$manifest"
  echo "gemmshim: installed under $root (launcher $root/bin/gemmshim, library $root/lib/gemmshim/libgemmshim.so)"
  ;;
uninstall)
  if [ ! -f "$manifest" ]; then
    echo "gemmshim: nothing to uninstall: no $manifest (installed with a different PREFIX or DESTDIR?)" >&2
    exit 1
  fi
  dirs=$(grep '^dir ' "$manifest" | cut -c5- | sort -r)
  grep '^file ' "$manifest" | cut -c6- | while IFS= read -r f; do rm -f "$f"; done
  rm -f "$manifest"
  # Python may have left its cache in the package folder.
  rm -rf "$root/lib/gemmshim/python/gemmshim/__pycache__" "$root/lib/gemmshim/python/gemmshim/report/__pycache__"
  # Children before parents (a reversed sort puts a folder after everything
  # under it); a folder that holds something else stays.
  printf '%s\n' "$dirs" | while IFS= read -r d; do [ -z "$d" ] || rmdir "$d" 2>/dev/null || true; done
  echo "gemmshim: uninstalled from $root"
  ;;
*)
  echo "usage: $0 install ROOT LAUNCHER LIBRARY | uninstall ROOT" >&2
  exit 2
  ;;
esac
