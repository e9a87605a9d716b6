# What scripts/sanitize and scripts/tsan share: a sanitizer build directory
# beside build/, and the test programs of some suites built in it.  Sourced
# from the repository's top directory; LOGS names the log directory.
#
#   sanitizer_setup NAME DIR SANITIZE   DIR made (or refreshed) with
#                                       -Db_sanitize=SANITIZE; sets TOOL
#   sanitizer_suite_targets DIR SUITE...  prints the ninja targets of the
#                                       suites' test programs
#   sanitizer_build NAME DIR [TARGET...]  builds them (all when none)

sanitizer_setup() {
  local name=$1 dir=$2 sanitize=$3
  # The tests' uroce tool (counters, capture checks) comes from build/: the
  # sanitizers are not about it, and building it here (CLI11 under the
  # sanitizers) took 150 s of a CI run.  scripts/setup makes build/.
  TOOL=$PWD/build/tools/uroce
  [ -f build/build.ninja ] || scripts/setup --no-deps
  ninja -C build tools/uroce >"$LOGS/$name-tool.log" 2>&1 || { tail -40 "$LOGS/$name-tool.log"; exit 1; }
  if [ ! -f "$dir/build.ninja" ]; then
    # -O1: the sanitizers' usual level (the build is twice as fast as -O2);
    # -g1: line tables for the reports' stacks, a lighter build than -g.
    # b_lundef=false: the shared drop-ins leave the sanitizer runtime's
    # symbols to the process (meson's own advice for sanitized libraries).
    meson setup "$dir" --buildtype=plain -Dcpp_args='-O1 -g1' -Db_sanitize="$sanitize" -Db_lundef=false \
      -Dbenchmarks=disabled -Duroce_tool="$TOOL" >"$LOGS/$name-setup.log" 2>&1 ||
      { cat "$LOGS/$name-setup.log"; exit 1; }
  fi
  # Regenerate first when a meson.build changed, so that the tests listed
  # are the current ones.
  ninja -C "$dir" build.ninja >"$LOGS/$name-regen.log" 2>&1 || { cat "$LOGS/$name-regen.log"; exit 1; }
  local current
  current=$(meson introspect "$dir" --buildoptions | python3 -c '
import json, sys
print(next((o["value"] for o in json.load(sys.stdin) if o["name"] == "uroce_tool"), ""))')
  if [ "$current" != "$TOOL" ]; then  # a build directory from before the option
    meson configure "$dir" -Duroce_tool="$TOOL" >"$LOGS/$name-setup.log" 2>&1 ||
      { cat "$LOGS/$name-setup.log"; exit 1; }
  fi
}

sanitizer_suite_targets() {
  local dir=$1
  shift
  meson introspect "$dir" --tests | python3 -c '
import json, sys
suites = {"uroce:" + s for s in sys.argv[2:]}
for t in json.load(sys.stdin):
    if set(t["suite"]) & suites:
        cmd = t["cmd"][0]
        if cmd.startswith(sys.argv[1] + "/"):
            print(cmd[len(sys.argv[1]) + 1:])
' "$(cd "$dir" && pwd)" "$@"
}

sanitizer_build() {
  local name=$1 dir=$2
  shift 2
  local start=$SECONDS
  ninja -C "$dir" "$@" >"$LOGS/$name-build.log" 2>&1 || { tail -40 "$LOGS/$name-build.log"; exit 1; }
  echo "$name: $dir built in $((SECONDS - start)) s (log: $LOGS/$name-build.log)"
}
