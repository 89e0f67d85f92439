// node kip848_confluent.js BOOTSTRAP TOPIC GROUP CLIENT_ID — one KIP-848 member (group.protocol 'consumer') of
// @confluentinc/kafka-javascript (librdkafka underneath), through its KafkaJS-style API.
// Prints JSON lines on stdout: {"ev":"assignment","partitions":[...]} whenever its assignment changes (checked
// every 50 ms), {"ev":"record","partition":P,"offset":O,"key":K} per record, {"ev":"commit_error",...} when a
// commit fails. Auto commit is off: each record's offset+1 is committed (awaited) before the next record.
// SIGTERM: {"ev":"final","partitions":[...]}, disconnect (leaves the group), {"ev":"closed"}, exit 0.
const { Kafka, logLevel } = require('@confluentinc/kafka-javascript').KafkaJS;

const [bootstrap, topic, groupId, clientId] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
// assignment() returns one {topic, partition} per partition (its JSDoc says {topic, partitions})
const partitionsOf = (consumer) =>
  consumer.assignment().filter((tp) => tp.topic === topic).map((tp) => tp.partition).sort((a, b) => a - b);

(async () => {
  const kafka = new Kafka({ kafkaJS: { clientId, brokers: [bootstrap], logLevel: logLevel.WARN } });
  const consumer = kafka.consumer({
    kafkaJS: { groupId, fromBeginning: true, autoCommit: false },
    'group.protocol': 'consumer',
  });
  let last = '';
  const watch = setInterval(() => {
    try {
      const now = JSON.stringify(partitionsOf(consumer));
      if (now !== last) { last = now; out({ ev: 'assignment', partitions: JSON.parse(now) }); }
    } catch (e) { /* not connected yet */ }
  }, 50);
  let stopping = false;
  process.on('SIGTERM', async () => {
    if (stopping) return; // a second SIGTERM while leaving: the first one finishes
    stopping = true;
    try {
      clearInterval(watch);
      out({ ev: 'final', partitions: partitionsOf(consumer) });
      await consumer.disconnect();
      out({ ev: 'closed' });
      process.exit(0);
    } catch (e) { console.error(e); process.exit(1); }
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic] });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      out({ ev: 'record', partition, offset: Number(message.offset), key: message.key.toString() });
      const offset = (BigInt(message.offset) + 1n).toString();
      try {
        await consumer.commitOffsets([{ topic, partition, offset }]);
      } catch (e) {
        out({ ev: 'commit_error', partition, offset: Number(offset), error: String(e) });
      }
    },
  });
})().catch((e) => { console.error(e); process.exit(1); });
