#!/usr/bin/env bash
# The README's KIP-853 session: a node that knows only controller.quorum.bootstrap.servers joins,
# Kafka 4.4's kafka-metadata-quorum.sh describes the quorum with --bootstrap-server, and the
# node, restarted on another port, corrects its VotersRecord entry (UpdateRaftVoter).
# Usage: bash bench/sessions/dynamic_quorum.sh [DATA_DIR]   (needs `make` first; Java for Kafka's tool)
set -u
cd "$(dirname "$0")/../.."; export PATH="$PWD/.venv/bin:$PATH"
D=${1:-/tmp/s853}; rm -rf $D; mkdir -p $D
CP=$(python -c "from tests.kafka.kafka_dist import kafka_classpath; print(kafka_classpath())")
kafka_quorum() { java -cp "$CP" org.apache.kafka.tools.MetadataQuorumCommand "$@" 2>/dev/null; }
kraft-spark local --voters 3 --data-dir $D --base-port 29193 > $D/local.out 2>$D/local.err &
LOCAL=$!
sleep 6
cat $D/local.out
CID=$(cat $D/cluster.id)
echo "\$ kraft-spark format --cluster-id $CID --node-id 3 --log-dir $D/node-3"
kraft-spark format --cluster-id $CID --node-id 3 --log-dir $D/node-3
cat > $D/node-3.properties <<P
node.id=3
process.roles=controller
controller.listener.names=CONTROLLER
listeners=CONTROLLER://127.0.0.1:29196
log.dirs=$D/node-3
controller.quorum.bootstrap.servers=127.0.0.1:29194
# the quorum's listeners take SASL/PLAIN: the node's own identity, and add-controller's
kraft.sasl.plain.users.file=$D/quorum-users
super.users=User:admin
P
grep -v '^#' $D/admin.properties >> $D/node-3.properties; chmod 600 $D/node-3.properties
echo "\$ cat $D/node-3.properties"; sed 's/password="[^"]*"/password="..."/' $D/node-3.properties
echo "\$ kraft-spark node --config $D/node-3.properties &      # no voter list: it asks 127.0.0.1:29194"
kraft-spark node --config $D/node-3.properties > $D/node3.log 2>&1 &
N3=$!
sleep 3
echo "(node 3's log) $(grep -o 'the quorum at .*' $D/node3.log | head -1)"
echo "\$ kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 --command-config $D/node-3.properties add-controller"
for i in $(seq 1 20); do timeout 30 kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 --command-config $D/node-3.properties add-controller 2>$D/add.err && break; sleep 0.5; done
echo "\$ kafka-metadata-quorum.sh --bootstrap-server 127.0.0.1:29195 --command-config $D/admin.properties describe --status   # Kafka 4.4's tool, as for brokers"
kafka_quorum --bootstrap-server 127.0.0.1:29195 --command-config $D/admin.properties describe --status
echo "# node 3 restarts on another port; it corrects its VotersRecord entry (UpdateRaftVoter)"
kill $N3; wait $N3 2>/dev/null
sed -i 's/29196/29197/' $D/node-3.properties
echo "\$ kraft-spark node --config $D/node-3.properties &      # now CONTROLLER://127.0.0.1:29197"
kraft-spark node --config $D/node-3.properties > $D/node3b.log 2>&1 &
N3=$!
sleep 5
echo "\$ export KRAFT_SPARK_COMMAND_CONFIG=$D/admin.properties   # the administrator's client settings"
export KRAFT_SPARK_COMMAND_CONFIG=$D/admin.properties
echo "\$ kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 describe --status | grep CurrentVoters"
kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 describe --status | grep CurrentVoters
echo "(node 3's log) $(grep -o 'our listed endpoints.*' $D/node3b.log | head -1)"
echo "\$ kafka-metadata-quorum.sh --bootstrap-server 127.0.0.1:29193 --command-config $D/admin.properties describe --replication"
kafka_quorum --bootstrap-server 127.0.0.1:29193 --command-config $D/admin.properties describe --replication
DIR3=$(kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 describe --status --json | python -c "import json,sys; print(next(v['directoryId'] for v in json.load(sys.stdin)['currentVoters'] if v['id'] == 3))")
echo "\$ kafka-metadata-quorum.sh --bootstrap-controller 127.0.0.1:29193 --command-config $D/admin.properties remove-controller --controller-id 3 --controller-directory-id $DIR3"
kafka_quorum --bootstrap-controller 127.0.0.1:29193 --command-config $D/admin.properties remove-controller --controller-id 3 --controller-directory-id $DIR3
echo "\$ kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 reassign --voters 0,1,2,3@127.0.0.1:29197"
kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 reassign --voters 0,1,2,3@127.0.0.1:29197
echo "\$ kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 reassign --voters 0,1,3"
kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 reassign --voters 0,1,3
echo "# without the administrator's settings"
unset KRAFT_SPARK_COMMAND_CONFIG
echo "\$ kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 describe --status"
kraft-spark metadata-quorum --bootstrap-controller 127.0.0.1:29193 describe --status 2>&1; echo "(exit $?)"
kill $N3 $LOCAL; wait 2>/dev/null
