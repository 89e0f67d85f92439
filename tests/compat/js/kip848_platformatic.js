// node kip848_platformatic.js BOOTSTRAP TOPIC GROUP CLIENT_ID — one KIP-848 member (groupProtocol 'consumer')
// of @platformatic/kafka (pure JavaScript), reading a MessagesStream in mode 'committed' (fallback 'earliest').
// Prints JSON lines on stdout: {"ev":"assignment","partitions":[...]} whenever its assignment changes (checked
// every 50 ms), {"ev":"record","partition":P,"offset":O,"key":K} per record, {"ev":"commit_error",...} when a
// commit fails, {"ev":"commit_retry",...} and {"ev":"dropped",...} for the two work-arounds below. Autocommit is
// off: each record's message.commit() is awaited before the next record.
// SIGTERM: {"ev":"final","partitions":[...]}, close (leaves the group), {"ev":"closed"}, exit 0.
const { Consumer, stringDeserializers } = require('@platformatic/kafka');

const [bootstrap, topic, groupId, clientId] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const partitionsOf = (consumer) => (consumer.assignments || [])
  .filter((a) => a.topic === topic).flatMap((a) => a.partitions).sort((a, b) => a - b);

(async () => {
  const consumer = new Consumer({
    clientId, groupId, bootstrapBrokers: [bootstrap], groupProtocol: 'consumer',
    deserializers: stringDeserializers, maxWaitTime: 500,
  });
  let last = '';
  const watch = setInterval(() => {
    const now = JSON.stringify(partitionsOf(consumer));
    if (now !== last) { last = now; out({ ev: 'assignment', partitions: JSON.parse(now) }); }
  }, 50);
  let stream = null;
  let stopping = false;
  process.on('SIGTERM', async () => {
    if (stopping) return; // a second SIGTERM while leaving: the first one finishes
    stopping = true;
    try {
      clearInterval(watch);
      out({ ev: 'final', partitions: partitionsOf(consumer) });
      if (stream) await stream.close();
      await consumer.close();
      out({ ev: 'closed' });
      process.exit(0);
    } catch (e) { console.error(e); process.exit(1); }
  });
  stream = await consumer.consume({ topics: [topic], mode: 'committed', fallbackMode: 'earliest', autocommit: false });
  stream.on('error', (e) => { console.error(e); process.exit(1); });
  for await (const message of stream) {
    // 1.35.0 keeps delivering records it fetched before a revocation from the stream's buffer, after it told
    // the coordinator it gave the partition up (and their commits land on the new owner's): skip them
    if (!partitionsOf(consumer).includes(message.partition)) {
      out({ ev: 'dropped', partition: message.partition, offset: Number(message.offset) });
      continue;
    }
    out({ ev: 'record', partition: message.partition, offset: Number(message.offset), key: message.key });
    // a commit sent with the member epoch the heartbeat in flight just replaced gets STALE_MEMBER_EPOCH,
    // which 1.35.0 does not retry itself (librdkafka does): retry a few times once the new epoch is in
    for (let attempt = 1; ; attempt++) {
      try {
        await message.commit();
        break;
      } catch (e) {
        const stale = Boolean(e.findBy?.('apiId', 'STALE_MEMBER_EPOCH'));
        if (!stale || attempt === 10) {
          out({ ev: 'commit_error', partition: message.partition, offset: Number(message.offset) + 1,
                error: String(e), causes: String(e.errors?.map((x) => x.apiId ?? String(x))) });
          break;
        }
        out({ ev: 'commit_retry', partition: message.partition, offset: Number(message.offset) + 1, attempt });
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  }
})().catch((e) => { console.error(e); process.exit(1); });
