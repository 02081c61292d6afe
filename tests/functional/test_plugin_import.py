"""Loading the plugin (dbt takes the package's `Plugin`) in the `dbt` command's process freezes what the
process holds (gc.freeze) and makes the collector run less often, unless the process set its own
thresholds: a dbt command's collections, and the one at exit, then skip dbt's and our modules. Objects
made later are collected as before. A host process that imports dbt (an orchestrator running dbtRunner)
keeps its collector as it was. A process that runs one part of the package (the Spark server) imports no more than that part."""

import subprocess
import sys
import textwrap


def test_plugin_import_freezes_modules_and_later_cycles_are_still_collected():
    code = textwrap.dedent("""
        import gc, sys, weakref
        assert gc.get_freeze_count() == 0
        sys.argv[0] = "/somewhere/bin/dbt"  # the dbt command's console script
        from dbt.adapters.deltalog import Plugin  # as dbt's adapter factory takes it
        frozen = gc.get_freeze_count()
        assert frozen > 50_000, f"only {frozen} objects frozen"
        assert gc.get_threshold() == (10_000, 10, 10), gc.get_threshold()

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle only the collector can free
        ref = weakref.ref(a)
        del a, b
        gc.collect()
        assert ref() is None, "a cycle made after the plugin loaded was not collected"
        assert gc.get_freeze_count() == frozen
        print("ok", frozen)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")


def test_a_process_s_own_collector_thresholds_are_kept():
    code = textwrap.dedent("""
        import gc, sys
        sys.argv[0] = "/somewhere/bin/dbt"
        gc.set_threshold(500, 5, 5)
        from dbt.adapters.deltalog import Plugin
        assert gc.get_threshold() == (500, 5, 5), gc.get_threshold()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr


def test_a_host_process_keeps_its_collector_as_it_was():
    code = textwrap.dedent("""
        import gc
        before = gc.get_threshold()
        from dbt.cli.main import dbtRunner
        from dbt.adapters.deltalog import Plugin
        dbtRunner().invoke(["--version"])
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0, (gc.get_threshold(), gc.get_freeze_count())
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_the_spark_server_starts_without_dbts_adapter_machinery():
    # the server process (`python -m ...runtime.spark_server serve`) is on a first build's way to Spark:
    # dbt's adapter base and our adapter are a second of imports it does not use
    code = textwrap.dedent("""
        import sys
        import dbt.adapters.deltalog.runtime.spark_server, dbt.adapters.deltalog.runtime.jvm
        loaded = [m for m in ("dbt.adapters.base", "dbt.adapters.deltalog.impl", "agate") if m in sys.modules]
        assert not loaded, loaded
        from dbt.adapters.deltalog import DeltalogAdapter, DeltalogCredentials, Plugin
        assert Plugin.adapter is DeltalogAdapter and Plugin.credentials is DeltalogCredentials
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr
