"""Loading the plugin freezes what the process holds (gc.freeze) and makes the collector run less
often, unless the process set its own thresholds: a dbt command's collections, and the one at exit,
then skip dbt's and our modules. Objects made later are collected as before."""

import subprocess
import sys
import textwrap


def test_plugin_import_freezes_modules_and_later_cycles_are_still_collected():
    code = textwrap.dedent("""
        import gc, weakref
        assert gc.get_freeze_count() == 0
        import dbt.adapters.deltalog
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
        import gc
        gc.set_threshold(500, 5, 5)
        import dbt.adapters.deltalog
        assert gc.get_threshold() == (500, 5, 5), gc.get_threshold()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr
