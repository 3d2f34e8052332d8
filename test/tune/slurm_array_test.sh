#!/usr/bin/env bash
# Tuning spread over a cluster with Slurm: starts a one-node
# Slurm cluster on loopback (slurmctld + slurmd, a config written here,
# auth/none so no munge key is needed), submits the shipped batch script
# tools/slurm/tune-array.sbatch as a 4-task array of a small tuning job,
# merges the four databases with `mhagen tune --merge`, and checks that
# every shard tuned its own part, that the merge kept every record once,
# and that `generate --db` picks a record of this machine class.
#   slurm_array_test.sh MHAGEN SOURCE_DIR
# Exits 77 (ctest: skipped) with the reason where Slurm is not installed or
# its daemons cannot start here.
set -uo pipefail
MHAGEN=$1
SRC=$2
skip() { echo "SKIP: $*"; exit 77; }
die() { echo "FAIL: $*"; exit 1; }
for tool in slurmctld slurmd sbatch sinfo; do
  command -v "$tool" >/dev/null || skip "$tool not found (Debian: slurm-wlm)"
done

WORK=$(mktemp -d /tmp/mhagen-slurm.XXXXXX)
export SLURM_CONF=$WORK/slurm.conf
cleanup() {
  for pidfile in "$WORK"/slurmd.pid "$WORK"/slurmctld.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
  done
  sleep 1
  rm -rf "$WORK"
}
trap cleanup EXIT

# Ports from the process id, so two runs on one machine do not collide.
PORT=$((20000 + ($$ % 20000) * 2))
NODE=$(hostname -s)
CPUS=$(nproc)
USER_NAME=$(id -un)
mkdir -p "$WORK/state" "$WORK/spool" "$WORK/dbs"
cat >"$SLURM_CONF" <<CONF
ClusterName=mhagentest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/none
CredType=cred/none
SlurmUser=$USER_NAME
SlurmdUser=$USER_NAME
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

slurmctld -i >"$WORK/slurmctld.out" 2>&1 ||
  skip "slurmctld did not start: $(tail -3 "$WORK/slurmctld.out" "$WORK/slurmctld.log" 2>/dev/null)"
slurmd >"$WORK/slurmd.out" 2>&1 ||
  skip "slurmd did not start: $(tail -3 "$WORK/slurmd.out" "$WORK/slurmd.log" 2>/dev/null)"
for _ in $(seq 60); do
  state=$(sinfo -h -o %T 2>/dev/null | head -1)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] ||
  skip "the Slurm node is '$state', not idle, after 30 s: $(tail -5 "$WORK/slurmd.log" 2>/dev/null)"
echo "one-node Slurm cluster up: node $NODE, $CPUS CPUs, port $PORT"

# A small spec, two trials per shard plus one re-measurement, one kernel
# thread per task.
export MHAGEN MHAGEN_TUNE_DIR=$WORK/dbs
export MHAGEN_TUNE_SPEC="--op sdpa --d 64 --h 2 --kv 1 --mask causal --target avx2"
export MHAGEN_TUNE_ARGS="--budget 2 --remeasure 1 --reps 2 --T 16 --threads 1"
start=$(date +%s)
timeout 900 sbatch --wait --array=0-3 --cpus-per-task=1 \
  --output="$WORK/task-%a.log" "$SRC/tools/slurm/tune-array.sbatch" ||
  { tail -n 20 "$WORK"/task-*.log; die "the array job failed"; }
echo "array of 4 tuning tasks done in $(( $(date +%s) - start )) s"

for i in 0 1 2 3; do
  db=$WORK/dbs/tune-$i.jsonl
  [ -s "$db" ] || { cat "$WORK/task-$i.log"; die "task $i wrote no database"; }
  grep -q "shard $i/4 (from SLURM_ARRAY_TASK_ID)" "$WORK/task-$i.log" ||
    { cat "$WORK/task-$i.log"; die "task $i did not take its shard from Slurm"; }
  # Every record of task i is of shard i/4 (no other shard's points).
  others=$(grep -v -c "\"shard\":\"$i/4\"" "$db")
  [ "$others" = 0 ] || die "task $i wrote $others records of another shard"
done

# Merge, twice over the same inputs: every record once.
total=$(cat "$WORK"/dbs/tune-*.jsonl | wc -l)
"$MHAGEN" tune --merge "$WORK"/dbs/tune-*.jsonl "$WORK"/dbs/tune-0.jsonl \
  -o "$WORK/all.jsonl" | tee "$WORK/merge.out" || die "merge failed"
merged=$(wc -l <"$WORK/all.jsonl")
[ "$merged" = "$total" ] || die "merged $merged records, expected $total"
dups=$(wc -l <"$WORK/dbs/tune-0.jsonl")
grep -q "($dups duplicates dropped)" "$WORK/merge.out" ||
  die "the merge did not drop the $dups duplicated records"
for i in 0 1 2 3; do
  grep -q "\"shard\":\"$i/4\"" "$WORK/all.jsonl" || die "shard $i/4 missing"
done

# The merged database serves generation, from this machine's class.
# shellcheck disable=SC2086
"$MHAGEN" generate $MHAGEN_TUNE_SPEC --db "$WORK/all.jsonl" \
  -o "$WORK/gen" >"$WORK/gen.out" 2>&1 || { cat "$WORK/gen.out"; die "generate --db failed"; }
grep -q "measured on this machine class" "$WORK/gen.out" ||
  { cat "$WORK/gen.out"; die "generate --db did not use this class's record"; }
grep -q '"machine_class"' "$WORK"/gen/*.json ||
  die "the manifest does not name the record's machine class"
echo "PASS: 4 shards tuned under Slurm, $merged records merged, generation tuned"
