#!/bin/bash
# Whole models on a lent GPU machine (bench_remote_device.py, "models"): run there from
# the repository root, $OUT set, with the bundles (`bench_remote_device.py pack`, or
# `frontier lut front`) in DIR: bash benchmarks/remote_models.sh DIR b1 b2 ...
# Each bundle on the CPU (core 2 where there is one; 1 thread): plain loop A (30 warm-up runs), protocol A,
# plain loop B (2 s of warm-up), protocol B, one at a time; then on the GPU: runner_torch
# (CUDA events) and a plain loop synchronised after each run. $OUT/results.tgz.
D=$1; shift
R=/tmp/frontier-models; mkdir -p $R; export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)|Hypervisor"; } > $R/machine.txt 2>&1
cat $R/machine.txt
pin() { if taskset -c $1 true 2>/dev/null; then taskset -c "$@"; else shift; "$@"; fi; }
plain() { timeout 100 python3 benchmarks/bench_remote_device.py plain "$@" --kind front; }
cpu() { timeout 150 python3 latency_models/runner.py "$@" --device gpu-host-cpu; }
for b in "$@"; do
  echo "== $b cpu"
  pin 2 bash -c "$(declare -f plain cpu); plain $D/$b.zip --engine ort --out $R/plainA-cpu-$b.json
    cpu $D/$b.zip --out $R/cpuA-$b.csv
    PLAIN_WARMUP_S=2 plain $D/$b.zip --engine ort --out $R/plainB-cpu-$b.json
    cpu $D/$b.zip --out $R/cpuB-$b.csv" 2>&1 | grep -E "^plain|^wrote"
done
for b in "$@"; do
  echo "== $b gpu"
  pin 4 timeout 120 python3 latency_models/runner_torch.py $D/$b.zip --device gpu-cuda \
    --out $R/cuda-$b.csv 2>&1 | tail -1
  pin 4 bash -c "$(declare -f plain); plain $D/$b.zip --engine cuda --out $R/plain-cuda-$b.json" 2>&1 | tail -1
done
tar czf $OUT/results.tgz -C $R .
