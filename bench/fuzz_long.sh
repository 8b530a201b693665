#!/usr/bin/env bash
# One long run of one fuzz target, and its figures: executions, exec/s and coverage.
#
# Usage: bench/fuzz_long.sh NAME [SECONDS] [--record]
#   NAME       a target of fuzz/CMakeLists.txt (openai_request, hostlist, ...)
#   SECONDS    how long (default 1200)
#   --record   also write the figures under "Fuzzing (issue 11)" in bench/RESULTS.md,
#              replacing that target's earlier entry
# Runs at nice 19 on a copy of fuzz/corpus/NAME/ (the repository's corpus is left as it is);
# exits 1, naming the input, when the target crashes. FUZZ_BUILD: the build (build-fuzz);
# FUZZ_NO_BUILD=1 runs the target as it is built.
set -euo pipefail
cd "$(dirname "$0")/.."

name="" seconds=1200 record=false
for arg in "$@"; do
  case "$arg" in
    --record) record=true ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    [0-9]*) seconds=$arg ;;
    *) name=$arg ;;
  esac
done
[[ -n $name ]] || { echo "usage: bench/fuzz_long.sh NAME [SECONDS] [--record]" >&2; exit 2; }

build=${FUZZ_BUILD:-build-fuzz}
if [[ -z ${FUZZ_NO_BUILD:-} ]]; then
  if [[ ! -f $build/build.ninja ]]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DBMAS_FUZZ=ON \
      -DBMAS_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
  fi
  nice -n 19 ninja -C "$build" "${name}_fuzz"
fi
exe=$(awk -v n="$name" '$1 == n { print $2 }' "$build/fuzzers.txt")
[[ -x $exe ]] || { echo "fuzz_long.sh: no target $name in $build/fuzzers.txt" >&2; exit 2; }

work=$(mktemp -d /tmp/bmas-fuzz-long.XXXXXX)
mkdir -p "$work/corpus" "$work/artifacts"
cp -r "fuzz/corpus/$name"/. "$work/corpus"/
seeds=$(find "$work/corpus" -type f | wc -l)
command=(nice -n 19 "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus")
echo "fuzz_long.sh: ${command[*]}"
started=$(date -u '+%Y-%m-%d %H:%M')
rc=0
"${command[@]}" >"$work/fuzz.log" 2>&1 || rc=$?

final=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/fuzz.log" | tail -1 || true)
[[ -n $final ]] || final=$(grep -E '^#[0-9]+' "$work/fuzz.log" | tail -1 || true)
stat() { awk -v k="stat::$1:" '$1 == k { print $2 }' "$work/fuzz.log" | tail -1; }
field() { sed -nE "s/.* $1: ([^ ]+).*/\1/p" <<<"$final"; }
execs=$(stat number_of_executed_units)
exec_s=$(stat average_exec_per_sec)
rss=$(stat peak_rss_mb)
cov=$(field cov)
ft=$(field ft)
corp=$(field corp)
units=$(find "$work/corpus" -type f | wc -l)

echo "fuzz_long.sh: $name: ${seconds}s: executions $execs, exec/s $exec_s, cov $cov, ft $ft," \
  "corpus $seeds -> $units inputs ($corp), peak RSS ${rss} MB, exit $rc"
echo "fuzz_long.sh: libFuzzer's last line: $final"

crashed=false
if ((rc != 0)) || compgen -G "$work/artifacts/*" >/dev/null; then
  crashed=true
  grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$work/fuzz.log" | head -5 || true
  for a in "$work/artifacts"/*; do
    [[ -e $a ]] && echo "fuzz_long.sh: crashing input: $a (reproduce: $exe $a)"
  done
fi

if $record; then
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
  outcome=$($crashed && echo "**a crash** (exit $rc)" || echo "no crash, no hang, no leak")
  entry=$(cat <<EOF
### \`$name\`

Run on $started UTC; $(nproc) cores ($cpu), shared with other work, at nice 19 (\`bench/fuzz_long.sh $name $seconds --record\`), which runs:

\`\`\`
nice -n 19 $build/fuzz/${name}_fuzz -max_total_time=$seconds -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=ARTIFACTS/ CORPUS_COPY
\`\`\`

| seconds | executions | exec/s | cov | ft | corpus (seeds -> inputs) | peak RSS (MB) | outcome |
|---:|---:|---:|---:|---:|---|---:|---|
| $seconds | $execs | $exec_s | $cov | $ft | $seeds -> $units | $rss | $outcome |

libFuzzer's last line: \`$final\`
EOF
)
  ENTRY="$entry" NAME="$name" python3 - <<'PY'
import os, re
path = "bench/RESULTS.md"
text = open(path).read()
head = "# Fuzzing (issue 11)"
intro = ("\n\nLong runs of the libFuzzer targets in fuzz/ (clang 14, ASan+UBSan), one section per "
         "target, written by `bench/fuzz_long.sh NAME SECONDS --record`. cov: code edges reached; "
         "ft: libFuzzer's features (edges with hit counts).\n")
if head not in text:
    text = text.rstrip("\n") + "\n\n" + head + intro
start = text.index(head)
section = text[start:]
nxt = re.search(r"^# ", section[len(head):], re.M)
end = start + len(head) + nxt.start() if nxt else len(text)
section = text[start:end]
entry = os.environ["ENTRY"].rstrip("\n") + "\n"
title = "### `%s`" % os.environ["NAME"]
if title in section:
    s = section.index(title)
    e = section.find("\n### ", s + 1)
    section = section[:s] + entry + ("\n" + section[e + 1:] if e != -1 else "")
else:
    section = section.rstrip("\n") + "\n\n" + entry
text = text[:start] + section.rstrip("\n") + "\n" + ("\n" + text[end:] if end < len(text) else "")
open(path, "w").write(text)
PY
  echo "fuzz_long.sh: recorded in bench/RESULTS.md"
fi

if $crashed; then
  echo "fuzz_long.sh: $name crashed; input and log kept in $work" >&2
  exit 1
fi
rm -rf "$work"
