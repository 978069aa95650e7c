#!/bin/sh
# The include graph tells the architecture (issue 22): each folder's sources include only the
# folders below it, and engine/ keeps its sources in its rooms.
#   daemon/ -> jobs/, config/, engine/ -> kernels/ -> base/      (jobs/ and config/ -> base/)
# Usage: layers_test.sh SOURCE_ROOT. Prints every edge that breaks the layering; exits 1 if any.
set -eu
cd "$1"
bad=0
# check FOLDER ALLOWED...: every #include "x/..." in FOLDER's sources names an allowed folder.
check() {
  folder=$1
  shift
  allowed="$*"
  for f in $(find "$folder" -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh'); do
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | while IFS= read -r line; do
      target=$(printf '%s\n' "$line" | sed 's/.*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/')
      top=${target%%/*}
      [ "$top" = "$target" ] && continue  # a file of the same folder, by its bare name
      ok=0
      for a in $allowed; do [ "$top" = "$a" ] && ok=1; done
      [ $ok = 1 ] || echo "$f:${line%%:*}: $folder/ must not include $target"
    done
  done
}
out=$( {
  check base base
  check kernels kernels base
  check engine engine kernels base
  check jobs jobs base
  check config config base
  check daemon daemon jobs config engine base
} )
if [ -n "$out" ]; then
  printf '%s\n' "$out"
  bad=1
fi
loose=$(find engine -maxdepth 1 \( -name '*.cpp' -o -name '*.h' \) -print)
if [ -n "$loose" ]; then
  echo "engine/ keeps its sources in its rooms (core/, text/, model/, backends/, sampling/, structured/, tools/):"
  printf '%s\n' "$loose"
  bad=1
fi
# The dev tools are not in the library the daemon links.
if grep -n 'tools/' engine/CMakeLists.txt | grep -q 'llmq_engine'; then
  echo "engine/tools/ must not be part of llmq_engine"
  bad=1
fi
[ $bad = 0 ] && echo "layers: every include follows daemon -> jobs, config, engine -> kernels -> base"
exit $bad
