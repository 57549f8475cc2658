"""The suite's CPU sampler (bench/cpu_sampler.py): each kind of process is named by its command
line, and a process's CPU is counted once, however often it is sampled."""

from __future__ import annotations

import os
import time

from bench.cpu_sampler import Sampler, kind_of


def test_each_kind_of_process_is_named_by_its_command_line() -> None:
    spark = "/usr/bin/java -cp x org.apache.spark.deploy.SparkSubmit --master local[2]"
    assert kind_of(f"{spark} /srv/flint_repl_job/main.py query_execution_result_local") == "job JVM"
    assert kind_of(f"{spark} pyspark-shell") == "test Spark JVM"
    assert kind_of("/usr/bin/python3.11 /srv/flint_repl_job/main.py query_execution_result_local") == "job Python"
    assert kind_of("java -cp jars/* org.codehaus.janino.SimpleCompiler M.java x org.apache.hadoop.hive.metastore.HiveMetaStore -p 1") == "metastore"
    node = "java -Xms512m -cp lib/*:janino.jar org.codehaus.janino.SimpleCompiler index/IndexNode.java asyncquery.jvm.IndexNode"
    assert kind_of(f"{node} index index/node.yml") == "index node"
    assert kind_of("python -u -c import sys;exec(eval(sys.stdin.readline()))") == "pytest workers"
    assert kind_of("/bin/true") == "other"


def test_a_process_cpu_is_counted_once_however_often_it_is_sampled() -> None:
    sampler = Sampler()
    mine = str(os.getpid())
    sampler.sample()
    first, kind = sampler.seen[mine]
    counted = sampler.total[kind]
    began = time.process_time()
    while time.process_time() - began < 0.3:  # CPU this process spends between two samples
        pass
    sampler.sample()
    spent = sampler.seen[mine][0] - first
    assert spent >= 0.25
    # (other processes of its kind may add to it; totals are sums of tick fractions: a tolerance)
    assert sampler.total[kind] - counted >= spent - 1e-6
    again = sampler.total[kind]
    before = time.process_time()
    sampler.sample()  # this process spent next to nothing since but the sampling: no more counted for it
    sampling = time.process_time() - before
    assert sampler.seen[mine][0] - first - spent < 0.1 + sampling
    assert sampler.report()["all"] >= again
