"""Where this process's Spark runs: a JVM of the process (`jvm`), a long-lived local server that dbt
commands attach to (`spark_server`), and the one `Runtime` (`session`) that holds what the process
keeps between statements: the SparkSession its connections share and that session's views."""
