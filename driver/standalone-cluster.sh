#!/usr/bin/env bash
# Start a local standalone Spark cluster from the pip install (a master and 4 one-core workers:
# 3 for the voters, one spare for the driver's Delta writes) and submit kraft-spark to it.
#   driver/standalone-cluster.sh [DATA_DIR]      (Ctrl-C stops the application and the cluster)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
test -x "$VENV/bin/python" || make "$VENV/.installed"
DATA_DIR=${1:-data-standalone}
SPARK_HOME=$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
export SPARK_HOME PYSPARK_PYTHON="$PWD/$VENV/bin/python"
LOGS="$DATA_DIR/cluster-logs"
mkdir -p "$LOGS"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
"$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host 127.0.0.1 --port 7077 --webui-port 8091 >"$LOGS/master.log" 2>&1 &
pids+=($!)
for i in 1 2 3 4; do
    "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
        --cores 1 --memory 1g --webui-port $((8091 + i)) --work-dir "$DATA_DIR/work-$i" \
        spark://127.0.0.1:7077 >"$LOGS/worker-$i.log" 2>&1 &
    pids+=($!)
done
echo "standalone cluster: master spark://127.0.0.1:7077 (UI http://127.0.0.1:8091), 4 workers"
# The workers' voters listen in plaintext on every interface of this host: allowed here, on
# one machine (docs/operations/security.md).
printf 'kraft.listener.plaintext.allowed=true\n' >"$DATA_DIR/standalone.properties"
"$VENV/bin/kraft-spark" run --data-dir "$DATA_DIR" --master spark://127.0.0.1:7077 \
    --config "$DATA_DIR/standalone.properties"
