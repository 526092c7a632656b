#!/usr/bin/env bash
# Real-GPU check of the local service's GPU scheduling, run on a GPU machine from the repository root:
# the unit + real-NVML tests (tests/services/test_gpu.py), then 4 torch trials with trialGpuNumber 1 and
# trialConcurrency 2 on one GPU: each must see one GPU (CUDA_VISIBLE_DEVICES) and no two may overlap.
# .whl/ holds wheels of the dependencies the machine lacks (pydantic, starlette, uvicorn, asyncssh, ...);
# src/nnix.egg-info must be present (pip install -e . makes it) so that the entry points are found.
set -u
R=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$R/src PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import pydantic, starlette, uvicorn, nnix; print('deps ok', pydantic.VERSION)"
echo "== unit + real-NVML tests"
python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/services/test_gpu.py -rs 2>&1 | tail -6
echo "== end to end: 4 trials x 1 GPU, concurrency 2, one GPU"
mkdir -p /tmp/g && cd /tmp/g
cat > trial.py <<'P'
import os, time, nni, torch
p = nni.get_next_parameter()
print("START", time.time(), "CVD", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
x = torch.randn(4096, 4096, device="cuda")
for _ in range(50):
    x = x @ x.T / 4096
torch.cuda.synchronize()
print("GPU", torch.cuda.get_device_name(0), torch.cuda.device_count(), flush=True)
time.sleep(2)
print("END", time.time(), flush=True)
nni.report_final_result(p["x"])
P
printf '%s\n' '{"searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}}, "trialCommand": "python3 trial.py", "trialCodeDirectory": ".", "trialConcurrency": 2, "maxTrialNumber": 4, "trialGpuNumber": 1, "tuner": {"name": "Random"}, "trainingService": {"platform": "local", "useActiveGpu": true}}' > config.yml
export NNIX_HOME=/tmp/g/home
timeout 240 python3 -m nnix.cli.main create --config config.yml --foreground --port 0 2>&1 | tail -9
python3 - <<'P'
import glob, re
spans = []
for f in sorted(glob.glob("/tmp/g/home/*/environments/*/trials/*/trial.stdout")):
    t = open(f).read()
    s = re.search(r"START ([\d.]+) CVD (\S+)", t); e = re.search(r"END ([\d.]+)", t); g = re.search(r"GPU (.+)", t)
    print(f.split("/")[-2], s and s.group(2), g and g.group(1), "ok" if e else "no END")
    if s and e: spans.append((float(s.group(1)), float(e.group(1))))
spans.sort()
overlap = any(b[0] < a[1] for a, b in zip(spans, spans[1:]))
print("trials with spans:", len(spans), "overlapping on the one GPU:", overlap)
P
echo "== useActiveGpu false: a foreign process computing on the GPU holds the trial back until it ends"
cd /tmp/g
python3 - > hog.log 2>&1 <<'P' &
import time, torch
x = torch.randn(2048, 2048, device="cuda")
print("HOG up", time.time(), flush=True)
t = time.time()
while time.time() - t < 60:
    x = x @ x.T / 2048
    torch.cuda.synchronize()
P
HOG=$!
sleep 8
python3 -c "
import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
print('NVML sees', len(n.nvmlDeviceGetComputeRunningProcesses(h)), 'compute processes, util', n.nvmlDeviceGetUtilizationRates(h).gpu, '%')"
sed -e 's/"useActiveGpu": true/"useActiveGpu": false/' -e 's/"maxTrialNumber": 4/"maxTrialNumber": 1/' -e 's/"trialConcurrency": 2/"trialConcurrency": 1/' config.yml > config2.yml
export NNIX_HOME=/tmp/g/home2
timeout 150 python3 -m nnix.cli.main create --config config2.yml --foreground --port 18311 > fg2.log 2>&1 &
FG=$!
sleep 10
python3 -c "
import json, urllib.request
print('check-status while the foreign process runs:', urllib.request.urlopen('http://127.0.0.1:18311/api/v1/nni/check-status', timeout=10).read().decode()[:400])"
echo "trials started while it runs: $(grep -l START /tmp/g/home2/*/environments/*/trials/*/trial.stdout 2>/dev/null | wc -l)"
KILLED=$(python3 -c 'import time; print(time.time())'); kill $HOG; wait $HOG 2>/dev/null
wait $FG; echo "foreground exit: $?"; tail -5 fg2.log
python3 - "$KILLED" <<'P'
import glob, re, sys
for f in glob.glob("/tmp/g/home2/*/environments/*/trials/*/trial.stdout"):
    s = re.search(r"START ([\d.]+)", open(f).read())
    print("trial started", "AFTER" if s and float(s.group(1)) > float(sys.argv[1]) else "BEFORE/never", "the foreign process was killed")
P
echo "== maxTrialNumberPerGpu 2: two 1-GPU trials share the one GPU at once"
cd /tmp/g
sed -e 's/"useActiveGpu": true/"useActiveGpu": true, "maxTrialNumberPerGpu": 2, "gpuIndices": "0"/' -e 's/"maxTrialNumber": 4/"maxTrialNumber": 2/' config.yml > config3.yml
export NNIX_HOME=/tmp/g/home3
timeout 120 python3 -m nnix.cli.main create --config config3.yml --foreground --port 0 2>&1 | tail -2
python3 - <<'P'
import glob, re
spans = []
for f in glob.glob("/tmp/g/home3/*/environments/*/trials/*/trial.stdout"):
    t = open(f).read()
    s = re.search(r"START ([\d.]+) CVD (\S+)", t); e = re.search(r"END ([\d.]+)", t)
    print(f.split("/")[-2], "CVD", s and s.group(2), "ok" if e else "no END")
    if s and e: spans.append((float(s.group(1)), float(e.group(1))))
spans.sort()
print("trials with spans:", len(spans), "overlapping on the one GPU:", len(spans) == 2 and spans[1][0] < spans[0][1])
P
echo "== trialGpuNumber 2 on a machine of one GPU: a clear error, no wait"
sed -e 's/"trialGpuNumber": 1/"trialGpuNumber": 2/' -e 's/"maxTrialNumber": 4/"maxTrialNumber": 1/' config.yml > config4.yml
export NNIX_HOME=/tmp/g/home4
timeout 60 python3 -m nnix.cli.main create --config config4.yml --foreground --port 0 > fg4.log 2>&1; echo "exit: $? (3 expected)"; tail -2 fg4.log
