#!/usr/bin/env bash
# f46's first measurement (22:48-22:53 UTC, one H200): the 128-token tile (KIMIMOE_FP4_TOKENS=128, one CTA an SM)
# with more token stages, more weight steps in flight and A double-buffered, against the 64-token default; then ncu
# on GEMM1/GEMM2 at M=2048. Binaries (built here from commit 0ad0333 plus the F4_PIPE_FULL tunable, later
# f4PipeMinTokens): kimimoe (f4Stages t64 4 / t128 3), kimimoe_s (t64 6 / t128 5, abi.go edited for the build),
# kimimoe_s6 (t64 4 / t128 6). The call before it (22:38 UTC) hit its limit: a bare `wait` also waited for the
# tee of the process substitution; its compiles were cached for this one.
set -uo pipefail
export KIMIMOE_CACHE=/tmp/kc NCCL_NVLS_ENABLE=0
exec > >(tee $OUT/exp_t128.log) 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
T0=$(date +%s); PIDS=""
declare -A BIN=( [base]=kimimoe [a4]=kimimoe [s5]=kimimoe_s [s5a4]=kimimoe_s [s5p]=kimimoe_s [s5pa4]=kimimoe_s [s6pa4]=kimimoe_s6 [s6a4]=kimimoe_s6 )
declare -A DEF=( [base]="" [a4]="KMOE_F4_AHEAD_T128=4" [s5]="" [s5a4]="KMOE_F4_AHEAD_T128=4" [s5p]="KMOE_F4_PIPE_FULL=128"
  [s5pa4]="KMOE_F4_PIPE_FULL=128 KMOE_F4_AHEAD_T128=4" [s6pa4]="KMOE_F4_PIPE_FULL=128 KMOE_F4_AHEAD_T128=4" [s6a4]="KMOE_F4_AHEAD_T128=4" )
VARS="base s5 s5a4 s5p s5pa4 s6pa4"
ls /tmp/kc 2>/dev/null | wc -l
for v in $VARS; do
  KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" KIMIMOE_NVRTC_VERBOSE=1 timeout 280 .gpu/${BIN[$v]} bench --backend cuda --k 256 --n 256 --m 1 --rounds 1 --warmup 0 --copy-mb 64 > /tmp/c_$v.txt 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "compiled (t=$(( $(date +%s) - T0 )) s)"
for v in $VARS; do
  echo "$v: $(grep -a -A3 -E "entry function 'kmoe_f4_gemm(1_act|2)_t(64|128)'" /tmp/c_$v.txt | grep -a -o -E "kmoe_f4_gemm[0-9a-z_]*t(64|128)|[0-9]+ bytes spill stores|Used [0-9]+ registers" | tr '\n' ' ')"
  grep -a -i -E "error|serializ" /tmp/c_$v.txt | head -3
done
MS=512,1024,2048,8192
run() { # name pass tokens
  echo "== $1 [${BIN[$1]} ${DEF[$1]}] tokens=${3:-auto} pass $2 (t=$(( $(date +%s) - T0 )) s)"
  KIMIMOE_NVRTC_DEFINES="${DEF[$1]}" KIMIMOE_FP4_TOKENS=${3:-0} timeout 100 .gpu/${BIN[$1]} bench --backend cuda --m $MS --rounds 15 --copy-mb 256 > /tmp/b.txt 2>&1
  grep -a -E "^ +[0-9]" /tmp/b.txt
}
for p in 1 2; do
  [ $(( $(date +%s) - T0 )) -gt 330 ] && break
  run base $p; run s5 $p
  for v in $VARS; do run $v $p 128; done
done
echo "benches done (t=$(( $(date +%s) - T0 )) s)"
MET="gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum,sm__warps_active.avg.per_cycle_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
for v in base s5pa4; do
  [ $(( $(date +%s) - T0 )) -gt 470 ] && break
  tok=128; [ $v = base ] && tok=0
  echo "######## ncu $v tokens=$tok M=2048 (t=$(( $(date +%s) - T0 )) s)"
  KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" KIMIMOE_FP4_TOKENS=$tok timeout 100 ncu --clock-control none --kernel-name regex:kmoe_f4_gemm --launch-count 2 --metrics "$MET" \
    .gpu/${BIN[$v]} bench --backend cuda --m 2048 --rounds 1 --graph=false --copy-mb 64 2>&1 | grep -a -v -E "^ +-+" | grep -a -E "kmoe_|__|==PROF"
done
for v in s5pa4; do
  [ $(( $(date +%s) - T0 )) -gt 530 ] && break
  echo "validate $v tokens=128: $(KIMIMOE_NVRTC_DEFINES="${DEF[$v]}" KIMIMOE_FP4_TOKENS=128 timeout 60 .gpu/${BIN[$v]} validate --backend cuda --suite all --require-situ --json $OUT/validate_t128_$v.json 2>&1 | grep -a "validate:" | tail -1)"
done
echo "t=$(( $(date +%s) - T0 )) s"; date -u
