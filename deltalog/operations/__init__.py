"""Table maintenance that needs no Spark, one module each: `vacuum.vacuum`, `restore.restore`,
`clone.clone`. The change data feed (rows changed between versions) is `deltalog.change_data`.

The package does not re-export the functions: `from deltalog.operations import vacuum` is the module.
"""
