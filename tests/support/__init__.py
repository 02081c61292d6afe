"""What the tests use and are not tests: real servers started and stopped by a test, jars, data and
helpers, imported as `from tests.support.<module> import …` (tests/conftest.py puts the repository on
sys.path). One line each:

Servers
  azurite          Azurite, a real Azure Blob server on 127.0.0.1 (npm installs it into .ci-cache once)
  seaweed          SeaweedFS (`weed mini`), a real S3 server on 127.0.0.1 with one bucket and one key
  dropping_proxy   an HTTP proxy before an S3 server that drops chosen responses after the server acted
  hive_metastore   a real Hive Metastore (pyspark's jars, Derby) on 127.0.0.1
  kafka_broker     a real Kafka broker (KRaft mode, jars from Maven Central) on 127.0.0.1
  spark_connect    a real Spark Connect server from pyspark's distribution
  standalone       a real Spark standalone cluster (master and workers); free ports, waits, process groups

Jars
  maven            jar sets resolved from Maven Central with `mvn` into .ci-cache/maven (`jars(name)`)
  hadoop_aws       Spark's S3A connector (hadoop-aws and the AWS SDK modules) and its Spark settings

Data and projects
  shared_data      where the conformance tables (../shared/conformance) are; skip outside CI, fail in it
  soak_project     the generated dbt project of about 40 nodes the soak takes through a day of commands
  dbt_process      dbt commands run as a user runs them, each its own process, on a small project
  shop_oracle      what the shop project's tables must hold, recomputed from its seed CSVs with pandas alone
  shop_project     the shop project's nodes by kind, their schemas, batch 2's flags, the every-kind selection
  python_env       the environments some tests run in beside this one (another pyspark or dbt-core), made with uv

Test helpers
  selection        what the suite runs of its slowest cases; DELTALOG_FULL_SUITE=1 runs them all
  own_process      run a test file again in a pytest process of its own (a JVM with a connector on it)
  races            a forced race: the winner commits inside the loser's commit
  table_checks     what a user checks after a crash or a race: contiguous log, crc, rows, orphaned files
  row_ids          row IDs of a row-tracked table as a reader reconstructs them, and each version's checks
  iceberg_readers  read a table of ours as Iceberg (pyiceberg, a SQLite catalog) and compare with delta-rs
"""
