"""A JVM data source that owns a sink's short name, as on Databricks or Dataproc.

Spark looks JVM data sources up before Python ones, so where a platform ships a JVM
connector under ``postgresql``, ``bigquery``, ``kinesis``, ``pubsub`` or ``iceberg``,
``format(name)`` silently reaches it instead of quixsinks. Here a real clash is made: a
JVM class registered (``META-INF/services``) under the short name ``file``, compiled
against this pyspark's jars and put on the driver's class path of a new session. In it,
``quixsinks.register`` must say once which JVM class owns ``file`` and name the alias
``qs_file``; the alias writes; ``format("file")`` reaches the JVM class.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyspark
import pytest

JAVA_SOURCE = """
package quixsinks_test;

/** Owns the short name "file" in Spark's lookup, as a platform's connector would. */
public class ClashSource implements org.apache.spark.sql.sources.DataSourceRegister {
    public String shortName() { return "file"; }
}
"""

JOB = """
import json, logging, os, sys
from quixsinks.spark.session import local_session

logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
spark = local_session("quixsinks-clash-test", cores=1, **{
    "spark.driver.extraClassPath": sys.argv[1],
})
import quixsinks

results = {"registered": quixsinks.register(spark)}
quixsinks.register(spark)  # a second call says nothing more
df = spark.range(3)
df.write.format("qs_file").mode("append").save(sys.argv[2] + "/alias")
results["alias_rows"] = spark.read.json(sys.argv[2] + "/alias").count()
try:
    df.write.format("file").mode("append").save(sys.argv[2] + "/short")
    results["short"] = "written"
except Exception as exc:
    results["short"] = str(exc)[:2000]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def clash_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if not (javac and jar):
        pytest.fail("javac and jar are needed to build the clashing JVM data source (a JDK)")
    tmp = tmp_path_factory.mktemp("clash")
    source = tmp / "src" / "quixsinks_test" / "ClashSource.java"
    source.parent.mkdir(parents=True)
    source.write_text(JAVA_SOURCE)
    classes = tmp / "classes"
    spark_jars = Path(pyspark.__file__).parent / "jars" / "*"
    subprocess.run(
        [javac, "-cp", str(spark_jars), "-d", str(classes), str(source)],
        check=True,
        timeout=120,
    )
    services = classes / "META-INF" / "services"
    services.mkdir(parents=True)
    (services / "org.apache.spark.sql.sources.DataSourceRegister").write_text(
        "quixsinks_test.ClashSource\n"
    )
    path = tmp / "clash.jar"
    subprocess.run([jar, "cf", str(path), "-C", str(classes), "."], check=True, timeout=120)
    return path


def test_register_names_the_jvm_owner_once_and_the_alias_writes(
    clash_jar: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(JOB), str(clash_jar), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    warnings = [line for line in result.stderr.splitlines() if "quixsinks.registry" in line]
    assert len(warnings) == 1, result.stderr[-4000:]
    assert "format('file') reaches the JVM data source quixsinks_test.ClashSource" in warnings[0]
    assert "use format('qs_file')" in warnings[0]
    assert "file" in report["registered"]
    assert "qs_file" in report["registered"]
    assert report["alias_rows"] == 3
    assert report["short"] != "written"  # the JVM class owns the name
    assert "quixsinks_test.ClashSource" in report["short"], report["short"]
