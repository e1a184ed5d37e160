import asyncio
import pytest, pytest_asyncio
from wsclient import Collector, Producer, consumer_url, module_cluster, unb64, decode_id

pytestmark = [pytest.mark.component]


async def test_dbg(messaging_cluster):
    cluster = await messaging_cluster(gateways=2)
    topic = "excl-cumulative"
    query = "subscriptionType=Exclusive&subscriptionInitialPosition=Earliest"
    consumer = await Collector.connect(consumer_url(cluster.ws(1), topic, "s", query))
    producer = await Producer.connect(cluster.ws(0), topic)
    ids = [(await producer.send(f"m{i}"))["messageId"] for i in range(12)]
    print([str(decode_id(i)) for i in ids])
    await consumer.wait_messages(12)
    await consumer.send({"type": "ackCumulative", "messageId": ids[6]})
    await asyncio.sleep(0.3)
    print("notices", consumer.notices)
    await consumer.close()
    again = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", query))
    await asyncio.sleep(3)
    print(
        "again",
        [(unb64(m["payload"]), str(decode_id(m["messageId"])), m["redeliveryCount"]) for m in again.messages],
        again.notices,
    )
    await again.close()
    again = await Collector.connect(consumer_url(cluster.ws(1), topic, "s", query))
    await asyncio.sleep(3)
    print(
        "again2",
        [(unb64(m["payload"]), str(decode_id(m["messageId"])), m["redeliveryCount"]) for m in again.messages],
        again.notices,
    )
    for g in cluster.gateways:
        print(open(g.log_path).read()[-3000:])
