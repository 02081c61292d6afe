"""Table maintenance that needs no Spark, one module each: `vacuum.vacuum`, `restore.restore`,
`changes.added_files` / `changes.changes_snapshot` (the files added between two versions).

The package does not re-export the functions: `from deltalog.operations import vacuum` is the module.
"""
