#!/bin/sh
# One error style at every boundary (issue 22): errors leave a unit as a Status or a StatusOr,
# never as an exception. A unit may throw only where it catches the exception itself, and then
# says where on the throw's line: "// caught in <Function>" (jobs/batch_request.cpp's LineError).
# Usage: throw_test.sh SOURCE_ROOT. Prints every `throw` of the production sources (base, kernels,
# engine, jobs, config, daemon) without that comment; exits 1 if there is any.
set -eu
cd "$1"
out=$(find base kernels engine jobs config daemon \
  \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print | sort |
  while IFS= read -r f; do
    # The code of a line is what comes before its `//`: a comment may say "throw" freely.
    awk -v f="$f" '{
      code = $0
      sub(/\/\/.*/, "", code)
      if (code ~ /(^|[^A-Za-z0-9_])throw([^A-Za-z0-9_]|$)/ && $0 !~ /\/\/ caught in [A-Za-z]/)
        print f ":" FNR ": " $0
    }' "$f"
  done)
if [ -n "$out" ]; then
  echo "a throw that does not say where it is caught (// caught in <Function>, in its own unit):"
  printf '%s\n' "$out"
  exit 1
fi
echo "throws: every throw is caught in its own unit and says where"
