"""The same read on a standalone Spark cluster: a master and a worker started from the
pip install (spark-daemon.sh), the connector auto-registered on the worker. Slow
(the worker takes 20-30 s to register): marked ``standalone``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest
from publish import Sent, publish

from coordination.ports import free_ports

pytestmark = [pytest.mark.component, pytest.mark.standalone, pytest.mark.timeout(900)]

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"

JOB = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).appName("folio-standalone")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.executor.memory", "1g").config("spark.cores.max", "2").getOrCreate())
df = spark.read.format("folio").options(etcd=sys.argv[2], etcdNamespace=sys.argv[3], topic=sys.argv[4]).load()
print("COUNT", df.count(), sorted(r.value.decode() for r in df.select("value").collect())[:3])
spark.stop()
"""


def test_read_on_a_standalone_master_and_worker(folio, source_options, tmp_path: Path):
    topic = "persistent://public/default/spark-standalone"
    publish(folio.urls[0], topic, [Sent(topic, None, f"s{i:04d}".encode()) for i in range(1000)])
    home = Path(pyspark.__file__).parent
    port = free_ports(1)[0]
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_PID_DIR": str(tmp_path / "pids"),
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
    }
    daemon = str(home / "sbin" / "spark-daemon.sh")
    url = f"spark://127.0.0.1:{port}"
    master_args = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_ports(1)[0])]
    worker_args = [
        "--host",
        "127.0.0.1",
        "--cores",
        "2",
        "--memory",
        "2g",
        "--webui-port",
        str(free_ports(1)[0]),
        url,
    ]
    subprocess.run([daemon, "start", MASTER, "1", *master_args], env=env, check=True, timeout=60)
    try:
        subprocess.run([daemon, "start", WORKER, "1", *worker_args], env=env, check=True, timeout=60)
        started = time.monotonic()
        while "Successfully registered with master" not in "".join(
            p.read_text(errors="replace") for p in (tmp_path / "logs").glob("*Worker*.out")
        ):
            assert time.monotonic() - started < 180, "the worker did not register"
            time.sleep(0.5)
        print(f"standalone: worker registered after {time.monotonic() - started:.1f} s")
        job = subprocess.run(
            [sys.executable, "-c", JOB, url, source_options["etcd"], source_options["etcdNamespace"], topic],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert job.returncode == 0, job.stderr[-3000:]
        assert "COUNT 1000 ['s0000', 's0001', 's0002']" in job.stdout
    finally:
        subprocess.run([daemon, "stop", WORKER, "1"], env=env, timeout=60)
        subprocess.run([daemon, "stop", MASTER, "1"], env=env, timeout=60)
