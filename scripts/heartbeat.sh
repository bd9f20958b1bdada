#!/usr/bin/env bash
# A long step's pulse on stderr: every $COLOSSAL_HEARTBEAT seconds (300), the clock and the
# oldest running processes whose command matches PATTERN, with their age, so a log that stops
# (a CI deadline, a stuck compiler or test) shows what was running. Started in the background by
# build.sh and test.sh, stopped when their step ends.
#   scripts/heartbeat.sh LABEL PATTERN
label="$1" pattern="$2"
# sleep's streams go to /dev/null: the one in flight when this loop is killed outlives it, and
# must not hold the caller's stderr open (a pipe reader would wait for it).
while sleep "${COLOSSAL_HEARTBEAT:-300}" >/dev/null 2>&1; do
  running=$(ps -eo etimes=,args= | awk -v pat="$pattern" '
      $2 ~ pat {
        n = split($2, parts, "/"); line = "  " $1 " s: " parts[n]
        # What it works on: source, output and test-selection arguments, not its flags.
        # (cc1plus repeats the source as -dumpbase NAME -dumpbase-ext .EXT: skipped.)
        for (i = 3; i <= NF && length(line) < 200; i++)
          if (($i ~ /\.(cpp|cxx|cc|cu|o|so|py|ptx|cubin)$/ && $(i - 1) !~ /^-dumpbase/) || $i ~ /^--gtest_filter=/)
            line = line " " $i
        print line }' |
    sort -rn | head -n 4)
  printf '[%s] %s still running; oldest:\n%s\n' "$label" "$(date -u +%H:%M:%S)" "${running:-  (none matched)}" >&2
done
