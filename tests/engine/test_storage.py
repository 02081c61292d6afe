import multiprocessing
import os

import pytest

from deltalog.errors import NotATableError
from deltalog.storage.log_store import LocalLogStore, LogStore, classify
from deltalog.storage import log_store_for


def _names(files):
    return [f.name for f in files]


def test_list_from_sorts_classifies_and_ignores_hidden_files(tmp_path):
    log = tmp_path / "_delta_log"
    log.mkdir()
    names = ["00000000000000000000.json", "00000000000000000001.json", "00000000000000000002.json",
             "00000000000000000002.checkpoint.parquet", "00000000000000000002.crc",
             "00000000000000000001.checkpoint.0000000001.0000000002.parquet",
             "00000000000000000001.checkpoint.0000000002.0000000002.parquet",
             "00000000000000000010.json", "_last_checkpoint", ".00000000000000000000.json.crc",
             ".tmp-abc", "notes.txt", "00000000000000000003.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json"]
    for n in names:
        (log / n).write_bytes(b"x" * 3)
    store = LocalLogStore(str(tmp_path))
    files = store.list_from(0)
    assert _names(files) == [
        "00000000000000000000.json",
        "00000000000000000001.checkpoint.0000000001.0000000002.parquet",
        "00000000000000000001.checkpoint.0000000002.0000000002.parquet",
        "00000000000000000001.json",
        "00000000000000000002.checkpoint.parquet", "00000000000000000002.crc",
        "00000000000000000002.json",
        "00000000000000000003.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json",
        "00000000000000000010.json", "_last_checkpoint"]
    kinds = {f.name: f for f in files}
    part = kinds["00000000000000000001.checkpoint.0000000002.0000000002.parquet"]
    assert (part.kind, part.version, part.part, part.num_parts) == ("checkpoint", 1, 2, 2)
    assert kinds["00000000000000000002.crc"].kind == "crc"
    assert kinds["_last_checkpoint"].kind == "last_checkpoint"
    assert kinds["00000000000000000003.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json"].v2
    assert all(f.size == 3 and f.modification_time > 0 for f in files)
    assert _names(store.list_from(2))[:3] == ["00000000000000000002.checkpoint.parquet",
                                              "00000000000000000002.crc", "00000000000000000002.json"]
    assert "00000000000000000001.json" not in _names(store.list_from(2))


def test_classify_other_names():
    assert classify("00000000000000000005.json.tmp")[1] == "other"
    assert classify("0005.json")[1] == "other"


def test_missing_log_folder_is_not_a_table(tmp_path):
    with pytest.raises(NotATableError, match=str(tmp_path)):
        LocalLogStore(str(tmp_path)).list_from(0)


def test_write_if_absent_never_overwrites(tmp_path):
    store = LocalLogStore(str(tmp_path / "t"))
    store.write_if_absent("00000000000000000000.json", b"first\n")
    with pytest.raises(FileExistsError):
        store.write_if_absent("00000000000000000000.json", b"second\n")
    assert store.read("00000000000000000000.json") == b"first\n"
    # no temp files left behind
    assert os.listdir(tmp_path / "t" / "_delta_log") == ["00000000000000000000.json"]


def _race(args):
    path, writer = args
    try:
        LocalLogStore(path).write_if_absent("00000000000000000001.json", f"writer {writer}\n".encode())
        return writer
    except FileExistsError:
        return None


def test_write_if_absent_one_winner_among_racing_processes(tmp_path):
    path = str(tmp_path / "t")
    os.makedirs(os.path.join(path, "_delta_log"))
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.map(_race, [(path, i) for i in range(16)])
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert LocalLogStore(path).read("00000000000000000001.json") == f"writer {winners[0]}\n".encode()


def test_write_atomic_replaces_and_delete(tmp_path):
    os.makedirs(tmp_path / "_delta_log")
    store = LocalLogStore(str(tmp_path))
    store.write_atomic("_last_checkpoint", b'{"version":1}')
    store.write_atomic("_last_checkpoint", b'{"version":2}')
    assert store.read("_last_checkpoint") == b'{"version":2}'
    store.delete("_last_checkpoint")
    store.delete("_last_checkpoint")  # already gone: fine
    with pytest.raises(FileNotFoundError):
        store.read("_last_checkpoint")


def test_only_version_zero_creates_the_log_folder(tmp_path):
    """A table deleted while a writer ran must stay deleted: no later commit, checksum or checkpoint
    file recreates `_delta_log` holding just itself."""
    store = LocalLogStore(str(tmp_path / "t"))
    for write, name in ((store.write_if_absent, "00000000000000000003.json"),
                        (store.write_if_absent, "00000000000000000003.crc"),
                        (store.write_atomic, "_last_checkpoint")):
        with pytest.raises(NotATableError, match="deleted"):
            write(name, b"x")
    assert not (tmp_path / "t").exists()
    store.write_if_absent("00000000000000000000.json", b"first\n")
    assert os.listdir(tmp_path / "t" / "_delta_log") == ["00000000000000000000.json"]


def test_log_store_for_paths_and_file_uris(tmp_path):
    a = log_store_for(str(tmp_path / "x y"))
    b = log_store_for((tmp_path / "x y").as_uri())  # file:///...x%20y
    c = log_store_for("file://" + str(tmp_path / "x y"))
    assert isinstance(a, LogStore) and a.table_uri == b.table_uri == c.table_uri == str(tmp_path / "x y")
    from deltalog.storage.object_store import ObjectLogStore

    s3 = log_store_for("s3://bucket/table", {"AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"})
    assert isinstance(s3, ObjectLogStore) and s3.table_uri == "s3://bucket/table"
    with pytest.raises(ValueError, match="ftp"):
        log_store_for("ftp://host/table")
