"""The Spark data path of each table operation, one module each (`write`, `delete`, `merge`, `alter`),
over shared `rows` (finding and marking rows in files) and `files` (file tables as actions). Imported
through `deltalog.spark.operations`."""
