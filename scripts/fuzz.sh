#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, build-fuzz/) and runs them one after the other.
#
# Usage: scripts/fuzz.sh [--total SECONDS] [--regression] [--update-corpus] [NAME ...]
#   --total SECONDS   time for all the targets together, shared equally (default 300)
#   --regression      instead: run each target once over each of its seeds, and stop
#   --update-corpus   add the inputs that found new coverage to fuzz/corpus/NAME/ (merged)
#   NAME ...          only these targets (default: every target fuzz/CMakeLists.txt adds)
# Each target fuzzes a copy of its committed corpus in a scratch directory; the repository's
# corpus changes only with --update-corpus. Exits 1 when a target crashed, leaked, ran out of
# memory or hung, after printing the path of the input that did it.
# Environment: FUZZ_BUILD (default build-fuzz), FUZZ_WORK (scratch directory; default a new
# one under /tmp, kept when something was found).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

total=300
regression=false
update=false
only=()
while (($#)); do
  case "$1" in
    --total) total=${2:?--total needs seconds}; shift ;;
    --regression) regression=true ;;
    --update-corpus) update=true ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) only+=("$1") ;;
  esac
  shift
done

build=${FUZZ_BUILD:-build-fuzz}
if [[ ! -f $build/build.ninja ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DBMAS_FUZZ=ON \
    -DBMAS_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    '-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG'
fi
nice -n 19 ninja -C "$build" fuzzers

# "NAME EXECUTABLE CORPUS" per line, written by fuzz/CMakeLists.txt.
names=() exes=() corpora=()
while read -r name exe corpus; do
  [[ -n $name ]] || continue
  if ((${#only[@]})) && [[ ! " ${only[*]} " == *" $name "* ]]; then continue; fi
  names+=("$name") exes+=("$exe") corpora+=("$corpus")
done <"$build/fuzzers.txt"
for want in "${only[@]}"; do
  [[ " ${names[*]} " == *" $want "* ]] || { echo "fuzz.sh: no target $want" >&2; exit 2; }
done
((${#names[@]})) || { echo "fuzz.sh: no targets" >&2; exit 2; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if $regression; then
  failed=()
  for i in "${!names[@]}"; do
    seeds=("${corpora[i]}"/*)
    if nice -n 19 "${exes[i]}" -timeout=10 -rss_limit_mb=2048 "${seeds[@]}" >"/tmp/fuzz-$$-${names[i]}.log" 2>&1; then
      echo "fuzz.sh: ${names[i]}: ${#seeds[@]} seeds pass"
    else
      tail -40 "/tmp/fuzz-$$-${names[i]}.log"
      failed+=("${names[i]}")
    fi
    rm -f "/tmp/fuzz-$$-${names[i]}.log"
  done
  ((${#failed[@]} == 0)) || { echo "fuzz.sh: seeds fail in: ${failed[*]}" >&2; exit 1; }
  exit 0
fi

per_target=$((total / ${#names[@]}))
((per_target >= 1)) || { echo "fuzz.sh: --total $total is under a second per target" >&2; exit 2; }
work=${FUZZ_WORK:-$(mktemp -d /tmp/bmas-fuzz.XXXXXX)}
mkdir -p "$work"
echo "fuzz.sh: ${#names[@]} targets, ${per_target}s each, in $work"

found=()
for i in "${!names[@]}"; do
  name=${names[i]}
  corpus="$work/$name/corpus"
  artifacts="$work/$name/artifacts"
  rm -rf "${corpus:?}" "$artifacts"
  mkdir -p "$corpus" "$artifacts"
  cp -r "${corpora[i]}"/. "$corpus"/
  log="$work/$name/fuzz.log"
  rc=0
  nice -n 19 "${exes[i]}" -max_total_time="$per_target" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1 || rc=$?
  stats=$(grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec)' \
    "$log" | tr -s ' \t' ' ' | tr '\n' ' ')
  if ((rc != 0)) || compgen -G "$artifacts/*" >/dev/null; then
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -5 || true
    for a in "$artifacts"/*; do
      [[ -e $a ]] && echo "fuzz.sh: $name: crashing input: $a (reproduce: ${exes[i]} $a)"
    done
    echo "fuzz.sh: $name: FAILED (exit $rc); log: $log"
    found+=("$name")
  else
    echo "fuzz.sh: $name: ok: $stats"
  fi
  if $update; then
    "${exes[i]}" -merge=1 "${corpora[i]}" "$corpus" >>"$log" 2>&1
    echo "fuzz.sh: $name: corpus merged into ${corpora[i]#"$repo"/}"
  fi
done

if ((${#found[@]})); then
  echo "fuzz.sh: found something in: ${found[*]} (inputs and logs kept in $work)" >&2
  exit 1
fi
[[ -n ${FUZZ_WORK:-} ]] || rm -rf "$work"
echo "fuzz.sh: no crash in ${#names[@]} targets"
