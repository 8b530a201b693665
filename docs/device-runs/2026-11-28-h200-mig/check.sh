# The read-only GPU check of issue 26: NVML's MIG read path and bmas doctor on a real GPU.
# Changes nothing on the GPU (no MIG mode, no instance). Writes its findings under $OUT.
# $BIN (default .devrun) holds the stripped bmas and, in lib/, the shared libraries it links
# that the GPU machine lacks (libfmt, spdlog, simdjson, toml++, tcmalloc, sqlite, OpenSSL).
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$PWD/.devrun}
export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$BIN/bmas
S=$(mktemp -d)
OUT=${OUT:-/tmp/devout}; mkdir -p $OUT
exec > >(tee $OUT/check.log) 2>&1
echo "== host $(hostname -s), $(uname -r)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,uuid,memory.total,mig.mode.current,mig.mode.pending,driver_version,compute_cap --format=csv
  echo "== nvidia-smi mig -lgip (read-only)"; nvidia-smi mig -lgip 2>&1 | head -40
  echo "== nvidia-smi mig -lgipp (read-only)"; nvidia-smi mig -lgipp 2>&1 | head -40
  echo "== nvidia-smi -q MIG section"; nvidia-smi -q 2>&1 | grep -A4 -i "MIG Mode" | head
fi
echo "== pynvml profile table"; timeout 60 python3 $HERE/nvml_profiles.py > $OUT/nvml_profiles.json 2>&1; echo rc=$?; head -c 6000 $OUT/nvml_profiles.json
bash $HERE/inv.sh $S
C=""
if [ -n "$NVML_LIB" ]; then printf '[telemetry]\nnvml_library = "%s"\n' "$NVML_LIB" > $S/bmas.toml; C="--config $S/bmas.toml"; fi
echo "== bmas doctor"; timeout 60 $B $C --state-dir $S/state doctor; echo rc=$?
timeout 60 $B $C --state-dir $S/state doctor --json > $OUT/doctor.json; echo rc=$?
echo "== bmas doctor --cluster whole"; timeout 60 $B $C --state-dir $S/state doctor --cluster $S/whole.toml; echo rc=$?
echo "== bmas doctor --cluster layout"; timeout 60 $B $C --state-dir $S/state doctor --cluster $S/layout.toml --json > $OUT/doctor-layout.json; echo rc=$?
python3 -c "import json,sys;[print(c) for c in json.load(open(sys.argv[1]))['checks'] if c['name'] in ('mig-layout','gpu','gpus','gpu-count')]" $OUT/doctor-layout.json
echo "== bmas agent: /gpus and /metrics from NVML"
timeout 40 $B $C --state-dir $S/state agent --metrics-port 19491 --telemetry-interval 1 ${NVML_LIB:+--nvml-library $NVML_LIB} > $OUT/agent.log 2>&1 &
agent=$!
for i in $(seq 1 30); do curl -s http://127.0.0.1:19491/gpus > /dev/null && break; sleep 0.5; done
sleep 2.5
A="Authorization: Bearer $(cat $S/state/run/operator.secret)"
curl -s -H "$A" http://127.0.0.1:19491/gpus > $OUT/agent-gpus.json; head -c 3000 $OUT/agent-gpus.json; echo
curl -s -H "$A" http://127.0.0.1:19491/metrics | grep -E "^DCGM|^bmas_gpu" | head -30
kill $agent 2>/dev/null; wait $agent
tail -5 $OUT/agent.log
echo "== done"
